"""A Limiter's hit struck at every store while its head move keeps the dropped counts as the
ring's ghost (core/rings.c, section "hit", "a clock stepped back: the ring's ghost"; issue #33
item 2): whatever store a process dies after (or is interrupted after), a clock stepped back
inside the dropped hits' window still counts every one of them, no interval of P admits more
than the limit in that clock's frame, and the row is repaired. Run against the test build:
scripts/checks.d/10-failpoints.sh -k ring_clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.clock_steps import SteppingClock
from support.failpoints import LOCK_TIMEOUT, PROGRESS, RAISE, SIGNALS, T0, S

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints, pytest.mark.sanitize]

P = 10 * S
LIMIT = 6
RATE = "6/10 seconds"  # 10 buckets of 1 s, 11 kept
# (hits before the struck one, each at its time; the struck hit's time; a clock stepped back;
# what that clock holds in its window before the strike (the dropped hits and those ahead))
CASES = {
    # a lap: the struck hit's head move (3 P) drops all 4 hits at T0 into a fresh ghost
    "lap": ([T0] * 4, T0 + 3 * P, T0 + P // 2, 4),
    # a few buckets: 3 hits at T0 are already a ghost (a jump to T0 + 3 P kept them), 2 more at
    # T0 + 3 P, 1 at T0 + 3.8 P; the struck hit (T0 + 4.2 P, 4 buckets on) drops the 2 and merges
    # them into the ghost (3 + 2, capped at 6 - 1 kept). Back at T0 + 3.5 P: the 2 and the 1 ahead
    "merge": ([T0] * 3 + [T0 + 3 * P] * 2 + [T0 + 38 * S], T0 + 42 * S, T0 + 35 * S, 3),
}

# untorn, back at back_at: (used, admitted): lap, the ghost's 4 and the hit ahead; merge, the
# ghost's 5 (capped: 6 - 1 kept) and the 2 ahead of that clock
UNTORN = {"lap": (5, 1), "merge": (LIMIT + 1, 0)}


def _open(name: str, clock: Any) -> Limiter:
    return Limiter(name, RATE, buckets=10, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("sig", SIGNALS)
def test_ring_clock_ghost_struck(make_name, tmp_path, sig, case):
    """The victim's hits, then the struck hit at a later clock, whose head move writes the
    ghost. A clock stepped back into the dropped hits' window sees them all (and the struck
    hit, ahead of it, if it was counted): what it may still admit keeps its window within the
    limit, exactly so when the call completed untorn. Forward at the struck hit's time only
    the ring's own counts count (never the ghost), and the row is at rest."""
    pre, struck_at, back_at, held = CASES[case]
    inflights: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"rc{n}"), tmp_path / f"clock{n}"
        ManualClock(T0, path=clock_path)
        back = SteppingClock(back_at)
        lim = _open(name, back)
        try:
            before = fp.hits_then_strike(lambda clock: _open(name, clock), clock_path, pre, struck_at)
            hit, test = (lambda mine: mine.hit("k")), (lambda mine: mine.test("k"))
            with fp.strike("hit", n, sig, before, hit, test) as s:
                assert s.report[PROGRESS] == len(pre)
                used = fp.promptly(lim.stats, "k").used  # back first: the row as the strike left it
                fp.assert_repaired(lim, "k")
                back.now_ns = struck_at
                counted = fp.promptly(lim.stats, "k").used - sum(1 for at in pre if at > struck_at - P)
                assert counted in (0, 1), f"the hit in flight counted {counted} times"
                if s.completed:
                    assert counted == 1
                inflights[n] = bool(counted)
                back.now_ns = back_at
                assert used >= held + counted, f"a clock stepped back lost dropped hits: {used}"
                admitted = sum(bool(fp.promptly(lim.hit, "k")) for _ in range(LIMIT))
                assert held + counted + admitted <= LIMIT, f"over the limit: {admitted} more"
                if not s.fired or sig == RAISE:  # untorn: the ghost as the model keeps it
                    assert (used, admitted) == UNTORN[case]
            return s.fired
        finally:
            fp.drop(lim, name)

    fp.every_store(strike_at, "hit", at_least=8)
    fp.assert_monotone(inflights, "the in-flight hit")


# an exact rate (a log ring, 6 entries): 3 entries at T0, T0 + 1 s, T0 + 2 s (1, 1 and 2 hits);
# the struck hit at T0 + 3 P finds them dead: the newest keeps all 4, the other two are zeroed,
# then the hit takes a slot. Back at T0 + 5 s, the 4 are in that clock's window
EXACT_PRE = [(T0, 1), (T0 + S, 1), (T0 + 2 * S, 2)]


@pytest.mark.parametrize("sig", SIGNALS)
def test_exact_dead_entries_kept_struck(make_name, tmp_path, sig):
    """Limiter(exact=True).hit struck at every store while it keeps its dead entries as one:
    a clock stepped back still counts them (and the struck hit, ahead, if counted), admits no
    more than the limit in its window, exactly so untorn."""
    inflights: dict[int, bool] = {}

    def exact(name: str, clock: Any) -> Limiter:
        return Limiter(name, RATE, exact=True, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"ex{n}"), tmp_path / f"clock{n}"
        ManualClock(T0, path=clock_path)
        back = SteppingClock(T0 + 5 * S)
        lim = exact(name, back)
        try:

            def before(report: Any) -> Limiter:
                clock = ManualClock(path=Path(clock_path))
                mine = exact(name, clock)
                for at, cost in EXACT_PRE:
                    clock.set(at)
                    assert mine.hit("k", cost)
                    report[PROGRESS] += 1
                clock.set(T0 + 3 * P)
                return mine

            hit, test = (lambda mine: mine.hit("k")), (lambda mine: mine.test("k"))
            with fp.strike("hit", n, sig, before, hit, test) as s:
                assert s.report[PROGRESS] == len(EXACT_PRE)
                used = fp.promptly(lim.stats, "k").used
                back.now_ns = T0 + 3 * P
                counted = fp.promptly(lim.stats, "k").used
                assert counted in (0, 1), f"the hit in flight counted {counted} times"
                if s.completed:
                    assert counted == 1
                inflights[n] = bool(counted)
                back.now_ns = T0 + 5 * S
                assert used >= 4 + counted, f"a clock stepped back lost dead hits: {used}"
                admitted = sum(bool(fp.promptly(lim.hit, "k")) for _ in range(LIMIT))
                assert 4 + counted + admitted <= LIMIT, f"over the limit: {admitted} more"
                if not s.fired or sig == RAISE:
                    assert (used, admitted) == (5, 1)
            return s.fired
        finally:
            fp.drop(lim, name)

    fp.every_store(strike_at, "hit", at_least=5)
    fp.assert_monotone(inflights, "the in-flight hit")
