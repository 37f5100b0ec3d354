"""One contract, two backends: everything here runs on shared memory and on a real redis-server,
with time driven by hand on both (the redis backend takes its time from the clock when given one)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

import shmwin
from shmwin import Limiter, ManualClock, Window

S = 1_000_000_000


@pytest.fixture(params=["shm", "redis"])
def backend(request) -> str | None:
    if request.param == "shm":
        return None
    return request.getfixturevalue("redis_server").url


@pytest.fixture
def clock():
    return ManualClock(999_999 * S)  # a boundary of every bucket width used here (50 ms, 1 s, 3 s)


@pytest.fixture
def opened(backend, make_name):
    """Open windows/limiters on the backend under test; unlink and close them afterwards
    (before the leak check of ``make_name``, which this fixture depends on)."""
    made = []

    def open_(cls, *args, **kwargs):
        obj = cls(*args, backend=backend, **kwargs)
        made.append(obj)
        return obj

    yield open_
    for obj in made:
        obj.unlink()
        obj.close()


def test_window_add_total_series_rate(opened, name, clock):
    w = opened(Window, name, span=10, buckets=10, fields=("ok", "err"), clock=clock)
    w.add()
    w.add(5, "err")
    clock.advance(3)
    w.add(10)
    assert w.totals() == {"ok": 11, "err": 5}
    assert w.total("ok", last=1) == 10 and w.total("ok", last="4s") == 11
    assert list(w.series("ok")) == [0] * 6 + [1, 0, 0, 10]
    assert w.rate("ok", last=4) == pytest.approx(11 / 3)
    clock.advance(7.5)  # the first bucket slid out
    assert w.totals() == {"ok": 10, "err": 0}
    clock.advance(3600)  # a gap longer than the span clears everything
    assert w.totals() == {"ok": 0, "err": 0}
    w.add(2)
    assert w.total() == 2


def test_window_errors(opened, name, clock):
    w = opened(Window, name, span=10, buckets=10, clock=clock)
    with pytest.raises(KeyError):
        w.add(1, "nope")
    with pytest.raises(ValueError, match="longer than"):
        w.total(last=11)
    with pytest.raises(ValueError, match="not keyed"):
        w.add(1, key="k")
    with pytest.raises(shmwin.GeometryMismatchError):
        opened(Window, name, span=20, buckets=10, clock=clock)


def test_keyed_window(opened, name, clock):
    w = opened(Window, name, span=60, buckets=60, fields=("req", "err"), capacity=64, clock=clock)
    w.add(1, key="GET /a")
    w.add(4, key="GET /b")
    w.add(2, "err", key="GET /b")
    assert w.totals(key="GET /b") == {"req": 4, "err": 2}
    assert w.total("req") == 5
    assert sorted(w.keys()) == ["GET /a", "GET /b"]
    assert w.top(1, "req") == [("GET /b", 4)]
    w.clear("GET /a")
    assert w.total(key="GET /a") == 0 and w.keys() == ["GET /b"]
    clock.advance(62)
    assert w.keys() == [] and w.total() == 0  # keys with nothing left in the window are gone
    with pytest.raises(TypeError, match="keyed"):
        w.add(1)


def test_attach_reads_the_geometry(opened, backend, name, clock):
    w = opened(Window, name, span="90s", buckets=30, fields=("a", "b"), clock=clock)
    w.add(3, "b")
    other = Window.attach(name, backend=backend, clock=clock)
    assert other.geometry == w.geometry and other.total("b") == 3
    other.close()


def test_limiter_exact_and_all_or_none(opened, name, clock):
    lim = opened(Limiter, name, "2/second;3/minute", clock=clock)
    assert [lim.hit("k") for _ in range(3)] == [True, True, False]
    clock.advance(1.1)
    assert lim.hit("k")
    clock.advance(1.1)
    assert not lim.hit("k")  # the second has room, the minute has not: counted in neither
    assert [s.used for s in lim.stats_all("k")] == [0, 3]
    assert not lim.test("k") and lim.test("other")
    assert lim.hit("other", cost=2) and not lim.hit("other", cost=1)
    lim.clear("k")
    assert lim.stats("k").used == 0 and lim.hit("k")


def test_limiter_forgets_between_p_and_p_plus_a_bucket(opened, name, clock):
    lim = opened(Limiter, name, "2/minute", clock=clock)
    clock.advance(1.5)
    assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
    stats = lim.stats("k")
    assert (stats.limit, stats.used, stats.remaining) == (2, 2, 0)
    assert stats.reset_after == pytest.approx(61.5)
    clock.advance(61.4)
    assert not lim.hit("k")
    clock.advance(0.1)
    assert lim.hit("k")


def test_limiter_acquire_waits_exactly_as_long_as_needed(opened, name, clock):
    lim = opened(Limiter, name, "2/second", clock=clock)
    assert lim.hit("k") and lim.hit("k")
    started = clock()
    assert lim.acquire("k", timeout=5)
    assert 1.0 <= (clock() - started) / S <= 1.051
    assert len(clock.sleeps) == 1
    while lim.hit("k"):  # fill the current second again
        pass
    assert not lim.acquire("k", timeout=0.2)  # the deadline is on the limiter's clock
    assert clock.sleeps[-1] == pytest.approx(0.2) and len(clock.sleeps) == 2
    assert not lim.acquire("k", timeout=60, cost=3)  # never fits: False at once
    assert len(clock.sleeps) == 2


def test_limiter_rates_must_match(opened, name, clock):
    opened(Limiter, name, "5/minute", clock=clock).hit("k")
    with pytest.raises(shmwin.GeometryMismatchError):
        opened(Limiter, name, "6/minute", clock=clock)
    with pytest.raises(ValueError, match="not a rate"):
        opened(Limiter, name + "x", "lots", clock=clock)


def _hammer(name: str, backend: str | None, out, slot: int) -> None:
    lim = Limiter.attach(name, backend=backend)
    out[slot] = sum(lim.hit("client") for _ in range(300))
    lim.close()


def test_limiter_exact_across_processes(opened, backend, name):
    opened(Limiter, name, "500/hour")
    ctx = mp.get_context("spawn")
    out = ctx.Array("q", 3, lock=False)
    procs = [ctx.Process(target=_hammer, args=(name, backend, out, i)) for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert sum(out) == 500
