"""Fail points: keys: insert and rollback.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import KILL, SIGNALS

from shmwin import KeyTableFullError

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_insert(make_name, tmp_path, kind, sig):
    """The first hit (limiter) or add (keyed window) of a new key, struck while inserting it."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"insert{n}"), tmp_path / f"clock{n}"
        t = fp.Keyed(kind, name, clock_path)
        try:
            for i in range(4):
                assert t.write(f"old{i}", i + 1) == i + 1
            with fp.strike(
                "insert", n, sig, lambda report: fp.Keyed(kind, name, clock_path),
                lambda mine: mine.write("new"), lambda mine: mine.peek("new"),
            ) as s:  # fmt: skip
                found = fp.promptly(t.w._backend._core.find, "new")  # lock-free: never spins on a torn entry
                assert found is not None or s.died, "the insert completed but the key is not found"
                assert fp.promptly(t.w._backend._core.find, "absent") is None
                assert fp.promptly(t.w.total, key="new") == int(s.completed) or t.lim is not None
                # the victim's own hit/add came after its insert: counted iff the insert completed
                fp.assert_usable(t, "new", int(s.completed))
                assert fp.promptly(t.write, "fresh") == 1  # an insert: takes the key-table lock
                fp.assert_key_table_sound(t.w)
                for i in range(4):
                    assert t.units(f"old{i}") == i + 1, "another key was changed"
                assert "new" in t.w.keys()
                fp.check_survivor_keyed(t, "new")
                if t.lim is not None:  # and the limit comes round again
                    t.clock.advance(64)
                    assert t.write("new", 12) == 10
            return s.fired
        finally:
            fp.drop(t, name)

    assert fp.every_store(strike_at) >= 5


def _die_inserting(kind: str, name: str, clock_path: Path, tear: int, key: str) -> bool:
    """Kill an inserter of ``key`` after store ``tear``; False if the insert had fewer stores."""
    with fp.strike(
        "insert", tear, KILL, lambda report: fp.Keyed(kind, name, clock_path), lambda mine: mine.write(key)
    ) as s:
        return s.died


_TEARS: dict[str, list[int]] = {}


def half_published_tears(kind: str, make_name: Callable[[str], str], tmp_path: Path) -> list[int]:
    """Every insert store after which a killed inserter leaves its entry half-published (the
    entry's generation or its row's copy negative): what a rollback has to undo."""
    if kind not in _TEARS:
        tears, tear = [], 0
        while True:
            tear += 1
            name, clock_path = make_name(f"tears{tear}"), tmp_path / f"tears{tear}"
            t = fp.Keyed(kind, name, clock_path)
            try:
                if not _die_inserting(kind, name, clock_path, tear, "first"):
                    break
                if min(fp.generations(t.w)) < 0:
                    tears.append(tear)
            finally:
                fp.drop(t, name)
        assert tears, "no insert store leaves a half-published entry"
        _TEARS[kind] = tears
    return _TEARS[kind]


@pytest.mark.parametrize("tear", ["first", "last"])
@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_rollback(make_name, tmp_path, kind, sig, tear):
    """An inserter dies after the first (or the last) of its stores that leave the entry half
    published; the process rolling it back (the next key-table locker) is then struck at every
    store of the rollback."""
    tears = half_published_tears(kind, make_name, tmp_path)
    at = tears[0] if tear == "first" else tears[-1]

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"rollback{n}"), tmp_path / f"clock{n}"
        t = fp.Keyed(kind, name, clock_path)
        try:
            assert t.write("old", 3) == 3
            assert _die_inserting(kind, name, clock_path, at, "first")
            assert min(fp.generations(t.w)) < 0, f"insert store {at} no longer leaves a half-published entry"
            with fp.strike(
                "rollback", n, sig, lambda report: fp.Keyed(kind, name, clock_path),
                lambda mine: mine.write("second"), lambda mine: mine.peek("second"),
            ) as s:  # fmt: skip
                assert fp.promptly(t.w._backend._core.find, "first") is None, "a half-written key was found"
                fp.assert_usable(t, "first", 0)  # rolls back again if the rollback died
                fp.assert_key_table_sound(t.w)
                fp.assert_usable(t, "second", int(s.completed))
                fp.assert_key_table_sound(t.w)
                assert t.units("old") == 3, "another key was changed"
                fp.check_survivor_keyed(t, "first")
            return s.fired
        finally:
            fp.drop(t, name)

    assert fp.every_store(strike_at) >= 5


def _writes_counted(kind: str, name: str, clock_path: Path, key: str) -> int:
    t = fp.Keyed(kind, name, clock_path, capacity=2, on_full="deny")
    try:
        return fp.promptly(t.write, key, 5 if t.lim is None else 10)
    except KeyTableFullError:
        return 0
    finally:
        t.close()


@pytest.mark.parametrize("kind", ["limiter", "window"])
def test_insert_over_a_reused_entry_keeps_what_cached_writers_counted(make_name, tmp_path, kind):
    """An idle key's entry is reused for a new key, and the inserter dies at each store: what a
    process that had the old key cached writes meanwhile must not be lost by the rollback.
    (Before 0e670d2 the row's copy of the generation stayed the old key's until the insert's
    8th store: 'A' got 10 + 10 hits in a minute, and returned adds were lost.)"""
    broken: dict[int, str] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reuse{n}"), tmp_path / f"clock{n}"
        with fp.dropped(fp.Keyed(kind, name, clock_path, capacity=2, on_full="deny"), name) as t:  # 2 keys
            t.write("A")  # cached by this process
            t.write("F")
            t.clock.advance(120)  # both idle
            t.write("F")  # F live again: the victim's new key can only take A's entry
            with fp.strike(
                "insert", n, KILL,
                lambda report: fp.Keyed(kind, name, clock_path, capacity=2, on_full="deny"),
                lambda mine: mine.write("B"),
            ) as s:  # fmt: skip
                try:
                    here = fp.promptly(t.write, "A", 5 if t.lim is None else 10)  # through the cache
                except KeyTableFullError:
                    here = 0
                there = fp.in_child(_writes_counted, kind, name, clock_path, "A")  # rolls the entry back
                if t.lim is not None:
                    if here + there > 10:
                        broken[n] = f"{here} + {there} hits admitted for 'A' within one minute"
                elif t.units("A") < here + there:
                    broken[n] = f"{here} + {there} adds to 'A' returned, {t.units('A')} counted"
        return s.fired

    fp.every_store_unbroken(strike_at, broken, "inserter")
