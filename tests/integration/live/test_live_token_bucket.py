"""A token bucket's rate or burst changed while stale processes (fork, spawn, ``python -c``,
each opened with the old ones) keep taking: always a move, the tokens each key had used carried
up to the new burst; the bound holds in every interval from the change; ``on_change`` as for a
limiter."""

from __future__ import annotations

import pytest
from support.live import assert_bucket_strict, stale_workers

import shmwin
from shmwin import ManualClock, Rate, TokenBucket
from shmwin.rate import parse_many

S = 10**9
STEP_NS = 37_000_000


@pytest.mark.parametrize(("new_rate", "new_burst"), [("2/second", 2), ("10/second", 8), ("1/second", 5)])
def test_a_bucket_changed_under_stale_processes(name, tmp_path, new_rate, new_burst):
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(10**12, path=clock_path)
    mine = TokenBucket(name, "5/second", burst=5, clock=clock)
    workers = stale_workers(name, "5/second burst=5", clock_path)
    admitted: list[int] = []
    try:
        for i in range(600):
            if i == 200:
                changed = TokenBucket(name, new_rate, burst=new_burst, clock=clock)  # the deploy
                changed_ns = clock()
            if workers[i % 3].hit("k"):
                admitted.append(clock())
            clock.advance(ns=STEP_NS)
        assert_bucket_strict([t for t in admitted if t < changed_ns], Rate(5, S), 5, since_ns=0)
        assert_bucket_strict(admitted, parse_many(new_rate)[0], new_burst, since_ns=changed_ns)
        assert (mine.rate, mine.burst) == (parse_many(new_rate)[0], new_burst)  # the old one follows
        changed.close()
    finally:
        for w in workers:
            w.close()
        mine.close()
        shmwin.unlink(name)


def test_the_used_tokens_are_carried_up_to_the_new_burst(name):
    clock = ManualClock(10**12)
    with TokenBucket(name, "1/second", burst=5, clock=clock) as old:
        assert all(old.hit("k") for _ in range(3))  # 2 left of 5
        with TokenBucket(name, "1/second", burst=4, clock=clock) as new:
            assert new.stats("k").remaining == 1 and old.stats("k").remaining == 1  # 3 used, of 4
        with TokenBucket(name, "1/second", burst=2, clock=clock) as new:
            assert new.stats("k").remaining == 0  # used as much as the new burst holds
        with TokenBucket(name, "1/second", burst=2, clock=clock, on_change="reset") as new:
            assert new.stats("k").remaining == 0  # the same rate and burst: nothing to change
        with TokenBucket(name, "1/second", burst=3, clock=clock, on_change="reset") as new:
            assert new.stats("k").remaining == 3
        with pytest.raises(shmwin.GeometryMismatchError):
            TokenBucket(name, "3/second", burst=2, clock=clock, on_change="raise")
        old.unlink()
