"""Fail points: hit, exact, on the log ring's ordered run (core/exactlog.c): a hit that expires
entries from the run's tail into the dead entry, and a hit whose clock is behind the newest
entry (inserted in order, the later entries moved up one slot).

The harness and the rules it checks are in tests/support/failpoints.py; the plain append and
the merge are struck in test_fp_hit_exact_log.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0, S

import shmwin
from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]

P = 60 * S
PRE_HITS = [T0, T0 + 10 * S, T0 + 20 * S, T0 + 20 * S, T0 + 30 * S]
# where the clock is for the struck hit: 75 s (the hits at T0 and T0 + 10 s expire), or 25 s
# after T0, behind the newest entry (T0 + 30 s: it moves up a slot)
STRUCK_AT = {"expiring": T0 + 75 * S, "behind": T0 + 25 * S}
SCHEDULE = [(1, "here", 4), (5, "child", 4), (30, "here", 8), (61, "child", 12)]


def used_at(times: list[int], now: int) -> int:
    return sum(1 for t in times if t >= now - P)


def _hits(name: str, clock_path: Path, count: int) -> list[bool]:
    with Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT) as lim:
        return [bool(fp.promptly(lim.hit, "k")) for _ in range(count)]


@pytest.mark.parametrize("case", sorted(STRUCK_AT))
@pytest.mark.parametrize("sig", SIGNALS)
def test_hit_exact_expiring_or_behind(make_name, tmp_path, case, sig):
    """A "10/minute" exact limiter: the struck hit expires entries, or is behind the newest one. After
    each store: every returned hit stays counted until P after it (nothing returned is lost:
    the count errs high only -- a moved entry counted twice until it leaves, at most one
    entry), the struck hit counts at most once, and the limit holds in every interval,
    for this process and another; once the section completed, the next hits are exact."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"order{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", exact=True, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            for at in PRE_HITS:
                clock.set(at)
                assert lim.hit("k")
            struck_ns = STRUCK_AT[case]
            clock.set(max(clock(), struck_ns))  # this process's clock; the victim's reads struck_ns

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(struck_ns), lock_timeout=5)
                report[PROGRESS] += 1
                return mine

            with fp.strike("hit", n, sig, before, lambda mine: mine.hit("k")) as s:
                assert s.report[PROGRESS] == 1
                now = clock()
                used = fp.promptly(lim.stats, "k").used  # the dead holder's lock: repaired at once
                extra = used - used_at(PRE_HITS, now)
                assert extra >= 0, f"returned hits lost: {extra}"
                assert extra == 1 or not s.completed, "the hit completed: it is counted once"
                assert extra <= 2, f"more than the struck hit and one moved entry counted: {extra}"
                admitted = [*PRE_HITS, *([struck_ns] if s.completed or extra == 1 else [])]
                for advance, who, count in SCHEDULE:
                    now = clock.advance(advance)
                    if who == "here":
                        got = [bool(fp.promptly(lim.hit, "k")) for _ in range(count)]
                    else:
                        got = fp.in_child(_hits, name, clock_path, count)
                    room = 10 - used_at(admitted, now)  # the exact rule, counting the struck hit
                    assert sum(got) <= max(room, 0), (who, (now - T0) / S, got, room)
                    if s.completed:
                        assert sum(got) == min(count, max(room, 0)), (who, (now - T0) / S, got, room)
                    admitted += [now] * sum(got)
                fp.assert_never_over(lim, admitted)
            return s.fired
        finally:
            lim.close()
            shmwin.unlink(name)

    # expiring: intent, the dead entry's time and hits, the run's position and total, then the
    # append (total, hits, time, position), the row's last write. behind: intent, total, the
    # newest entry copied up (hits, time), the position, the new entry (hits, time); the row's
    # last write stays (it never moves back)
    assert fp.every_store(strike_at) == (10 if case == "expiring" else 7)
