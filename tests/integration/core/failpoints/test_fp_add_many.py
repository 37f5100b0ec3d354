"""Fail points: add_many.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0, S

from shmwin import ManualClock, Window

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


BATCH_MODES: dict[str, dict[str, Any]] = {"keyed": {"capacity": 16}, "locked": {"mode": "locked"},
                                           "striped": {"stripes": 2}}  # fmt: skip


def _batch(name: str, mode: str, clock_path: Path, value: int, at: int, key: str | None) -> None:
    w = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=ManualClock(path=clock_path))
    fp.promptly(w.add_many, [value], at=[at], key=key)
    w.close()


T1 = T0 + 60 * S  # add_many's struck batch: its buckets' slots last held T0's (now gone)


@pytest.mark.parametrize("mode", ["keyed", "locked", "striped"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_add_batch(make_name, tmp_path, sig, mode):
    """Window.add_many(at=...) struck at every store: earlier batches whole, the batch in flight
    item by item (never a torn bucket), later writers not held up."""
    key = "k" if mode == "keyed" else None
    applied: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"batch{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0 + 30 * S, path=clock_path)
        w = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            if key:
                w.add(9, key="other")

            def before(report):
                clock = ManualClock(path=clock_path)
                mine = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=clock)
                mine.add_many([5, 5, 5, 5], at=[T0 - 3 * S, T0 - 2 * S, T0 - S, T0], key=key)
                clock.set(T1)  # those four are out of the window now, still in their slots
                mine.add_many([1, 1], at=[T1 - 10 * S, T1 - 9 * S], key=key)
                report[PROGRESS] = 2
                return mine

            with fp.strike(
                "add_batch", n, sig, before,
                lambda mine: mine.add_many([1, 2, 4, 8], at=[T1 - 3 * S, T1 - 2 * S, T1 - S, T1], key=key),
                lambda mine: mine.add_many([0], at=[T1], key=key),
            ) as s:  # fmt: skip
                series = [int(x) for x in fp.promptly(w.series, key=key)]  # one bucket a second, now last
                assert series[-11:-9] == [1, 1], "a batch that returned is not whole"
                tail = series[-4:]
                torn = [got for got, want in zip(tail, [1, 2, 4, 8], strict=True) if got not in (0, want)]
                assert not torn, f"buckets torn: {tail}"
                assert sum(series) == 2 + sum(tail), f"counts in buckets never written: {series}"
                if s.completed:
                    assert tail == [1, 2, 4, 8]
                applied[n] = tuple(int(x > 0) for x in tail)
                fp.promptly(w.add_many, [16], at=[T1 - 5 * S], key=key)
                fp.in_child(_batch, name, mode, clock_path, 32, T1 - 6 * S, key)
                series = [int(x) for x in w.series(key=key)]
                assert series[-7:-5] == [32, 16] and sum(series) == 2 + sum(tail) + 48
                if key:
                    assert w.total(key="other") == 9, "another key moved"
            return s.fired
        finally:
            fp.drop(w, name)

    assert fp.every_store(strike_at) >= 4 * 2
    fp.assert_monotone(applied, "the batch in flight")
