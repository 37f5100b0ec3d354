"""A Limiter's bucket rings (compact rings, core/rings.c) under clocks that step: a user's wall
clock that NTP steps back, or processes whose clocks disagree. A head move to a later clock
must never make a clock stepped back see fewer hits than it recorded inside its own window
(issue #33, item 2, as memory:// answers): the hits a move drops are kept as the ring's ghost.

The guarantee, in every clock's own frame: never more than the limit in any period P (a hit is
forgotten between P and P + P/buckets after it). Time is driven by hand; the processes are real."""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from support.clock_steps import SteppingClock, busiest_period, skewed_turns
from support.helpers import run_python

from shmwin import Limiter, ManualClock
from shmwin.clock import Clock

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

S = 1_000_000_000
T0 = 1_000_000 * S


@contextmanager
def dropped_after(lim: Limiter) -> Iterator[Limiter]:
    """``lim`` (on a fresh name), unlinked and closed whatever the test found."""
    try:
        yield lim
    finally:
        lim.unlink()
        lim.close()


def limiter(name: str, rates: str | list[str], buckets: int, clock: Clock) -> AbstractContextManager[Limiter]:
    return dropped_after(Limiter(name, rates, buckets=buckets, clock=clock))


def in_window(t_ns: int, x_ns: int, period_ns: int, buckets: int) -> bool:
    """Does a hit at t still count at a reading x? Its bucket is one of the n = buckets + 1
    that x's window spans (or later: a hit ahead of x counts)."""
    bucket_ns = period_ns // buckets
    return t_ns // bucket_ns > x_ns // bucket_ns - (buckets + 1)


# -- the attack, on a Limiter whose clock steps back ---------------------------------------


RATES = [("5/second", 1), ("12/minute", 60), ("10/hour", 3600)]
BUCKETS = [1, 2, 8, 10, 20, 50, 60]  # those that divide the period into whole nanoseconds


@pytest.mark.parametrize(
    "rate, period_s, buckets", [(r, p, b) for r, p in RATES for b in BUCKETS if p * S % b == 0]
)
@pytest.mark.parametrize("jump", [2, 3, 10**6])  # in periods, or 10**6 s
def test_hits_at_t_still_count_after_a_jump_forward_and_back(name, rate, period_s, buckets, jump):
    """L hits at T; the clock jumps forward (2 P, 3 P, 10**6 s) for one hit (refused or not,
    its head move drops the L hits); back to T + P/2 the L hits are in the window: nothing is
    admitted (it admitted up to L - 1 of them: the move had forgotten them)."""
    period_ns = period_s * S
    jump_ns = jump * period_ns if jump < 100 else jump * S
    clock = SteppingClock(T0)
    with limiter(name, rate, buckets, clock) as lim:
        limit = lim.stats("k").limit
        assert [lim.hit("k") for _ in range(limit)] == [True] * limit
        clock.set(T0 + jump_ns)
        assert lim.hit("k")
        clock.set(T0 + period_ns // 2)
        assert lim.stats("k").used >= limit
        assert not any(lim.hit("k") for _ in range(limit))
        clock.set(T0 + jump_ns)  # the later clock still counts its own hit, and admits L - 1
        assert sum(lim.hit("k") for _ in range(limit)) == limit - 1


def test_a_second_rate_and_costs_keep_the_ghost_per_ring(name):
    """Two rates (5/second, 12/minute), costs of 2: each ring keeps what its own moves drop."""
    clock = SteppingClock(T0)
    with limiter(name, ["5/second", "12/minute"], 10, clock) as lim:
        assert [lim.hit("k", 2) for _ in range(3)] == [True, True, False]  # 4 of 5 a second
        clock.set(T0 + 5 * S)
        assert [lim.hit("k", 2) for _ in range(3)] == [True, True, False]  # 8 of 12 a minute
        clock.set(T0 + 200 * S)  # both rings' heads move past every hit
        assert lim.hit("k", 2)
        clock.set(T0 + 5 * S)  # back: 8 in the minute (and 2 ahead): 10 of 12; 4 in the second
        used = [s.used for s in lim.stats_all("k")]
        assert used[0] >= 4 + 2 and used[1] >= 8 + 2, used  # the second's 6 > 5: refused
        assert not lim.hit("k", 1)


def test_a_clock_behind_is_told_when_the_ghost_leaves(name):
    """A clock behind the head that counts the ghost is refused, with a reset and a wait no
    shorter than until the ghost's hits leave its window (they count up to P + P/buckets)."""
    clock = SteppingClock(T0)
    with limiter(name, "5/minute", 10, clock) as lim:
        assert all(lim.hit("k") for _ in range(5))
        clock.set(T0 + 300 * S)
        assert lim.hit("k")
        clock.set(T0 + 30 * S)
        stats = lim.stats("k")
        assert stats.remaining == 0
        assert 30 <= stats.reset_after <= 36, stats
        clock.set(T0 + 66 * S)  # past P + P/buckets: the ghost left this clock's window
        assert lim.stats("k").used == 1  # only the hit ahead (at T + 300 s) counts


def test_a_clock_that_only_moves_forward_never_counts_the_ghost(name):
    """The ghost is for clocks behind the head: forward, a key admits exactly as before."""
    clock = ManualClock(T0)
    with limiter(name, "10/second", 10, clock) as lim:
        for _ in range(50):
            assert sum(lim.hit("k") for _ in range(12)) == 10
            clock.advance(1.1)


# -- a model over random steps, forward and back ----------------------------------------------------


def step_ns(period_ns: int, rng: random.Random) -> int:
    """A clock's next reading, relative: mostly forward; one in six back, by a little, about
    P, several P, or 10**6 s."""
    r, sign = rng.random(), -1 if rng.random() < 1 / 6 else 1
    if r < 0.55:
        return sign * rng.randrange(period_ns // 3)
    if r < 0.8:
        return sign * rng.choice((period_ns - 1, period_ns, period_ns + 1, 2 * period_ns, 3 * period_ns))
    if r < 0.95:
        return sign * rng.randrange(1, 5 * period_ns)
    return sign * 10**6 * S


@pytest.mark.parametrize(
    "rates, buckets",
    [("5/second", 1), ("5/second", 10), ("12/minute", 20), ("10/hour", 60), ("40/10 seconds", 8),
     ("1/second", 4), (["5/second", "12/minute"], 10)],
)  # fmt: skip
@pytest.mark.parametrize("seed", range(3))
def test_random_steps_never_pass_the_limit_in_the_clocks_frame(name, rates, buckets, seed):
    """A clock stepping forward and back; random costs. Every reading x counts, in each rate,
    at least min(L, the cost admitted at times inside the window of x), and no interval of P
    of the clock's frame holds more than L. Once the clock passes every hit by P + P/buckets
    and the head, the key admits L again; along the way it admits at least half of what a
    and it admits along the way (strict, not shut)."""
    rng = random.Random(f"{rates}-{buckets}-{seed}")
    t = latest = T0
    clock = SteppingClock(t)
    admitted: list[tuple[int, int]] = []
    with limiter(name, rates, buckets, clock) as lim:
        rings = [(s.limit, int(s.rate.period_ns)) for s in lim.stats_all("k")]
        longest = max(p for _, p in rings)
        for i in range(500):
            t = max(0, t + step_ns(longest, rng))
            latest = max(latest, t)
            clock.set(t)
            cost = rng.choice((1, 1, 1, 2, rings[0][0]))
            if lim.hit("k", cost):
                admitted.append((t, cost))
            for (limit, period_ns), stats in zip(rings, lim.stats_all("k"), strict=True):
                held = sum(c for at, c in admitted if in_window(at, t, period_ns, buckets))
                assert stats.used >= min(limit, held), (i, t, stats.used, held)
        for limit, period_ns in rings:
            assert busiest_period(admitted, period_ns) <= limit
        assert sum(c for _, c in admitted) >= 10 * min(limit for limit, _ in rings)  # not shut
        clock.set(latest + 3 * longest)
        first = rings[0][0]
        assert [lim.hit("k") for _ in range(first + 1)] == [True] * first + [False]


# -- processes whose clocks disagree --------------------------------------------------------------


def _skewed_hitter(name: str, conn) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(0)  # this process's own clock, not the parent's
    lim = Limiter(name, "6/10 seconds", buckets=10, clock=clock)
    while (job := conn.recv()) is not None:
        now, cost = job
        clock.set(now)
        conn.send(lim.hit("k", cost))
    lim.close()


@pytest.mark.parametrize("skew_s", [3, 10, 40, 10**6])
def test_processes_with_clocks_apart_never_pass_the_limit_at_their_own_times(name, skew_s):
    """This process and a forked one hit one key in random turns, the other's ManualClock
    `skew_s` ahead (P = 10 s, limit 6, 10 buckets). With each admitted hit at the time its own
    process's clock read, no interval of P holds more than the limit in either frame."""
    period_ns, limit, skew = 10 * S, 6, skew_s * S
    clock = ManualClock(T0)
    lim = Limiter(name, "6/10 seconds", buckets=10, clock=clock)
    try:
        stamped, exitcode = skewed_turns(
            lim.hit, clock, functools.partial(_skewed_hitter, name),
            t0_ns=T0, period_ns=period_ns, skew_ns=skew, turns=300, seed=skew_s,
        )  # fmt: skip
        assert busiest_period(stamped, period_ns) <= limit
        assert sum(c for _, c in stamped) > 30
        assert exitcode == 0
    finally:
        lim.unlink()
        lim.close()


SKEWED_CHILD = """
import sys
from shmwin import Limiter, ManualClock
lim = Limiter(sys.argv[1], "12/10 seconds", buckets=10, clock=ManualClock(int(sys.argv[2])))
print(lim.hit("k", int(sys.argv[3])))
lim.close()
"""


def test_an_unrelated_process_far_ahead_never_erases_this_ones_hits(name):
    """12 in 10 s: 11 hits here at T; an unrelated process whose clock reads T + 1000 s counts
    one (its head move drops the 11). Back here at T + 5 s the 11 are inside the window and
    the other's hit is ahead: 12, nothing is admitted."""
    clock = SteppingClock(T0)
    with limiter(name, "12/10 seconds", 10, clock) as lim:
        assert all(lim.hit("k") for _ in range(11))
        assert run_python(SKEWED_CHILD, name, str(T0 + 1000 * S), "1").stdout.split() == ["True"]
        clock.set(T0 + 5 * S)
        assert lim.stats("k").used == 12
        assert not lim.hit("k")


# -- exact rates (log rings): a hit never erases the dead entries a clock behind still counts ------


def test_an_exact_rates_dead_entries_are_kept_for_a_clock_behind(name):
    """exact=True, 5/second: hits of cost 3 and 2 at T; one hit at T + 3 s takes a slot whose
    entry counts nothing at its now (it erased the cost-3 entry: back at T + 0.5 s the key
    admitted 2 more, 8 in that clock's second). The dead entries are kept as one."""
    clock = SteppingClock(T0)
    with exact_limiter(name, "5/second", True, clock) as lim:
        assert lim.hit("k", 3) and lim.hit("k", 2)
        clock.set(T0 + 3 * S)
        assert lim.hit("k")
        clock.set(T0 + S // 2)
        assert lim.stats("k").used >= 5
        assert not any(lim.hit("k") for _ in range(5))
        clock.set(T0 + 3 * S)
        assert sum(lim.hit("k") for _ in range(5)) == 4


@pytest.mark.parametrize("limit, times", [(5, True), (12, True), (10, 3)])  # 1-2 entries under 9: left open
@pytest.mark.parametrize("seed", range(3))
def test_exact_random_steps_never_pass_the_limit_in_the_clocks_frame(name, limit, times, seed):
    """The random walk above on an exact rate (P = 1 s): every reading x counts at least
    min(L, the cost admitted at times >= x - P), and no closed interval of P holds more."""
    rng = random.Random(f"{limit}-{times}-{seed}")
    t = latest = T0
    clock = SteppingClock(t)
    admitted: list[tuple[int, int]] = []
    with exact_limiter(name, f"{limit}/second", times, clock) as lim:
        for i in range(400):
            t = max(0, t + step_ns(S, rng))
            latest = max(latest, t)
            clock.set(t)
            cost = rng.choice((1, 1, 1, 2, limit))
            if lim.hit("k", cost):
                admitted.append((t, cost))
            held = sum(c for at, c in admitted if at >= t - S)
            assert lim.stats("k").used >= min(limit, held), (i, t, held)
        hits, best, total, lo = sorted(admitted), 0, 0, 0
        for at, c in hits:
            total += c
            while hits[lo][0] < at - S:
                total -= hits[lo][1]
                lo += 1
            best = max(best, total)
        assert best <= limit
        assert sum(c for _, c in admitted) >= 10 * limit  # not shut
        clock.set(latest + 3 * S)
        assert [lim.hit("k") for _ in range(limit + 1)] == [True] * limit + [False]


def exact_limiter(name: str, rate: str, exact: bool | int, clock: Clock) -> AbstractContextManager[Limiter]:
    return dropped_after(Limiter(name, rate, exact=exact, clock=clock))
