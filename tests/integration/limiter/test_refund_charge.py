"""Limiter.refund and Limiter.charge: costs known after the fact, time driven by a manual clock."""

from __future__ import annotations

import pytest

from shmwin import Limiter, ManualClock
from shmwin.errors import NotSupportedError

S = 1_000_000_000


@pytest.fixture
def clock():
    return ManualClock(1200 * S)  # a bucket boundary of 3 s buckets (60 s / 20)


def test_refund_gives_back_the_most_recent_hits_first(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert all(lim.hit("k") for _ in range(4))  # 4 at t0
        clock.advance(30)
        assert all(lim.hit("k") for _ in range(3))  # 3 at t0 + 30 s
        assert lim.refund("k", 2) == 2  # from the 3 at t0 + 30 s
        assert lim.stats("k").used == 5
        clock.advance(31)  # t0 + 61 s: past P + a bucket for the first 4... not yet (63 s)
        clock.advance(3)  # t0 + 64 s: the first 4 have left; the 1 left of the later 3 stays
        assert lim.stats("k").used == 1
        lim.unlink()


def test_refund_more_than_held_gives_back_what_is_held(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert lim.hit("k", cost=3)
        assert lim.refund("k", 5) == 3
        assert lim.stats("k").used == 0
        assert lim.refund("k", 1) == 0
        assert all(lim.hit("k") for _ in range(10)) and not lim.hit("k")  # the whole limit again
        lim.unlink()


def test_refund_of_a_key_that_holds_nothing(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert lim.refund("never-seen", 3) == 0
        assert lim.window.keys() == []  # no key made for it
        assert lim.hit("old")
        clock.advance(64)  # its hit has left the window
        assert lim.refund("old", 1) == 0
        assert lim.refund("old", 0) == 0
        lim.unlink()


def test_refund_then_hit_is_strict(name, clock):
    """An estimate hit, then the unused part refunded: the rate still holds for hit()."""
    with Limiter(name, "100/minute", clock=clock) as lim:
        assert lim.hit("llm", cost=60)
        assert lim.refund("llm", 45) == 45  # it used 15
        assert lim.hit("llm", cost=85) and not lim.hit("llm")
        assert lim.stats("llm").used == 100
        lim.unlink()


def test_refund_in_every_rate(name, clock):
    with Limiter(name, ["5/second", "20/minute"], clock=clock) as lim:
        assert all(lim.hit("k") for _ in range(5))
        clock.advance(2)  # the second's ring forgot them; the minute's holds 5
        assert lim.refund("k", 3) == 3  # what the rate that gave most gave
        assert [s.used for s in lim.stats_all("k")] == [0, 2]
        lim.unlink()


def test_refund_on_an_exact_limiter(name, clock):
    with Limiter(name, "10/minute", clock=clock, exact=True) as lim:
        assert lim.hit("k", cost=4)
        clock.advance(10)
        assert lim.hit("k", cost=3)
        assert lim.refund("k", 5) == 5  # the 3 at +10 s, then 2 of the 4 at t0
        assert lim.stats("k").used == 2
        clock.advance(50)  # t0 + 60 s: the 2 left at t0 are still counted (P after, exactly)
        assert lim.stats("k").used == 2
        clock.advance(ns=1)
        assert lim.stats("k").used == 0
        lim.unlink()


def test_charge_goes_past_the_limit_and_hit_refuses_until_it_leaves(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert lim.hit("k", cost=4)
        lim.charge("k", 15)  # known only after the fact
        assert lim.stats("k").used == 19 and lim.stats("k").remaining == 0
        assert not lim.hit("k") and not lim.test("k")
        clock.advance(64)
        assert lim.hit("k", cost=10) and not lim.hit("k")
        lim.unlink()


def test_charge_a_new_key_and_zero(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        lim.charge("new", 0)
        lim.charge("new", 12)
        assert lim.stats("new").used == 12 and not lim.hit("new")
        with pytest.raises(ValueError):
            lim.charge("new", -1)
        with pytest.raises(ValueError):
            lim.refund("new", -1)
        lim.unlink()


def test_charge_on_an_exact_limiter(name, clock):
    with Limiter(name, "10/minute", clock=clock, exact=True) as lim:
        lim.charge("k", 25)
        assert lim.stats("k").used == 25 and not lim.hit("k")
        clock.advance(60)
        clock.advance(ns=1)
        assert lim.hit("k", cost=10)
        lim.unlink()


def test_never_more_than_the_limit_through_hit_with_refunds_and_charges(name, clock):
    """A random mix of hits, refunds and charges over 20 minutes, against a model holding what
    was counted (hits admitted, charges) less what was refunded, most recent first: at each
    admission, what the model holds from the last 60 s, that hit included, is within the limit."""
    import random

    rng = random.Random(7)
    period = 60 * S
    with Limiter(name, "20/minute", clock=clock) as lim:
        held: list[list[int]] = []  # [ns, units] counted, in time order
        for _ in range(3000):
            clock.advance(ns=rng.randrange(0, 400_000_000))
            now, op = clock(), rng.random()
            if op < 0.8:
                cost = rng.randrange(1, 4)
                if lim.hit("k", cost=cost):
                    held.append([now, cost])
                    assert sum(n for t, n in held if t > now - period) <= 20, now
            elif op < 0.95:
                given = lim.refund("k", rng.randrange(1, 4))
                while given:  # the model gives back its most recent units too
                    take = min(given, held[-1][1])
                    held[-1][1] -= take
                    given -= take
                    if not held[-1][1]:
                        held.pop()
            else:
                cost = rng.randrange(1, 3)
                lim.charge("k", cost)
                held.append([now, cost])
        lim.unlink()


def test_redis_says_it_cannot(redis_server, name):
    lim = Limiter(name, "10/minute", backend=redis_server.url)
    try:
        with pytest.raises(NotSupportedError, match="shared memory"):
            lim.refund("k", 1)
        with pytest.raises(NotSupportedError, match="shared memory"):
            lim.charge("k", 1)
    finally:
        lim.unlink()
        lim.close()
