"""Fail points: the counter cache (role "counter-cache", core/cache.c: Django's add, set, incr,
touch and delete of int counters), struck at every store of each section.

The harness and the rules it checks are in tests/support/failpoints.py. Here: every call that
returned is counted, the one in flight at most once; a torn add never makes an old, expired
value live again (its value is stored before its expiry); no lock hangs, and a survivor (a
fresh process) goes on at once with what the section left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS, T0, S

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm.roles.cache import CounterCacheEngine, geometry

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]

TTL = 10 * S


def _open(name: str, clock: ManualClock, create: bool = True) -> Any:
    w = (
        Window.open_geometry(name, geometry(60 * S, 16), clock=clock)
        if create
        else Window.attach(name, clock=clock)
    )
    return CounterCacheEngine(w)


def _survivor(name: str, clock_path: Path, op: str) -> Any:
    """A fresh process's call on "k", after the strike."""
    counters = _open(name, ManualClock(path=clock_path), create=False)
    try:
        return counters.add("k", 50, TTL) if op == "add" else counters.incr("k")
    finally:
        counters.window.close()


def _strike_all(make_name, tmp_path, sig, section: str, setup, op, check) -> None:
    """Strike ``section`` at each of its stores: the victim runs setup (3 incrs reported), then
    op; check(s, value now, survivor's call) holds what may be seen after."""
    seen: dict[int, Any] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"{section}{n}"), tmp_path / f"clock{n}"
        mine = _open(name, ManualClock(T0, path=clock_path))
        try:
            mine.set("other", 7, 60 * S)  # outlives every clock step here

            def before(report):
                theirs = _open(name, ManualClock(path=clock_path), create=False)
                theirs.clock_path = clock_path
                setup(theirs)
                for _ in range(3):
                    theirs.incr("k")
                    report[PROGRESS] += 1
                return theirs

            with fp.strike(section, n, sig, before, op, lambda t: t.get("k")) as s:
                assert s.report[PROGRESS] == 3
                value = fp.promptly(mine.get, "k")  # the row lock the victim may have died holding
                check(s, value, fp.in_child(_survivor, name, clock_path, "add"))
                assert fp.promptly(mine.get, "other") == 7, "another key moved"
                seen[n] = value
            return s.fired
        finally:
            mine.window.close()
            shmwin.unlink(name)

    stores = fp.every_store(strike_at)
    assert stores >= 2, f"section {section!r} made only {stores} stores"


@pytest.mark.parametrize("sig", SIGNALS)
def test_counter_write_by_an_add_over_an_expired_value(make_name, tmp_path, sig):
    """add over a value that expired: the key holds nothing live, or the new value whole; never
    the old value made live again."""

    def setup(t):
        assert t.add("k", 1, TTL)

    def add_after_expiry(t):
        ManualClock(path=t.clock_path).advance(10)  # the 4 it holds expired
        return t.add("k", 100, TTL)

    def check(s, value, survivor_added):
        assert value in (None, 100), f"a torn add left {value}"
        assert not s.completed or value == 100
        assert survivor_added is (value is None), "the survivor's add disagrees with what the key holds"

    _strike_all(make_name, tmp_path, sig, "counter_write", setup, add_after_expiry, check)


@pytest.mark.parametrize("sig", SIGNALS)
def test_counter_incr(make_name, tmp_path, sig):
    def setup(t):
        assert t.add("k", 1, TTL)

    def check(s, value, survivor_added):
        assert value in (4, 5), f"returned incrs lost, or the one in flight twice: {value}"
        assert not s.completed or value == 5
        assert survivor_added is False

    _strike_all(make_name, tmp_path, sig, "counter_incr", setup, lambda t: t.incr("k"), check)


@pytest.mark.parametrize("sig", SIGNALS)
def test_counter_touch_and_delete(make_name, tmp_path, sig):
    def setup(t):
        assert t.add("k", 1, TTL)

    def touched(s, value, survivor_added):
        assert value == 4 and survivor_added is False  # a touch moves the expiry only

    _strike_all(make_name, tmp_path, sig, "counter_touch", setup, lambda t: t.touch("k", 30 * S), touched)

    def deleted(s, value, survivor_added):
        assert value in (None, 4)
        assert not s.completed or value is None
        assert survivor_added is (value is None)

    _strike_all(make_name, tmp_path, sig, "counter_delete", setup, lambda t: t.delete("k"), deleted)
