"""Fail points: adds: keyed, locked, striped.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0

from shmwin import ManualClock, Window

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


ADD_WINDOW: dict[str, Any] = {"resolutions": ("1m/1s", "1h/1m"), "fields": ("count", "bytes")}
ADD_MODES: dict[str, dict[str, Any]] = {
    "add_keyed": {"capacity": 16}, "add_locked": {"mode": "locked"}, "add_striped": {"stripes": 3},
}  # fmt: skip


def _add(name: str, section: str, clock_path: Path, n: int, key: str | None) -> tuple[int, list[int]]:
    """A survivor's add: (its pid, the pids owning stripes just after it)."""
    w = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=ManualClock(path=clock_path), lock_timeout=5)
    fp.promptly(w.add, n, key=key)
    owners = [pid for _, pid, alive in w.stripe_owners() if alive]
    w.close()  # hands its stripe back
    return os.getpid(), owners


@pytest.mark.parametrize(
    ("section", "call"),
    [("add_keyed", "add"), ("add_keyed", "add_and_total"), ("add_locked", "add"), ("add_striped", "add")],
)
@pytest.mark.parametrize("sig", SIGNALS)
def test_add(make_name, tmp_path, sig, section, call):
    """Window.add (two resolutions, two fields) struck at every store: every add that returned
    is counted, the one in flight at most once per resolution, and the next writer is not held up."""
    key = "k" if section == "add_keyed" else None
    inflights: dict[int, tuple[int, int]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"{section}{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        w = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            if key:
                w.add(7, key="other")

            def before(report):
                mine = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=ManualClock(path=clock_path))
                for _ in range(3):
                    mine.add(1, key=key)
                    report[PROGRESS] += 1
                mine.add(100, "bytes", key=key)
                # a new bucket in both rings; in the finer one, the slot of the adds above
                ManualClock(path=clock_path).advance(60)
                return mine

            with fp.strike(
                section, n, sig, before, lambda mine: getattr(mine, call)(1, key=key),
                lambda mine: mine.add(0, key=key),
            ) as s:  # fmt: skip
                assert s.report[PROGRESS] == 3
                fine = fp.promptly(w.totals, key=key, resolution=0)  # the last minute: the add in flight
                coarse = fp.promptly(w.totals, key=key, resolution=1)  # the last hour: everything
                inflight = (fine["count"], coarse["count"] - 3)
                assert set(inflight) <= {0, 1}, f"returned adds lost, or the one in flight twice: {inflight}"
                assert inflight[0] >= inflight[1], "rings are written in order"
                assert (fine["bytes"], coarse["bytes"]) == (0, 100), "another field moved"
                if s.completed:
                    assert inflight == (1, 1)
                inflights[n] = inflight
                fp.promptly(w.add, 2, key=key)  # the lock the victim may have died holding
                child, owners = fp.in_child(_add, name, section, clock_path, 5, key)
                assert w.total(key=key, resolution=0) == inflight[0] + 7
                assert w.total(key=key, resolution=1) == 3 + inflight[1] + 7
                assert w.total("bytes", key=key, resolution=1) == 100
                if key:
                    assert w.total(key="other", resolution=1) == 7, "another key moved"
                if section == "add_striped":  # a dead victim's stripe is free again, its counts kept
                    assert child in owners, "a survivor found no stripe"
                    assert os.getpid() in [pid for _, pid, _ in w.stripe_owners()]
            return s.fired
        finally:
            fp.drop(w, name)

    fp.every_store(strike_at, section, at_least=2 * 2)
    fp.assert_monotone(inflights, "the add in flight")
