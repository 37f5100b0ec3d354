"""Fail points: reclaim: a full /dev/shm gives idle keys' rows to new ones.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import SIGNALS

from shmwin import _core

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _no_space_keyed(kind: str, name: str, clock_path: Path) -> fp.Keyed:
    """The victim's table, in a process whose every reservation fails as on a full /dev/shm."""
    _core.nospace(True)
    return fp.Keyed(kind, name, clock_path)


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_reclaim(make_name, tmp_path, kind, sig):
    """A new key needs a row and /dev/shm has no room for one (the test build's nospace): the
    idle keys are dropped in place and their rows taken, struck after each store of a drop.
    Live keys keep every count, the new key is usable at once (from a process with room, and
    from the victim's), the table is sound, and no idle key survives a completed reclaim."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reclaim{n}"), tmp_path / f"clock{n}"
        t = fp.Keyed(kind, name, clock_path)
        try:
            for i in range(8):  # the 8 rows the table reserves first: the next key needs more
                assert t.write(f"old{i}") == 1
            t.clock.advance(64)  # every key idle ...
            assert t.write("old6", 2) == 2 and t.write("old7", 3) == 3  # ... but two
            with fp.strike(
                "reclaim", n, sig, lambda report: _no_space_keyed(kind, name, clock_path),
                lambda mine: mine.write("new"),
                lambda mine: mine.write("new"),  # the victim, alive: its next insert still has no room
            ) as s:  # fmt: skip
                assert fp.promptly(t.units, "old6") == 2 and fp.promptly(t.units, "old7") == 3
                assert fp.promptly(t.write, "fresh") == 1  # an insert: repairs, rebuilds if it must
                fp.assert_key_table_sound(t.w)
                assert t.units("old6") == 2 and t.units("old7") == 3, "a live key lost counts"
                if s.completed:
                    assert t.units("new") in (1, 2), "the victim's new key was lost"
                    assert not set(t.w.keys()) & {f"old{i}" for i in range(6)}
                assert t.write("new") == 1 or (t.lim is not None and t.units("new") == 10)
                fp.check_survivor_keyed(t, "old7")
            return s.fired
        finally:
            fp.drop(t, name)

    assert fp.every_store(strike_at) >= 8
