"""A distribution in the tools (``shmwin ls/show``, the Prometheus export) and the shared
``Summary`` of shmwin.integrations.prometheus_summary, written from several processes."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.cli_support import cli

import shmwin
from shmwin import Distribution
from shmwin.integrations.prometheus_summary import Summary, collect_summaries, segment_name

pytestmark = pytest.mark.integration


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def test_show_ls_and_export_give_count_quantiles_min_and_max(name):
    d = Distribution(name, ("1m/1s", "1h/1m"))
    try:
        x = np.linspace(0.01, 1.0, 100)
        d.record_many(x)
        shown = cli("show", name).stdout
        assert shown.startswith(f"{name} (distribution)\n")
        assert "count 100  p50 " in shown and "min 0.01  max 1" in shown
        assert "distribution" in cli("ls", name).stdout
        text = cli("export", "--format", "prometheus", name).stdout
        types = {f.name: f.type for f in text_string_to_metric_families(text)}
        assert types["shmwin_distribution"] == "summary"
        got = _samples(text)
        labels = (("resolution", "1m/1s"), ("window", name))
        assert got[("shmwin_distribution_count", labels)] == 100
        assert got[("shmwin_distribution_sum", labels)] == pytest.approx(x.sum())
        assert got[("shmwin_distribution_min", labels)] == 0.01
        assert got[("shmwin_distribution_max", labels)] == 1.0
        p99 = got[("shmwin_distribution", (("quantile", "0.99"), *labels))]
        assert p99 == pytest.approx(np.quantile(x, 0.99, method="lower"), rel=0.01)
    finally:
        d.unlink()


def test_show_of_a_keyed_distribution_lists_the_keys_with_the_most_values(name):
    d = Distribution(name, ("1m/1s",), keyed=True)
    try:
        d.record_many([0.1, 0.2, 0.3], key="GET /users")
        d.record(1.0, key="POST /login")
        shown = cli("show", name).stdout  # a KeyError ('keys') once, exit status 2
        assert "keys with the most values (2)" in shown, shown
        assert shown.index("GET /users") < shown.index("POST /login"), shown
        one = cli("show", "--key", "POST /login", name).stdout
        assert "count 1 " in one and "min 1  max 1" in one, one
    finally:
        d.unlink()


def _observe(app: str, metric: str, values: list[float]) -> None:
    s = Summary(metric, "Latency", ["route"], app=app, registry=None)
    for v in values:
        s.labels("/users").observe(v)
    s.close()


def test_a_summary_shared_by_processes_scrapes_the_same_from_any_of_them(make_name):
    app = make_name("app")
    registry = CollectorRegistry()
    s = Summary("req_seconds", "Request latency", ["route"], app=app, registry=registry)
    try:
        procs = [mp.get_context("fork").Process(target=_observe, args=(app, "req_seconds", [0.1] * 50))
                 for _ in range(2)]  # fmt: skip
        for p in procs:
            p.start()
        s.labels(route="/users").observe(0.3)
        with s.labels("/orders").time():
            pass
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        got = _samples(generate_latest(registry).decode())
        assert got[("req_seconds_count", (("route", "/users"),))] == 101
        assert got[("req_seconds_sum", (("route", "/users"),))] == pytest.approx(10.3)
        for q in ("0.5", "0.99"):
            users = (("quantile", q), ("route", "/users"))
            assert got[("req_seconds", users)] == pytest.approx(0.1, rel=0.01)
        assert got[("req_seconds_count", (("route", "/orders"),))] == 1
        elsewhere = CollectorRegistry()
        elsewhere.register(_Families(app))
        other = _samples(generate_latest(elsewhere).decode())
        assert {k: v for k, v in other.items() if k[0].startswith("req_")} == got
    finally:
        s.unlink()


class _Families:
    """collect_summaries(app) as a collector: what MultiProcessCollector(registry, app) yields."""

    def __init__(self, app: str):
        self.app = app

    def collect(self):  # type: ignore[no-untyped-def]
        return collect_summaries(self.app)


def test_summary_refuses_what_it_cannot_store_whole(make_name):
    from shmwin.backends.shm import format as words
    from shmwin.integrations import prometheus_summary

    assert prometheus_summary.MAX_STORED_KEY == words.MAX_STORED_KEY
    app = make_name("app")
    s = Summary("x_seconds", "X", ["route"], app=app, registry=None)
    try:
        with pytest.raises(ValueError, match="32 bytes"):
            s.labels("/" + "a" * 40)
        with pytest.raises(ValueError, match="U\\+001F"):
            s.labels("a\x1fb")
        with pytest.raises(ValueError, match="finite values >= 0"):
            s.labels("/").observe(-1.0)
        with pytest.raises(ValueError, match="has labels"):
            s.observe(1.0)
        with pytest.raises(ValueError, match="quantile"):
            Summary("y", "Y", ["quantile"], app=app, registry=None)
        assert segment_name(app, "x_seconds", ("route",)) in shmwin.names()
    finally:
        s.unlink()


def test_summary_names_are_prometheus_names_and_its_label_sets_are_capped(make_name):
    """A label name with '+' was accepted, then split in two when scraped (every sample
    skipped); the 1,025th label set raised with advice about a parameter Summary lacked."""
    from shmwin.errors import KeyTableFullError

    app = make_name("app")
    for bad_name, labels in (("x-seconds", ()), ("x", ("a+b",)), ("x", ("__reserved",)), ("x", ("1a",))):
        with pytest.raises(ValueError, match=r"invalid (metric|label) name"):
            Summary(bad_name, "X", labels, app=app, registry=None)
    s = Summary("x_seconds", "X", ["route"], app=app, registry=None, max_label_sets=3)
    try:
        for route in ("/a", "/b", "/c"):
            s.labels(route).observe(1.0)
        with pytest.raises(KeyTableFullError):
            s.labels("/d").observe(1.0)
        got = _samples(generate_latest(_registry_with(s)).decode())
        assert got[("x_seconds_count", (("route", "/a"),))] == 1
    finally:
        s.unlink()


def _registry_with(collector) -> CollectorRegistry:  # type: ignore[no-untyped-def]
    registry = CollectorRegistry()
    registry.register(collector)
    return registry
