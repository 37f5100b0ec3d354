"""The moving window (role "moving-log", core/moving.c) under clocks that step: limits reads
the wall clock, which NTP steps forward and back, and processes' clocks may disagree. A hit
at a later clock must never erase hits that a clock stepped back still has inside its window:
in every clock's own frame, no interval of P holds more than the limit (issue #33, item 2).

Each test drives time by hand (ManualClock, or limits' time.time mocked); the processes are
real (fork, or an unrelated ``python -c``)."""

from __future__ import annotations

import functools
import random

import pytest
from support.clock_steps import SteppingClock, busiest_period, skewed_turns
from support.helpers import run_python
from support.stepping import forward_then_back

import shmwin
from shmwin import ManualClock
from shmwin.backends.shm import format as layout
from shmwin.integrations.limits_moving import MovingLogs

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

S = 1_000_000_000
T0 = 1_000_000 * S


def quantum(period_ns: int) -> int:
    return 1 << layout.moving_quantum_shift(period_ns)


def old_ns(period_ns: int) -> int:
    """How far behind the last write an entry may lie before it is moved up (OLD_QUANTA)."""
    return (1 << (layout.MOVING_SPAN_BITS + 2)) * quantum(period_ns)


def open_log(
    name: str, clock: ManualClock | SteppingClock, limit: int, period_ns: int, times: int = 1024
) -> MovingLogs:
    found = MovingLogs.open(name, limit, period_ns, times, clock, 16, create=True)
    assert found is not None
    return found


# -- the attack, through limits: shm:// answers as memory:// ------------------------------


@pytest.mark.parametrize(
    "rate, jump_s",
    [("5/second", 2), ("5/second", 100), ("12/minute", 120), ("12/minute", 10_000), ("10/hour", 7200),
     ("10/hour", 1_000_000)],
)  # fmt: skip
def test_limits_clock_forward_then_back_answers_as_memory(name, monkeypatch, rate, jump_s):
    """L hits at T; the wall clock jumps forward (2 P, or far past 2**30 quanta) for one hit;
    then back to T + 1 s: the L hits at T are inside that clock's window, so memory:// refuses
    every hit there, and so must shm:// (it admitted 3, 4, 8, 9 of them: the hit at the later
    clock took the entries that counted nothing at its now)."""
    pytest.importorskip("limits")
    from limits import parse

    now = [1_800_000_000.0]
    monkeypatch.setattr("time.time", lambda: now[0])
    item = parse(rate)
    # the L hits at T, at least, inside [T + 1 s - P, T + 1 s]: shm:// has nothing left
    answers = forward_then_back(name, f"shm://{name}", item, jump_s, 1, now, lambda left: left == 0)
    assert answers["shm"] == answers["memory"] == (item.amount, True, 0)


# -- a model over random steps, forward and back ----------------------------------------------------


def step(period_ns: int, rng: random.Random) -> int:
    """A wall clock's next reading, relative: mostly forward; one in six back (an NTP step, or
    another process's clock), by a little, about P, several P, or past 2**30 or 2**31 quanta."""
    q, r = quantum(period_ns), rng.random()
    sign = -1 if rng.random() < 1 / 6 else 1
    if r < 0.5:
        return sign * rng.randrange(period_ns // 2)
    if r < 0.75:
        return sign * rng.choice((period_ns - q, period_ns, period_ns + q, 2 * period_ns, 3 * period_ns))
    if r < 0.92:
        return sign * rng.randrange(1, 5 * period_ns)
    return sign * rng.choice((old_ns(period_ns), old_ns(period_ns) + period_ns, (1 << 31) * q + period_ns,
                              (1 << 32) * q - 1))  # fmt: skip


@pytest.mark.parametrize(
    "limit, period_ns, times",
    [(5, S, 1024), (12, S, 1024), (3, 60 * S, 1024), (40, 10 * S, 1024), (12, S, 4), (9, S, 1), (1, S, 1024)],
)  # fmt: skip
@pytest.mark.parametrize("seed", range(3))
def test_random_steps_never_pass_the_limit_in_the_clocks_frame(name, limit, period_ns, times, seed):
    """A wall clock stepping forward and back by a little, P, several P and past 2**30 and
        2**31 quanta; random costs. Every reading at x counts at least min(L, the hits admitted at
        times >= x - P) -- so no hit recorded inside the window of x is missing -- and no interval
        of P of the clock's frame holds more than L. Once the clock passes every hit by P, the
        key admits L again; along the way it admits at least 80 % of what a log that kept every hit
    forever would, 60 % past ?times= (strict, not shut: dead hits are kept as one entry, held longer)."""
    rng = random.Random(f"{limit}-{period_ns}-{times}-{seed}")
    t = T0
    clock = SteppingClock(t)
    m = open_log(name, clock, limit, period_ns, times)
    admitted: list[tuple[int, int]] = []
    kept_all = 0  # what a log keeping every hit forever admits along the same readings
    log: list[tuple[int, int]] = []
    try:
        for i in range(700):
            t = max(0, t + step(period_ns, rng))
            clock.set(t)
            cost = rng.choice((1, 1, 1, 2, limit))
            if m.hit("k", cost):
                admitted.append((t, cost))
            if sum(c for at, c in log if at >= t - period_ns) + cost <= limit:
                log.append((t, cost))
                kept_all += 1
            held = sum(c for at, c in admitted if at >= t - period_ns)
            used = m.used_and_reset("k")[0]
            assert used >= min(limit, held), (i, t, used, held)
        assert busiest_period(admitted, period_ns, closed=True) <= limit
        shut = 0.8 if times >= limit else 0.6  # past ?times= merges hold hits longer still
        assert len(admitted) >= shut * kept_all, (len(admitted), kept_all)  # strict, not shut
        clock.set(max(at for at, _ in admitted) + period_ns + quantum(period_ns))
        assert [m.hit("k", 1) for _ in range(limit + 1)] == [True] * limit + [False]
    finally:
        m.close()
        shmwin.unlink(name)


# -- processes whose clocks disagree --------------------------------------------------------------


def _skewed_hitter(name: str, conn) -> None:  # type: ignore[no-untyped-def]
    clock = ManualClock(0)  # this process's own clock, not the parent's
    m = MovingLogs.open(name, 0, 0, 0, clock, None, create=False)
    assert m is not None
    while (job := conn.recv()) is not None:
        now, cost = job
        clock.set(now)
        conn.send(m.hit("k", cost))
    m.close()


@pytest.mark.parametrize("skew_s", [3, 10, 40, 200])
def test_processes_with_clocks_apart_never_pass_the_limit_at_their_own_times(name, skew_s):
    """This process and a forked one hit one key in random turns, the other's clock `skew_s`
    ahead (P = 10 s, limit 6; 200 s is past 2**30 quanta). With each admitted hit at the time
    its own process's clock read, no interval of P holds more than the limit. (The fast clock's
    hits are ahead of this one's, so they count here; the slow clock's hits the fast one calls
    old are the skew's own allowance: test_redteam_moving's small-skew test bounds that.)"""
    period_ns, limit, skew = 10 * S, 6, skew_s * S
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        stamped, exitcode = skewed_turns(
            m.hit, clock, functools.partial(_skewed_hitter, name),
            t0_ns=T0, period_ns=period_ns, skew_ns=skew, turns=400, seed=skew_s,
        )  # fmt: skip
        assert busiest_period(stamped, period_ns, closed=True) <= limit
        assert sum(c for _, c in stamped) > 50
        assert exitcode == 0
    finally:
        m.close()
        shmwin.unlink(name)


SKEWED_CHILD = """
import sys
from shmwin import ManualClock
from shmwin.integrations.limits_moving import MovingLogs
m = MovingLogs.open(sys.argv[1], 0, 0, 0, ManualClock(int(sys.argv[2])), None, create=False)
print(m.hit("k", int(sys.argv[3])))
m.close()
"""


def test_an_unrelated_process_far_ahead_never_erases_this_ones_hits(name):
    """A limit of 12 in 10 s: 11 hits here at T (inline entries and chunks); an unrelated
    process whose clock reads T + 1000 s (past 2**30 quanta) counts one. Back here at T + 5 s
    the 11 are inside the window and the other's hit is ahead: 12, nothing is admitted."""
    period_ns, limit = 10 * S, 12
    clock = SteppingClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        for i in range(limit - 1):
            clock.set(T0 + i)
            assert m.hit("k", 1)
        assert run_python(SKEWED_CHILD, name, str(T0 + 1000 * S), "1").stdout.split() == ["True"]
        clock.set(T0 + 5 * S)
        assert m.used_and_reset("k")[0] == limit
        assert not m.hit("k", 1)
    finally:
        m.close()
        shmwin.unlink(name)


# -- memory still follows the hits a key holds ------------------------------------------------------


def test_dead_hits_are_kept_as_one_entry_and_their_chunks_go_back(name):
    """20 hits of a 30/10 s limit take 6 chunks; once they have all left (the clock 3 P later),
    the next hit keeps them as one entry of the row and gives every chunk back; a clock back
    inside their window still counts all 20 (and the new hit, ahead of it)."""
    period_ns, limit = 10 * S, 30
    clock = SteppingClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        for i in range(20):
            clock.set(T0 + i)
            assert m.hit("k", 1)
        top, free, _, _ = m.chunks()
        assert top - free == 6
        clock.set(T0 + 3 * period_ns)
        assert m.hit("k", 1)
        top, free, _, _ = m.chunks()
        assert free == top, "chunks holding only dead hits stayed with the key"
        assert m.used_and_reset("k")[0] == 1
        clock.set(T0 + period_ns // 2)
        assert m.used_and_reset("k")[0] == 21
        assert sum(m.hit("k", 1) for _ in range(limit)) == limit - 21
    finally:
        m.close()
        shmwin.unlink(name)
