"""Fail points: live limits (core/live.c: sections "live" and "retire").

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS, T0

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]

HELD = 6  # hits of key "k" before the change, of 10 a minute


def _hits(name: str, clock_path: Path, n: int) -> tuple[list[str], list[int]]:
    """A survivor that attaches after the strike: the rates it meets, and n hits on "k"."""
    with Limiter.attach(name, clock=ManualClock(path=clock_path)) as lim:
        return [str(r) for r in lim.rates], [int(lim.hit("k")) for _ in range(n)]


def _limiter(name: str, clock_path: Path, rates: str = "10/minute") -> Limiter:
    return Limiter(name, rates, clock=ManualClock(path=clock_path))


@contextmanager
def _holding(name: str, clock_path: Path) -> Iterator[Limiter]:
    """This process's limiter, HELD hits of "k" in it; closed and its segment unlinked after."""
    mine = _limiter(name, clock_path)
    try:
        assert all(mine.hit("k") for _ in range(HELD))
        yield mine
    finally:
        fp.drop(mine, name)


def _started(report: Any) -> None:
    """A victim's ``before`` with nothing to open first."""
    report[PROGRESS] = 1


@pytest.mark.parametrize("sig", SIGNALS)
def test_live_limits_change(make_name, tmp_path, sig):
    """set_limits struck at every store: the limits in force are the old ones or the new ones,
    whole (a table is published by the generation word, its last store); no lock hangs; every
    process, this one and a survivor, meets the same limits at its next call."""
    seen: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"live{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        with _holding(name, clock_path) as mine:

            def before(report):
                theirs = _limiter(name, clock_path)
                _started(report)
                return theirs

            change, again = (lambda t: t.set_rates("4/minute")), (lambda t: t.hit("other"))
            with fp.strike("live", n, sig, before, change, again) as s:
                rates = [str(r) for r in fp.promptly(lambda: mine.rates)]
                assert rates in (["10/minute"], ["4/minute"]), rates
                changed = rates == ["4/minute"]
                assert changed or not s.completed, "the change completed, yet the old limits hold"
                seen[n] = changed
                theirs_rates, got = fp.in_child(_hits, name, clock_path, 5)
                assert theirs_rates == rates, "a survivor meets other limits"
                assert sum(got) == (0 if changed else 10 - HELD), f"{got}: the held hits were not kept"
                assert fp.promptly(mine.hit, "k") is False
                clock.advance(70)
                assert sum(fp.promptly(mine.hit, "k") for _ in range(12)) == (4 if changed else 10)
        return s.fired

    stores = fp.every_store(strike_at)
    fp.assert_monotone(seen, "live")
    assert stores == 3, f"section 'live' made {stores} stores"  # a limit, when, the generation


@pytest.mark.parametrize("sig", SIGNALS)
def test_live_limits_move(make_name, tmp_path, sig):
    """A move struck after its retire: the old segment no longer counts, no new one is under the
    name yet. The next call of a process still holding the old one takes the move over (its
    mover died, or gave up: it let go of the file's lock) and carries the held hits: never more
    than the limit, and nothing left in /dev/shm but the name and its decisions."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"move{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        with _holding(name, clock_path) as mine:
            move = lambda _: _limiter(name, clock_path, "10/hour")  # noqa: E731
            with fp.strike("retire", n, sig, _started, move) as s:
                got = [int(fp.promptly(mine.hit, "k")) for _ in range(10)]
                assert sum(got) == 10 - HELD, f"{got}: the held hits were not carried"
                assert [str(r) for r in mine.rates] in (["10/minute"], ["10/hour"])
                clock.advance(70)
                rates, later = fp.in_child(_hits, name, clock_path, 3)
                assert sum(later) == (3 if rates == ["10/minute"] else 0), (rates, later)
        return s.fired

    assert fp.every_store(strike_at) == 1  # the generation word's bit


@pytest.mark.parametrize("sig", SIGNALS)
def test_live_limits_move_after_an_in_place_change(make_name, tmp_path, sig):
    """A move struck after its retire, once the limits were changed in place (10 -> 8/minute):
    the takeover, or the struck mover's roll back, keeps 8/minute -- never the ring table's
    original 10/minute -- and the held hits."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"moved{n}"), tmp_path / f"clock{n}"
        with _holding(name, clock_path) as mine:
            mine.set_rates("8/minute")
            move = lambda _: _limiter(name, clock_path, "8/hour")  # noqa: E731
            with fp.strike("retire", n, sig, _started, move) as s:
                got = [int(fp.promptly(mine.hit, "k")) for _ in range(10)]
                assert sum(got) == 8 - HELD, f"{got}: not the limits in force, or the held hits lost"
                assert [str(r) for r in mine.rates] in (["8/minute"], ["8/hour"])
                rates, _ = fp.in_child(_hits, name, clock_path, 0)
                assert rates in (["8/minute"], ["8/hour"]), rates
        return s.fired

    assert fp.every_store(strike_at) == 1  # the generation word's bit
