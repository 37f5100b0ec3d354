"""Fail points: refund: give back the most recent hits.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _fill(name: str, clock_path: Path) -> tuple[int, int]:
    """A survivor's view of the struck key, then hits until refused: (used, admitted)."""
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
    used = fp.promptly(lim.stats, "k").used
    admitted = 0
    while fp.promptly(lim.hit, "k"):
        admitted += 1
    lim.close()
    return used, admitted


@pytest.mark.parametrize("exact", [False, True], ids=["buckets", "exact"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_refund(make_name, tmp_path, sig, exact):
    """refund(k, 4) of 6 hits struck at every store: it gave back 0 to 4, never more, the
    key's lock is free (repaired), and the limit holds exactly from there on."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"refund{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", clock=clock, exact=exact, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path))
                assert mine.hit("k", cost=2)
                ManualClock(path=clock_path).advance(10)
                assert mine.hit("k", cost=4)
                report[PROGRESS] = 6
                return mine

            with fp.strike("refund", n, sig, before, lambda mine: mine.refund("k", 4)) as s:
                assert s.report[PROGRESS] == 6
                used, admitted = fp.in_child(_fill, name, clock_path)
                assert 2 <= used <= 6, used  # never more given back than asked
                if s.completed:
                    assert used == 2
                assert used + admitted == 10, (used, admitted)  # exact and strict after the repair
                assert not fp.promptly(lim.hit, "k")
            return s.fired
        finally:
            lim.unlink()
            lim.close()

    fp.every_store(strike_at, "refund", at_least=2)
