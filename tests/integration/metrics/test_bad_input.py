"""Bad input to shmwin's prometheus_client mode: identities over the limit, label values of any
content, a name used with another meaning, a full segment, wrong types, a reset segment."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from prometheus_client import Counter, Gauge, Histogram
from support.metrics import samples, scrape

import shmwin.integrations.prometheus as shp
from shmwin.errors import (
    KeyTableFullError,
    MetricMismatchError,
    SeriesIdentityError,
    SeriesTableFullError,
    WindowClosedError,
)

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # also against the sanitized cores
FORK = mp.get_context("fork")


def test_an_identity_over_4_kib_is_refused_whole_and_nothing_is_stored(app):
    shp.multiprocess(app)
    c = Counter("c", "help", ["path"], registry=None)
    c.labels("x" * 4000).inc()  # under the limit: stored whole
    with pytest.raises(SeriesIdentityError, match="at most 4096"):
        c.labels("y" * 5000)
    assert issubclass(SeriesIdentityError, ValueError)
    assert samples(app) == {("c_total", (("path", "x" * 4000),)): 1.0}


@pytest.mark.parametrize("value", ['quote " and \\ backslash', "new\nline", "ünïcødé ✓", "nul\x00byte", ""])
def test_label_values_of_any_content_come_back_whole(app, value):
    shp.multiprocess(app)
    Counter("c", "help", ["v"], registry=None).labels(value).inc(2)
    assert samples(app) == {("c_total", (("v", value),)): 2.0}


def test_a_lone_surrogate_is_refused_and_the_scrape_goes_on(app):
    """It was stored (JSON escapes it), and every later scrape of the app failed encoding it."""
    shp.multiprocess(app)
    c = Counter("c", "help", ["l"], registry=None)
    c.labels("ok").inc()
    with pytest.raises(SeriesIdentityError, match="lone surrogate"):
        c.labels("bad\udcff")
    assert samples(app) == {("c_total", (("l", "ok"),)): 1.0}


def test_a_name_used_with_another_type_mode_or_labels_is_refused(app):
    shp.multiprocess(app)
    Counter("c", "help", ["a"], registry=None).labels("1").inc()
    with pytest.raises(MetricMismatchError, match="'c_total' is already"):
        Counter("c", "help", ["b"], registry=None).labels("1")
    Gauge("g", "help", multiprocess_mode="livesum", registry=None)
    with pytest.raises(MetricMismatchError):
        Gauge("g", "help", multiprocess_mode="max", registry=None)
    with pytest.raises(MetricMismatchError):
        Histogram("h", "help", ["a"], registry=None).labels("1")
        Histogram("h", "help", ["a"], buckets=(1.0,), registry=None).labels("1")  # same names: allowed
        Gauge("h_sum", "help", registry=None)  # a histogram's sample name, as a gauge
    assert issubclass(MetricMismatchError, ValueError)


def test_another_process_meets_the_same_refusal(app):
    shp.multiprocess(app)
    Gauge("g", "help", multiprocess_mode="all", registry=None)
    refused = FORK.Value("i", 0)

    def other() -> None:
        try:
            Counter("g", "help", registry=None)  # sample "g_total": a new name, allowed
            Gauge("g", "help", multiprocess_mode="liveall", registry=None)
        except MetricMismatchError:
            refused.value = 1

    p = FORK.Process(target=other)
    p.start()
    p.join(30)
    assert p.exitcode == 0 and refused.value == 1


def test_a_full_segment_says_so(app):
    shp.multiprocess(app, max_series=3)
    c = Counter("c", "help", ["n"], registry=None)
    for n in range(3):
        c.labels(str(n)).inc()
    with pytest.raises(SeriesTableFullError, match=r"full: 3 series \(max_series=3\)"):
        c.labels("3")
    assert issubclass(SeriesTableFullError, KeyTableFullError)
    assert len(samples(app)) == 3  # the rest whole


def test_every_slot_live_says_so(app):
    shp.multiprocess(app, slots=1)
    g = Gauge("g", "help", registry=None)
    g.set(1)  # this process holds the one slot
    got = FORK.Value("i", 0)

    def other() -> None:
        try:
            g.set(2)
        except SeriesTableFullError as exc:
            got.value = "process slots" in str(exc)

    p = FORK.Process(target=other)
    p.start()
    p.join(30)
    assert p.exitcode == 0 and got.value == 1


def test_wrong_types_are_refused_by_the_native_value(app):
    shp.multiprocess(app)
    c = Counter("c", "help", registry=None)
    with pytest.raises(TypeError):
        c._value.inc("1")
    with pytest.raises(TypeError):
        c._value.set(None)
    with pytest.raises(TypeError):
        c._value.set(1.0, when=2.0)
    with pytest.raises(ValueError):
        Counter("d", "help", ["a"], registry=None).labels("x", "y")  # prometheus_client's own check
    assert "c_total 0.0" in scrape(app)


def test_values_of_a_reset_app_raise_instead_of_writing_nowhere(app):
    shp.multiprocess(app)
    c = Counter("c", "help", registry=None)
    c.inc()
    shp.reset(app)
    with pytest.raises(WindowClosedError):
        c.inc()
    shp.multiprocess(app)
    Counter("c", "help", registry=None).inc(2)
    assert samples(app) == {("c_total", ()): 2.0}


def test_a_capacity_asked_of_an_existing_segment_is_said(app):
    """It was ignored silently: a later SeriesTableFullError was the first sign."""
    shp.multiprocess(app, max_series=10, slots=4)
    with pytest.warns(RuntimeWarning, match="max_series=10, slots=4, not what was asked"):
        shp.value_class(app, max_series=1000, slots=4 * 4)
