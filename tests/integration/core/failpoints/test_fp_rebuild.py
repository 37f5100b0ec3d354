"""Fail points: the key table's rebuild.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import pytest
from support import failpoints as fp
from support.failpoints import SIGNALS

from shmwin.backends.shm import layout

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_rebuild(make_name, tmp_path, kind, sig):
    """A new key finds the table at its capacity with idle keys in it: the index is rebuilt
    without them (their rows freed), struck after each of its stores. Live keys keep every
    count, the new key is usable, the table is sound, and the next insert works at once."""

    def strike_at(n: int) -> bool:
        # The segment's hash key is random: "new" may probe onto an idle key's entry before an
        # empty one and take that row without a rebuild. Such a run tells nothing: another segment.
        for attempt in range(8):
            fired = strike_once(n, attempt)
            if fired is not None:
                return fired
        raise AssertionError("eight segments in a row placed the new key without a rebuild")

    def strike_once(n: int, attempt: int) -> bool | None:
        name, clock_path = make_name(f"rebuild{n}-{attempt}"), tmp_path / f"clock{n}-{attempt}"
        t = fp.Keyed(kind, name, clock_path, capacity=4, on_full="deny")
        try:
            for i in range(4):
                assert t.write(f"old{i}") == 1
            t.clock.advance(64)  # every key idle ...
            assert t.write("old2", 2) == 2 and t.write("old3", 3) == 3  # ... but two
            with fp.strike(
                "rebuild", n, sig,
                lambda report: fp.Keyed(kind, name, clock_path, capacity=4, on_full="deny"),
                lambda mine: mine.write("new"),
            ) as s:  # fmt: skip
                assert t.w._backend._keys is not None
                if not s.fired and t.w._backend._keys._q[layout.REBUILT_NS_OFF // layout.WORD_BYTES] == 0:
                    return None  # placed on an idle key's entry: no rebuild ran
                assert fp.promptly(t.units, "old2") == 2 and fp.promptly(t.units, "old3") == 3
                assert fp.promptly(t.write, "fresh") == 1  # an insert: repairs, rebuilds if it must
                fp.assert_key_table_sound(t.w)
                assert t.units("old2") == 2 and t.units("old3") == 3, "a live key lost counts"
                assert t.write("new") == 1 or s.completed
                keys = set(t.w.keys())
                assert {"old2", "old3", "fresh", "new"} <= keys and not keys & {"old0", "old1"}
            return s.fired
        finally:
            fp.drop(t, name)

    assert fp.every_store(strike_at) >= 5
