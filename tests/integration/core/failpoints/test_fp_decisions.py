"""Fail points: a limiter's decisions: counted after the key's lock is given back.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _decided(name: str, clock_path: Path) -> tuple[bool, tuple[int, int, int]]:
    """A survivor's hit on the struck limiter, and its decisions after it."""
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
    allowed = fp.promptly(lim.hit, "k")
    decided = tuple(lim.decisions())
    lim.close()
    return allowed, decided  # type: ignore[return-value]


@pytest.mark.parametrize("sig", SIGNALS)
def test_decision(make_name, tmp_path, sig):
    """A hit struck at every store of its decision (the tally's "add_striped", after the row
    lock is given back): the hit itself is counted whole, the decision in flight at most once,
    and no lock is held: the next hit, here and in another process, goes through."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"decision{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path))
                assert all(mine.hit("k") for _ in range(7))
                report[PROGRESS] = 7
                return mine

            with fp.strike("add_striped", n, sig, before, lambda mine: mine.hit("k")) as s:
                assert s.report[PROGRESS] == 7
                assert fp.promptly(lim.stats, "k").used == 8, "the hit under its row lock is whole"
                admitted, rejected, near = fp.promptly(lim.decisions)  # the 8th leaves 2 of 10: near
                assert rejected == 0 and admitted in (7, 8), (admitted, rejected, near)
                assert near <= admitted - 7, (admitted, near)
                if s.completed:
                    assert (admitted, near) == (8, 1)
                allowed, decided = fp.in_child(_decided, name, clock_path)
                assert allowed and decided == (admitted + 1, 0, near + 1)
                assert fp.promptly(lim.hit, "k") and not lim.hit("k")
                assert lim.decisions() == (admitted + 2, 1, near + 2)
            return s.fired
        finally:
            lim.unlink()
            lim.close()

    fp.every_store(strike_at, "a decision", at_least=2)  # admitted, then near
