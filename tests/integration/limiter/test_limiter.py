"""The Limiter in one process, time driven by a manual clock."""

from __future__ import annotations

import asyncio

import pytest

import shmwin
from shmwin import Limiter, ManualClock, Rate, Window

S = 1_000_000_000


@pytest.fixture
def clock():
    return ManualClock(999 * S)  # a bucket boundary for 1 s and 3 s buckets


def test_exactly_the_limit_passes(name, clock):
    with Limiter(name, "5/minute", clock=clock, capacity=100) as lim:
        assert [lim.hit("203.0.113.7") for _ in range(8)] == [True] * 5 + [False] * 3
        assert lim.hit("198.51.100.1")  # another key has its own budget
        lim.unlink()


def test_a_denied_hit_counts_nothing(name, clock):
    with Limiter(name, "5/minute", clock=clock) as lim:
        for _ in range(4):
            assert lim.hit("k")
        assert not lim.hit("k", cost=2)  # 4 + 2 > 5: nothing counted
        assert lim.stats("k").used == 4
        assert lim.hit("k")  # the last unit is still there
        lim.unlink()


def test_never_more_than_the_limit_in_any_period(name, clock):
    """Drive a bursty client for 10 minutes; check every 60 s interval of admitted hits."""
    with Limiter(name, "5/minute", clock=clock) as lim:
        admitted = []
        for _ in range(600 * 4):  # one attempt every 250 ms
            if lim.hit("k"):
                admitted.append(clock())
            clock.advance(0.25)
        for i, t in enumerate(admitted):
            within = [u for u in admitted[i:] if u - t < 60 * S]
            assert len(within) <= 5
        # and the refusal is never more than one bucket (3 s) too early:
        gaps = [b - a for a, b in zip(admitted, admitted[5:], strict=False)]
        assert max(gaps) <= 63 * S
        lim.unlink()


def test_forgotten_between_p_and_p_plus_one_bucket(name, clock):
    with Limiter(name, "2/minute", clock=clock) as lim:
        clock.advance(1.5)  # mid-bucket
        assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
        assert lim.stats("k").reset_after == pytest.approx(61.5)  # bucket 999..1002 s leaves at 1062 s
        clock.advance(61.4)
        assert not lim.hit("k")
        clock.advance(0.1)
        assert lim.hit("k")
        lim.unlink()


def test_several_rates_count_in_all_or_none(name, clock):
    with Limiter(name, "2/second;3/minute", clock=clock) as lim:
        assert lim.hit("k") and lim.hit("k")
        assert not lim.hit("k")  # the second is full
        clock.advance(1.1)
        assert lim.hit("k")  # third of the minute
        clock.advance(1.1)
        assert not lim.hit("k")  # the second has room, the minute does not ...
        stats = lim.stats_all("k")
        assert [s.used for s in stats] == [0, 3]  # ... and the refused hit was counted in neither
        assert lim.stats("k").rate == Rate(3, 60 * S)  # the tightest rate
        lim.unlink()


def test_test_counts_nothing(name, clock):
    with Limiter(name, "1/minute", clock=clock) as lim:
        assert lim.test("k") and lim.test("k")
        assert lim.hit("k")
        assert not lim.test("k")
        assert not lim.test("new", cost=2)  # never seen, but 2 > 1
        assert lim.window.keys() == ["k"]  # test() never creates a key
        lim.unlink()


def test_stats_fields(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        fresh = lim.stats("k")
        assert (fresh.limit, fresh.used, fresh.remaining, fresh.reset_after) == (10, 0, 10, 0.0)
        lim.hit("k", cost=3)
        s = lim.stats("k")
        assert (s.limit, s.used, s.remaining) == (10, 3, 7)
        assert 60 <= s.reset_after <= 63
        lim.unlink()


def test_clear(name, clock):
    with Limiter(name, "1/hour", clock=clock) as lim:
        assert lim.hit("k") and not lim.hit("k")
        lim.clear("k")
        assert lim.hit("k")
        lim.unlink()


def test_acquire_sleeps_until_allowed_not_spinning(name, clock):
    with Limiter(name, "2/second", clock=clock) as lim:
        assert lim.hit("k") and lim.hit("k")
        started = clock()
        assert lim.acquire("k", timeout=5)
        waited = (clock() - started) / S
        assert 1.0 <= waited <= 1.05 + 0.001  # one second plus at most one 50 ms bucket
        assert len(clock.sleeps) == 1  # computed the wait, did not poll
        while lim.hit("k"):  # fill the current second
            pass
        assert lim.stats("k").remaining == 0
        assert not lim.acquire("k", timeout=0.2)  # full for longer than 0.2 s
        assert clock.sleeps[-1] == pytest.approx(0.2)
        assert not lim.acquire("k", timeout=60, cost=3)  # can never fit: False at once
        assert clock.sleeps[-1] == pytest.approx(0.2)
        lim.unlink()


def test_acquire_async_does_not_block_the_loop(name, clock):
    async def scenario(lim: Limiter) -> tuple[bool, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        lim.hit("k")
        ok = await lim.acquire_async("k", timeout=10)
        task.cancel()
        return ok, ticks

    with Limiter(name, "1/second", clock=clock) as lim:
        ok, ticks = asyncio.run(scenario(lim))
        assert ok and ticks >= 1 and len(clock.sleeps) == 1
        lim.unlink()


def test_acquire_async_real_loop_with_real_clock(name):
    """With the real clock the wait goes through asyncio.sleep; a 1/50ms rate keeps it short."""

    async def scenario(lim: Limiter) -> list[bool]:
        lim.hit("k")
        return await asyncio.gather(lim.acquire_async("k", timeout=5), asyncio.sleep(0, True))

    with Limiter(name, Rate(1, 50_000_000), buckets=5) as lim:
        assert asyncio.run(scenario(lim)) == [True, True]
        lim.unlink()


@pytest.mark.parametrize("policy", ["raise", "allow", "deny"])
def test_full_table_policy(name, clock, policy):
    with Limiter(name, "3/minute", capacity=4, on_full=policy, clock=clock) as lim:
        keys = [f"k{i}" for i in range(lim.window.capacity)]
        for key in keys:
            assert lim.hit(key)
        if policy == "raise":
            with pytest.raises(shmwin.KeyTableFullError):
                lim.hit("one too many")
        else:
            assert lim.hit("one too many") is (policy == "allow")
        assert lim.stats("one too many").used == 0  # never counted
        assert all(lim.stats(key).used == 1 for key in keys)  # live keys lost nothing
        clock.advance(64)  # idle now: entries are reclaimed for new keys
        assert lim.hit("one too many")
        lim.unlink()


def test_memory_per_key_does_not_grow_with_the_limit(make_name):
    small = Limiter(make_name("a"), "1/hour", capacity=1000)
    large = Limiter(make_name("b"), "1000000/hour", capacity=1000)
    assert small.window.nbytes == large.window.nbytes
    for lim in (small, large):
        lim.close()
        lim.unlink()


def test_same_rates_attach_other_rates_refused(name, clock):
    with Limiter(name, "5/minute", clock=clock) as a:
        a.hit("k")
        with Limiter(name, "5 per minute", clock=clock) as b:
            assert b.stats("k").used == 1
        with pytest.raises(shmwin.GeometryMismatchError, match="limit=5"):
            Limiter(name, "6/minute", clock=clock, on_change="raise")
        with Limiter.attach(name, clock=clock) as c:
            assert c.rates == [Rate(5, 60 * S)] and c.stats("k").used == 1
        with Window.attach(name, clock=clock) as view:
            assert view.total(key="k") == 1
            with pytest.raises(shmwin.ShmwinError, match="Limiter"):
                view.add(1, key="k")
        a.unlink()


def test_bad_arguments(name):
    with pytest.raises(ValueError, match="not a rate"):
        Limiter(name, "lots")
    with pytest.raises(ValueError, match="on_full"):
        Limiter(name, "1/second", on_full="maybe")
    with pytest.raises(ValueError, match="capacity"):
        Limiter(name, "1/second", capacity=0)
    with Limiter(name, "1/second") as lim:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="cost"):
                lim.hit("k", cost=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            lim.hit(None)  # type: ignore[arg-type]
        lim.unlink()
    assert name not in shmwin.names()


def test_the_python_cost_check_is_the_cores(name):
    """policy.cost_of (the slow paths, Redis) and the native hit refuse exactly the same costs."""
    import numpy as np

    from shmwin import policy

    costs = [1, 2, 2.0, np.int64(3), 0, -1, 1.5, True, False, float("nan"), float("inf"), "1", None]
    costs += [2**63, 9e18, 2**63 - 1]
    with Limiter(name, "1000000000000/hour") as lim:
        assert lim.hit.__self__ is lim._backend._core  # the native check-and-count, bound on the instance
        for cost in costs:
            try:
                policy.cost_of(cost, 1)
                python_ok = True
            except ValueError:
                python_ok = False
            try:
                lim.hit("k", cost)  # type: ignore[arg-type]
                native_ok = True
            except (ValueError, TypeError):
                native_ok = False
            assert python_ok == native_ok, cost
        lim.unlink()


def test_on_error_is_accepted_and_vacuous_on_shared_memory(name, clock):
    with Limiter(name, "1/minute", clock=clock, on_error="deny") as lim:
        assert lim.hit("k") and not lim.hit("k")  # never unavailable: the limit decides
        assert lim.hit.__self__ is not lim._backend._core  # the wrapper that would apply on_error
        lim.unlink()
