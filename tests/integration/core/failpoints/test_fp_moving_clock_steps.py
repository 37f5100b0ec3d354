"""The moving window's hit struck at every store while it keeps a key's dead hits as one entry
(core/moving.c, section "moving_hit", issue #33 item 2): whatever store a process dies after
(or is interrupted after), a clock stepped back inside the dead hits' window still counts
every one of them, and no interval of P admits more than the limit. Run against the test
build: scripts/checks.d/10-failpoints.sh -k moving_clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.clock_steps import SteppingClock
from support.failpoints import PROGRESS, RAISE, SIGNALS
from support.moving import assert_no_chunk_leaked

from shmwin import ManualClock
from shmwin.backends.shm import format as layout
from shmwin.integrations.limits_moving import MovingLogs

pytestmark = [pytest.mark.integration, pytest.mark.failpoints, pytest.mark.sanitize]

S = 1_000_000_000
T0 = 1_000 * S
P = 10 * S
LIMIT = 12
# hits before the struck one -> its stores: the intent, the last write, the merged entry
# (inline), the dead entries zeroed (the second inline one takes the hit), the hit. 3 dead
# entries are zeroed from the scan's list, 8 by a second walk of the chain (two chunks).
# The struck call settles first ("moving_settle": the dead entries kept as one; "chunk_free": the
# chunks before it given back), then counts ("moving_hit"): its stores, by section and hits before.
BEFORE_STORES = {("moving_settle", 3): 3, ("moving_hit", 3): 4, ("moving_settle", 8): 3, ("chunk_free", 8): 8,
                 ("moving_hit", 8): 4}  # fmt: skip


def _open(name: str, clock: Any, create: bool) -> MovingLogs:
    found = MovingLogs.open(name, LIMIT, P, 1024, clock, 16, create=create)
    assert found is not None
    return found


QUANTUM = 1 << layout.moving_quantum_shift(P)
JUMPS = {"3P": 3 * P, "past-2**31-quanta": (1 << 31) * QUANTUM + P}


@pytest.mark.parametrize("section, before_hits", list(BEFORE_STORES))
@pytest.mark.parametrize("jump", list(JUMPS))
@pytest.mark.parametrize("sig", SIGNALS)
def test_moving_clock_dead_hits_merge_struck(make_name, tmp_path, jump, sig, section, before_hits):
    """3 or 8 hits at T0 + i; the clock jumps forward (3 P, or past 2**31 quanta) and the struck
    hit merges the dead entries into one, zeroes the rest and writes itself. Back at
    T0 + 5 s, they all still count (and the struck hit, ahead, if it was counted): what is left
    to admit there keeps [T0, T0 + P] within the limit, exactly so when the call completed.
    Forward again, only the struck hit can count; every chunk is back once the key is reset."""
    jump_ns = JUMPS[jump]

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"mc{n}"), tmp_path / f"clock{n}"
        ManualClock(T0, path=clock_path)
        back = SteppingClock(T0 + 5 * S)
        m = _open(name, back, True)
        try:

            def before(report: Any) -> MovingLogs:
                clock = ManualClock(path=Path(clock_path))
                mine = _open(name, clock, False)
                for i in range(before_hits):
                    clock.set(T0 + i)
                    assert mine.hit("k", 1)
                    report[PROGRESS] += 1
                clock.set(T0 + jump_ns)
                return mine

            with fp.strike(section, n, sig, before, lambda mine: mine.hit("k", 1),
                        lambda mine: mine.used_and_reset("k")) as s:  # fmt: skip
                assert s.report[PROGRESS] == before_hits
                counted = 1 if s.completed else 0
                used = fp.promptly(m.used_and_reset, "k")[0]
                assert used >= before_hits + counted, f"a clock stepped back lost dead hits: {used}"
                admitted = sum(bool(fp.promptly(m.hit, "k", 1)) for _ in range(LIMIT))
                assert before_hits + admitted + counted <= LIMIT, f"over the limit: {admitted} more"
                if not s.fired or sig == RAISE:  # untorn: exact
                    assert used == before_hits + 1 and admitted == LIMIT - before_hits - 1
                back.now_ns = T0 + jump_ns
                assert fp.promptly(m.used_and_reset, "k")[0] >= counted
                back.now_ns = T0 + jump_ns + 3 * P
                assert_no_chunk_leaked(m)
            return s.fired
        finally:
            fp.drop(m, name)

    assert fp.every_store(strike_at) == BEFORE_STORES[section, before_hits]
