"""Exact limiters stay strict in every interval when refunds meet a clock that steps back, and a
0-cost charge stores nothing (the red team's findings on the O(1) log, core/exactlog.c).

A refund frees room at its own time and later, never behind it: a clock stepped back after a
refund still counts what it counted before (or the limit), since a merged entry can hold hits
older than its time and a dead entry can stand for more hits than it holds."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import pytest
from support.clock_steps import SteppingClock, busiest_period

from shmwin import Limiter
from shmwin.clock import Clock

S = 1_000_000_000
T0 = 1_000_000 * S


@pytest.fixture
def exact_limiter(name: str) -> Iterator[Callable[..., Limiter]]:
    """Limiter(name, rate, exact=..., clock=...), unlinked after the test whatever it asserted."""
    made: list[Limiter] = []

    def make(rate: str, exact: bool | int, clock: Clock) -> Limiter:
        made.append(Limiter(name, rate, exact=exact, clock=clock, decisions=False))
        return made[-1]

    yield make
    for lim in made:
        lim.unlink()
        lim.close()


def test_a_refund_far_ahead_does_not_reopen_the_window_a_clock_comes_back_to(exact_limiter):
    """L hits at T; the clock an hour ahead, one hit there, refunded; back at T + 0.5 s the L
    hits at T are in the window: used is L and a hit is refused (as the bucketed limiter does)."""
    clock = SteppingClock(T0)
    lim = exact_limiter("5/second", True, clock)
    assert all(lim.hit("k") for _ in range(5))
    clock.set(T0 + 3600 * S)
    assert lim.hit("k") and lim.refund("k", 1) == 1
    clock.set(T0 + S // 2)
    assert lim.stats("k").used == 5
    assert not lim.hit("k")


def test_a_refund_behind_hits_that_expired_gives_nothing_back(exact_limiter):
    """2 hits at 10.0 s, 1 at 11.5 s (10.0's expire into the dead entry); back at 10.2 s the two
    at 10.0 count again: a refund there may not let a third hit into [10.0, 11.0]."""
    clock = SteppingClock(T0 + 10 * S)
    lim = exact_limiter("2/second", True, clock)
    assert lim.hit("k", 2)
    clock.set(T0 + 11 * S + S // 2)
    assert lim.hit("k")
    clock.set(T0 + 10 * S + S // 5)
    assert lim.stats("k").used >= 2
    assert lim.refund("k", 1) == 0  # the clock is behind hits a later clock saw expire
    assert lim.stats("k").used >= 2
    assert not lim.hit("k")


def test_a_refund_of_a_merged_entry_keeps_its_older_hits_for_a_clock_behind(exact_limiter):
    """7/second in one slot: the hits at t and t + 1 s merge at t + 1 s; both are refunded at
    t + 1.06 s (the merged entry counts there). Back at t + 0.06 s, the hit at t is in the
    window [t - 0.94, t + 0.06]: a cost of 7 would make 8 in [t, t + 1 s]."""
    clock = SteppingClock(T0)
    lim = exact_limiter("7/second", 1, clock)
    assert lim.hit("k")
    clock.set(T0 + S)
    assert lim.hit("k") and lim.stats("k").used == 2
    clock.set(T0 + S + 60_000_000)
    assert lim.refund("k", 2) == 2
    assert lim.hit("k", 7)  # at and after the refund: the room is given back
    assert lim.refund("k", 7) == 7
    clock.set(T0 + 60_000_000)
    assert not lim.hit("k", 7)


def test_a_refund_with_a_forward_clock_stays_exact(exact_limiter):
    clock = SteppingClock(T0)
    lim = exact_limiter("3/second", True, clock)
    assert lim.hit("k") and lim.hit("k", 2) and not lim.hit("k")
    assert lim.refund("k", 2) == 2 and lim.stats("k").used == 1
    assert lim.hit("k", 2) and not lim.hit("k")
    clock.set(T0 + S + 1)  # every hit is forgotten exactly one period after it
    assert lim.stats("k").used == 0
    assert lim.hit("k", 3)


def test_a_zero_cost_charge_stores_nothing(exact_limiter):
    """3/second has 3 slots: a 0-cost charge taking one would merge the first hit into a later
    time, and the log would stop being exact."""
    clock = SteppingClock(T0)
    lim = exact_limiter("3/second", True, clock)
    assert lim.hit("k")
    clock.set(T0 + S // 2)
    lim.charge("k", 0)
    assert lim.hit("k") and lim.hit("k")
    clock.set(T0 + S + 1)  # the first hit is forgotten; the two at 0.5 s stay
    assert lim.stats("k").used == 2
    assert lim.hit("k") and not lim.hit("k")


def _refund_newest(admitted: list[tuple[int, int]], given: int, now: int, period_ns: int) -> None:
    """The model's refund: the newest hits that count at now (a time ahead of now counts)."""
    for k in sorted(range(len(admitted)), key=lambda k: admitted[k][0], reverse=True):
        t, cost = admitted[k]
        if given == 0:
            return
        if t < now - period_ns or cost == 0:
            continue
        take = min(cost, given)
        admitted[k] = (t, cost - take)
        given -= take


@pytest.mark.parametrize(("rate", "exact"), [("7/second", 1), ("10/second", 3), ("12/second", True)])
@pytest.mark.parametrize("seed", range(6))
def test_hits_refunds_and_stepping_clocks_are_strict_in_every_interval(exact_limiter, rate, exact, seed):
    """Random hits, refunds and clock steps (back as well as forward) against a model of what
    was admitted and refunded: no closed period ever holds more than the limit."""
    rng = random.Random(seed)
    clock = SteppingClock(T0)
    lim = exact_limiter(rate, exact, clock)
    limit, period_ns = lim.rates[0].limit, lim.rates[0].period_ns
    steps_ns = (0, 1, period_ns // 3, period_ns - 1, period_ns, period_ns + 1)
    admitted: list[tuple[int, int]] = []
    now = T0
    for step in range(300):
        sign = -1 if rng.random() < 0.25 else 1
        now = max(0, now + sign * rng.choice((*steps_ns, rng.randrange(3 * period_ns))))
        clock.set(now)
        cost = rng.choice((1, 1, 1, 2, 3, limit))
        if rng.random() < 0.2:
            _refund_newest(admitted, lim.refund("k", cost), now, period_ns)
        elif lim.hit("k", cost):
            admitted.append((now, cost))
            assert busiest_period(admitted, period_ns, closed=True) <= limit, (seed, step)


MS = 1_000_000


def hits_then_behind(lim: Limiter, clock: SteppingClock, n: int) -> Limiter:
    """``lim`` after one hit of "k" at each of T0 + 1 ms ... T0 + n ms, its clock then set back
    to T0: behind all n entries."""
    for i in range(1, n + 1):
        clock.set(T0 + i * MS)
        assert lim.hit("k")
    clock.set(T0)
    return lim


def test_a_clock_a_few_entries_behind_stays_exact(exact_limiter):
    """Processes whose clocks read a little apart: a hit behind up to 8 newer entries is kept at
    its own time, in order, and forgotten exactly one period after it."""
    clock = SteppingClock(T0)
    lim = hits_then_behind(exact_limiter("100/second", True, clock), clock, 8)  # behind all 8
    assert lim.hit("k")
    clock.set(T0 + S + 1)  # the hit at T0 leaves exactly a period later
    assert lim.stats("k").used == 8


def test_a_clock_far_behind_joins_a_later_entry_and_is_forgotten_later_never_earlier(exact_limiter):
    """Behind more than 8 newer entries, a hit joins the entry 8 from the newest (a later time:
    a hit never shifts more than 8 entries, whatever the log holds): it stays counted past its
    own period, until that entry's."""
    clock = SteppingClock(T0)
    lim = hits_then_behind(exact_limiter("100/second", True, clock), clock, 20)  # behind all 20
    assert lim.hit("k", 3)
    assert lim.stats("k").used == 23
    clock.set(T0 + S + 12 * MS + 1)  # the entries at 1..12 ms have left; the one at 13 ms holds the 3
    assert lim.stats("k").used == 8 + 3
    clock.set(T0 + S + 13 * MS + 1)
    assert lim.stats("k").used == 7
