"""Multi-resolution windows over a simulated day, and batch ingest; time driven by hand."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from support.helpers import run_all

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm.layout import Layout

S = 1_000_000_000
DAY_START = 100 * 86400 * S  # a monotonic clock that has been up for 100 days, at midnight
RESOLUTIONS = ("1m/1s", "1h/1m", "24h/1h")


@pytest.fixture
def clock():
    return ManualClock(DAY_START)


@pytest.fixture
def api(name, clock):
    w = Window(name, resolutions=RESOLUTIONS, fields=("req", "err"), clock=clock)
    yield w
    w.close()
    w.unlink()


def test_a_simulated_day(api, clock):
    """One request every minute for a day (and an error every hour): every resolution agrees."""
    for minute in range(24 * 60):
        api.add(1, "req")
        if minute % 60 == 0:
            api.add(1, "err")
        clock.advance(60)
    clock.advance(0.5)  # the next midnight and half a second: nothing added yet
    # 24 hourly buckets are the current (empty) hour and 23 whole ones: the first hour slid out
    assert api.total("req", last="24h") == 23 * 60
    assert api.total("req", last="1h") == 59  # minute ring: the current minute + 59 whole ones
    assert api.total("req", last="10m") == 9
    assert api.total("req", last="5s") == 0  # the 1 s ring: nothing in the last 5 s
    assert api.total("err", last="24h") == 23
    assert api.series("req", resolution="1h/1m").tolist() == [1] * 59 + [0]
    assert api.series("req", resolution="24h/1h").tolist() == [60] * 23 + [0]
    assert api.series("req", last="3h").tolist() == [60, 60, 0]  # picks the hour ring
    assert api.rate("req", last="1h") == pytest.approx(59 / (59 * 60 + 0.5))


def test_finest_covering_resolution_is_used(api, clock):
    api.add(5)
    clock.advance(59)
    api.add(1)
    assert api.total(last="1s") == 1  # 1 s ring
    assert api.total(last="1m") == 6  # 1 s ring, all 60 buckets
    assert api.total(last="61s") == 6  # the minute ring: 2 minutes of buckets
    clock.advance(2)
    assert api.total(last="1m") == 1  # the 5 slid out of the 1 s ring ...
    assert api.total(last="2m") == 6  # ... but not out of the minute ring
    with pytest.raises(ValueError, match="longer than"):
        api.total(last="25h")


def test_memory_grows_with_resolutions_not_span():
    one_day_by_hour = Layout.plan(_geometry(("24h/1h",)))
    three = Layout.plan(_geometry(RESOLUTIONS))
    seconds_for_a_day = Layout.plan(_geometry(("24h/1s",)))
    assert three.row_bytes < 200 * 3 * 8  # 60 + 60 + 24 buckets (+ headers) of 3 words
    assert seconds_for_a_day.row_bytes > 100 * three.row_bytes
    assert one_day_by_hour.row_bytes < three.row_bytes


def _geometry(resolutions):
    from shmwin.geometry import window_geometry as make

    return make(None, None, resolutions, ("req", "err"), "int64", None, 64, 0)


def test_resolution_spellings_and_errors(make_name):
    with Window(make_name("a"), resolutions=("24h/1h", "1m/1s")) as w:
        assert w.resolutions == ["1m/1s", "1d/1h"]  # finest first
        assert w.span == 86400
        w.unlink()
    for bad in (("1m",), ("1m/7s",), ("1m/1s", "2m/1s"), ("soon/1s",), ()):
        with pytest.raises(ValueError):
            Window(make_name("b"), resolutions=bad)
    with pytest.raises(ValueError, match="not both"):
        Window(make_name("c"), span=60, resolutions=("1m/1s",))
    assert not any(n.startswith(make_name("")) for n in shmwin.names())


def test_multi_resolution_locked_and_keyed(make_name, clock):
    with Window(make_name("l"), resolutions=RESOLUTIONS, mode="locked", clock=clock) as w:
        w.add(3)
        clock.advance(120)
        assert w.total(last="1m") == 0 and w.total(last="1h") == 3
        w.unlink()
    with Window(make_name("k"), resolutions=RESOLUTIONS, capacity=8, clock=clock) as w:
        w.add(2, key="a")
        clock.advance(120)
        assert w.total(last="1m", key="a") == 0 and w.total(last="24h", key="a") == 2
        w.unlink()


def test_add_many_equals_a_loop_of_add(api, clock, make_name):
    rng = np.random.default_rng(3)
    ages_ns = rng.integers(0, 23 * 3600 * S, size=5000)
    values = rng.integers(1, 10, size=5000)
    clock.advance(86400)
    stamps = clock() - ages_ns
    api.add_many(values, "req", at=stamps)
    ref_clock = ManualClock(0)
    with Window(make_name("ref"), resolutions=RESOLUTIONS, fields=("req", "err"), clock=ref_clock) as ref:
        for value, stamp in sorted(zip(values.tolist(), stamps.tolist(), strict=True), key=lambda p: p[1]):
            ref_clock.set(stamp)  # add() at each event's own time
            ref.add(value, "req")
        ref_clock.set(clock())
        for last in ("10s", "1m", "30m", "1h", "5h", "24h"):
            assert api.total("req", last=last) == ref.total("req", last=last), last
        for resolution in range(3):
            assert (
                api.series("req", resolution=resolution).tolist()
                == ref.series("req", resolution=resolution).tolist()
            )
        ref.unlink()


def test_add_many_now_and_float_and_errors(name, clock):
    with Window(name, span=60, buckets=60, fields=("latency",), dtype="float64", clock=clock) as w:
        w.add_many([0.25, 0.5, 1.25])
        assert w.total() == pytest.approx(2.0)
        w.add_many(np.array([1.0, 2.0]), at=[clock(), clock() - 30 * S])
        assert w.total(last="1s") == pytest.approx(3.0) and w.total() == pytest.approx(5.0)
        for bad_at in ([clock() + 1], [clock() - 61 * S], [-5]):
            with pytest.raises(ValueError, match=r"future|older"):
                w.add_many([1.0], at=bad_at)
        with pytest.raises(ValueError, match="one per value"):
            w.add_many([1.0, 2.0], at=[clock()])
        with pytest.raises(TypeError):
            w.add_many(["a"])
        assert w.total() == pytest.approx(5.0)  # refused batches wrote nothing
        w.unlink()


def test_add_many_int_window_refuses_floats_and_stays_exact_for_huge_values(name, clock):
    with Window(name, span=60, buckets=6, clock=clock) as w:
        with pytest.raises(TypeError, match="integers"):
            w.add_many([1.5])
        big = np.array([2**60, 2**60, 3], dtype=np.int64)  # beyond float64's exact range
        w.add_many(big, at=[clock(), clock(), clock() - 20 * S])
        assert w.total() == 2**61 + 3
        w.unlink()


def _ingest(name: str, clock_path: str, seed: int) -> None:
    clock = ManualClock(path=clock_path)
    w = Window.attach(name, clock=clock)
    rng = np.random.default_rng(seed)
    w.add_many(np.ones(10_000, np.int64), "req", at=clock() - rng.integers(0, 59 * 60 * S, size=10_000))
    w.close()


def test_add_many_from_several_processes(name, tmp_path):
    clock = ManualClock(DAY_START, path=str(tmp_path / "clock"))
    with Window(name, resolutions=RESOLUTIONS, fields=("req", "err"), clock=clock) as w:
        ctx = mp.get_context("fork")
        procs = [ctx.Process(target=_ingest, args=(name, str(tmp_path / "clock"), i)) for i in range(4)]
        run_all(procs, timeout_s=60)
        assert w.total("req", last="1h") == 40_000
        assert w.total("req", last="24h") == 40_000
        w.unlink()
