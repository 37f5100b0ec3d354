"""prometheus_client's API unchanged through shmwin's value class: Summary, .time(),
.track_inprogress(), count_exceptions(), a registry of its own, threads; Info and Enum stay in
their process, as in prometheus_client's multiprocess mode (docs/metrics.md)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, Summary
from support.helpers import in_threads
from support.metrics import samples

import shmwin.integrations.prometheus as shp

pytestmark = [pytest.mark.integration]


def test_the_helpers_of_every_metric_type_work_unchanged(app):
    shp.multiprocess(app)
    s = Summary("s", "help", registry=None)
    h = Histogram("h", "help", buckets=(1.0,), registry=None)
    g = Gauge("g", "help", multiprocess_mode="livesum", registry=None)
    c = Counter("c", "help", registry=None)
    s.observe(2.5)
    with h.time(), g.track_inprogress():
        assert samples(app)[("g", ())] == 1.0
    with pytest.raises(KeyError), c.count_exceptions(KeyError):
        raise KeyError("x")
    got = samples(app)
    assert got[("s_count", ())] == 1.0 and got[("s_sum", ())] == 2.5
    assert got[("h_count", ())] == 1.0 and got[("g", ())] == 0.0 and got[("c_total", ())] == 1.0


def test_info_and_enum_live_in_their_process(app):
    shp.multiprocess(app)
    registry = CollectorRegistry()
    i = Info("build", "help", registry=registry)
    e = Enum("state", "help", states=["up", "down"], registry=registry)
    i.info({"version": "1"})
    e.state("down")
    assert registry.get_sample_value("build_info", {"version": "1"}) == 1.0  # its own registry
    assert registry.get_sample_value("state", {"state": "down"}) == 1.0
    assert not any(name.startswith(("build", "state")) for name, _ in samples(app))


def test_threads_adding_at_once_are_exact(app):
    shp.multiprocess(app)
    c = Counter("c", "help", registry=None)
    g = Gauge("g", "help", multiprocess_mode="sum", registry=None)

    def adder() -> None:
        for _ in range(10_000):
            c.inc()
            g.inc()

    in_threads(adder, 4)
    got = samples(app)
    assert got[("c_total", ())] == 40_000.0 and got[("g", ())] == 40_000.0
