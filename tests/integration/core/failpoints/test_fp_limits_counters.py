"""Fail points: limits' counters: the fixed window and the sliding window counter (core/counters.c).

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS, T0, S

from shmwin import ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


COUNTER_P = 10 * S  # T0 is a multiple of it: window 100 starts at T0


def _counters(kind: str, name: str, clock: ManualClock, create: bool = True) -> Any:
    from shmwin.integrations.limits_fixed import FixedWindows
    from shmwin.integrations.limits_sliding import SlidingCounters

    opener = FixedWindows if kind == "fixed" else SlidingCounters
    found = opener.open(name, COUNTER_P, clock, 16, create=create)
    assert found is not None
    return found


def _counter_calls(kind: str, name: str, clock_path: Path, n: int, limit: int) -> list[int]:
    """A survivor's n calls on "k": a fixed window's counts after each incr, or 0/1 per hit."""
    c = _counters(kind, name, ManualClock(path=clock_path), create=False)
    try:
        return [c.incr("k", 1) if kind == "fixed" else int(c.hit("k", limit, 1)) for _ in range(n)]
    finally:
        c.close()


@pytest.mark.parametrize("when", ["same-window", "new-window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_fixed_incr(make_name, tmp_path, sig, when):
    """The fixed window's incr struck at every store: every incr that returned is counted, the
    one in flight at most once; a torn new window may still hold the old count (refusals
    early), never fewer than the hits it counted; the next caller is not held up."""
    seen: dict[int, int] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"fixed{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        mine = _counters("fixed", name, clock)
        try:
            mine.incr("other", 7)

            def before(report):
                theirs = _counters("fixed", name, ManualClock(path=clock_path), create=False)
                for _ in range(3):
                    theirs.incr("k", 1)
                    report[PROGRESS] += 1
                ManualClock(path=clock_path).advance(3 if when == "same-window" else 12)
                return theirs

            with fp.strike("fixed_incr", n, sig, before, lambda t: t.incr("k", 1), lambda t: t.get("k")) as s:
                assert s.report[PROGRESS] == 3
                count = fp.promptly(mine.get, "k")  # the row lock the victim may have died holding
                if when == "same-window":
                    assert count in (3, 4), f"returned incrs lost, or the one in flight twice: {count}"
                    assert not s.completed or count == 4
                else:  # the old window is over: the new one holds the hit, or nothing, or (torn) the old 3
                    assert count in (0, 1, 3), f"a new window holding {count}"
                    assert not s.completed or count == 1
                seen[n] = count
                got = fp.in_child(_counter_calls, "fixed", name, clock_path, 4, 0)
                assert got == [count + i for i in range(1, 5)], f"a survivor's incrs counted {got}"
                assert fp.promptly(mine.incr, "k", 1) == count + 5
                assert mine.get("other") == (7 if when == "same-window" else 0), "another key moved"
            return s.fired
        finally:
            fp.drop(mine, name)

    fp.every_store(strike_at, "fixed_incr", at_least=(2 if when == "same-window" else 3))


def _weighted(previous: int, current: int, elapsed_ns: int) -> int:
    return previous * (COUNTER_P - elapsed_ns) // COUNTER_P + current


@pytest.mark.parametrize("when", ["same-window", "new-window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_sliding_hit(make_name, tmp_path, sig, when):
    """The sliding counter's hit struck at every store: afterwards its weighted count is never
    below what the returned hits make it (no lost count beyond the hit in flight), so the
    hits admitted next never pass the limit by limits' own rule; no lock hangs."""
    limit = 8
    seen: dict[int, tuple[int, int]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"sliding{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0 + 1 * S, path=clock_path)
        mine = _counters("sliding", name, clock)
        try:
            assert mine.hit("other", limit, 2)

            def before(report):
                theirs = _counters("sliding", name, ManualClock(path=clock_path), create=False)
                for _ in range(5):
                    assert theirs.hit("k", limit, 1)
                    report[PROGRESS] += 1
                ManualClock(path=clock_path).advance(3 if when == "same-window" else 11)
                return theirs

            with fp.strike(
                "sliding_hit", n, sig, before, lambda t: t.hit("k", limit, 1), lambda t: t.window("k")
            ) as s:  # fmt: skip
                assert s.report[PROGRESS] == 5
                previous, current, elapsed = fp.promptly(mine.window, "k")
                # what the returned hits weigh now (the one in flight: 0 or 1 more)
                truth = (0, 5) if when == "same-window" else (5, 0)
                floor = _weighted(*truth, elapsed)
                weighed = _weighted(previous, current, elapsed)
                assert weighed >= floor, f"returned hits lost: {previous, current} weighs {weighed} < {floor}"
                if s.completed:
                    assert (previous, current) == (truth[0], truth[1] + 1), "the hit completed: counted once"
                else:
                    assert weighed <= floor + 5 + 1, "more than the torn state can hold"
                seen[n] = (previous, current)
                # the next hits, here and from a survivor, never pass the limit by the true count
                got = fp.in_child(_counter_calls, "sliding", name, clock_path, 6, limit)
                got += [int(fp.promptly(mine.hit, "k", limit, 1)) for _ in range(6)]
                room = limit - floor - (1 if s.completed else 0)
                assert sum(got) <= room, f"{sum(got)} admitted after the strike, room for {room}"
                assert got == sorted(got, reverse=True), "admitted after a refusal at one time"
                if s.completed:
                    assert sum(got) == room, "a completed section leaves the exact room"
                other = (0, 2) if when == "same-window" else (2, 0)
                assert mine.window("other")[:2] == other, "another key moved"
            return s.fired
        finally:
            fp.drop(mine, name)

    fp.every_store(strike_at, "sliding_hit", at_least=(2 if when == "same-window" else 4))
