"""Fail points: clear and reset.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import KILL, LOCK_TIMEOUT, SIGNALS, T0

import shmwin
from shmwin import KeyTableFullError, ManualClock, Window

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_clear(make_name, tmp_path, kind, sig):
    """Limiter.clear / Window.clear struck at every store: all or nothing, and the key usable."""
    cleared: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"clear{n}"), tmp_path / f"clock{n}"
        t = fp.Keyed(kind, name, clock_path)
        try:
            assert t.write("k", 10) == 10
            assert t.write("other", 4) == 4
            with fp.strike(
                "clear", n, sig, lambda report: fp.Keyed(kind, name, clock_path),
                lambda mine: mine.clear("k"), lambda mine: mine.peek("k"),
            ) as s:  # fmt: skip
                left = fp.promptly(t.units, "k")
                assert left in (0, 10), f"a clear left {left} of 10 counts: torn"
                if s.completed:
                    assert left == 0
                cleared[n] = left == 0
                fp.assert_usable(t, "k", left)
                assert t.units("other") == 4, "another key moved"
                fp.assert_key_table_sound(t.w)
                # no insert here: see test_a_torn_clear_leaves_no_live_counts_in_a_reclaimable_entry
                fp.check_survivor_keyed(t, "k", insert=False)
            return s.fired
        finally:
            fp.drop(t, name)

    assert fp.every_store(strike_at) >= 2
    fp.assert_monotone(cleared, "the clear")


@pytest.mark.parametrize("kind", ["limiter", "window"])
def test_a_torn_clear_leaves_no_live_counts_in_a_reclaimable_entry(make_name, tmp_path, kind):
    """A clear killed at any store leaves its key cleared, or intact and its own: inserting
    other keys until the table is full must not change it."""
    broken: dict[int, str] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"tornclear{n}"), tmp_path / f"clock{n}"
        with fp.dropped(fp.Keyed(kind, name, clock_path, capacity=5, on_full="deny"), name) as t:  # 5 keys
            assert t.write("k", 10) == 10
            assert t.write("other", 4) == 4
            with fp.strike(
                "clear", n, KILL, lambda report: fp.Keyed(kind, name, clock_path, capacity=5, on_full="deny"),
                lambda mine: mine.clear("k"),
            ) as s:  # fmt: skip
                left = t.units("k")
                for i in range(4):  # 3 free entries: the 4th insert finds the table full
                    with suppress(KeyTableFullError):
                        t.write(f"x{i}")
                if t.units("k") != left or t.units("other") != 4:
                    broken[n] = f"'k' counted {left} after the kill, {t.units('k')} after other inserts"
        return s.fired

    fp.every_store_unbroken(strike_at, broken, "clear")


def _add_and_die(name: str, clock_path: Path, n: int) -> None:
    w = Window(name, span=60, buckets=60, stripes=3, clock=ManualClock(path=clock_path))
    w.add(n)  # in a stripe of its own, left with its data to a dead owner


@pytest.mark.parametrize("kind", ["limiter", "window", "striped"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_reset(make_name, tmp_path, kind, sig):
    """reset() struck after each row it empties (holding every lock): rows are emptied whole
    and in order, and every lock is taken again at once."""
    emptied: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reset{n}"), tmp_path / f"clock{n}"
        if kind == "striped":
            clock = ManualClock(T0, path=clock_path)
            w = Window(name, span=60, buckets=60, stripes=3, clock=clock, lock_timeout=LOCK_TIMEOUT)
            t = None
            w.add(5)
            fp.in_child(_add_and_die, name, clock_path, 7)
            # rows 1 (5) and 2 (7) hold counts; rows 0 and 3 are empty
        else:
            t = fp.Keyed(kind, name, clock_path, capacity=5)
            w = t.w
            keys = [f"k{i}" for i in range(4)]
            for i, key in enumerate(keys):
                assert t.write(key, i + 1) == i + 1
            slots = {key: w._backend._core.find(key)[0] for key in keys}

        def before(report):
            return Window.attach(name, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT)

        try:
            reset = lambda mine: mine.reset()  # noqa: E731 (the victim and the survivor alike)
            with fp.strike("reset", n, sig, before, reset, reset) as s:
                if t is None:
                    total = fp.promptly(w.total)
                    assert total in (12, 7, 0), f"a reset left {total}: a row emptied in part"
                    gone = (total <= 7, total == 0)
                    fp.promptly(w.reset)  # every lock the victim may have died holding
                    assert w.total() == 0
                    w.add(1)
                    fp.in_child(_add_and_die, name, clock_path, 2)
                    assert w.total() == 3
                else:
                    left = {key: fp.promptly(t.units, key) for key in keys}
                    assert all(left[key] in (0, i + 1) for i, key in enumerate(keys)), left
                    done = sorted(slots[key] for key in keys if left[key] == 0)
                    kept = sorted(slots[key] for key in keys if left[key])
                    assert not done or not kept or done[-1] < kept[0], "rows are emptied in order"
                    gone = tuple(int(left[key] == 0) for key in sorted(keys, key=slots.get))
                    for key in keys:
                        fp.assert_usable(t, key, left[key])
                    fp.promptly(w.reset)
                    assert all(t.units(key) == 0 for key in keys)
                    fp.assert_key_table_sound(w)
                    fp.check_survivor_keyed(t, "k0")
                if s.completed:
                    assert all(gone), "the reset completed: every row is empty"
                emptied[n] = tuple(int(x) for x in gone)
            return s.fired
        finally:
            if t is not None:
                t.close()
            else:
                w.close()
            shmwin.unlink(name)

    assert fp.every_store(strike_at) >= 4
    fp.assert_monotone(emptied, "the reset")
