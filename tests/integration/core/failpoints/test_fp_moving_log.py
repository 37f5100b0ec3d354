"""Fail points: the moving window's hit times: the row, its chunks, the chunk heap (core/moving.c).

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import CTX, KILL, PROGRESS, RAISE, SIGNALS, T0, S
from support.moving import assert_no_chunk_leaked

import shmwin
from shmwin import ManualClock, _core

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


MOVING_P = 10 * S


def _moving(name: str, clock_path: Path, limit: int, times: int) -> Any:
    from shmwin.integrations.limits_moving import MovingLogs

    return MovingLogs.open(name, limit, MOVING_P, times, ManualClock(path=clock_path), 16, create=True)


def _moving_hits(name: str, clock_path: Path, key: str, count: int) -> tuple[int, int]:
    """A survivor: ``count`` hits of ``key``; (admitted, then counted)."""
    from shmwin.integrations.limits_moving import MovingLogs

    m = MovingLogs.open(name, 0, 0, 0, ManualClock(path=clock_path), None, create=False)
    try:
        admitted = sum(bool(fp.promptly(m.hit, key, 1)) for _ in range(count))
        return admitted, m.used_and_reset(key)[0]
    finally:
        m.close()


# section -> (limit, times, the victim's hits of "k" before the struck one (at T0 + i), free
# chunks made first (a key of 2 full chunks cleared), how far the clock moves before the strike)
MOVING_CASES = {
    # the 6th hit needs a second chunk (2 entries inline, 3 a chunk): the heap's next
    "chunk_alloc": (40, 1024, 5, 0, 0),
    "chunk_alloc_free": (40, 1024, 5, 2, 0),  # ... from the free list
    "chunk_free": (40, 1024, 8, 0, MOVING_P + 100),  # two full chunks whose hits all left (a 64 ns quantum)
    "moving_hit": (40, 5, 5, 0, 0),  # five entries counting, times=5: the two oldest merge
    # two entries whose hits left: one zeroed, one restamped
    "moving_hit_stale": (40, 1024, 2, 0, MOVING_P + 100),
    # eight entries whose hits left: kept as one dead entry, moved to the row's first, chunks back
    "moving_settle": (40, 1024, 8, 0, MOVING_P + 100),
    # a chunk of three entries whose hits left: the dead entry in its newest, the run starts there
    "moving_settle_chunk": (40, 1024, 3, 0, MOVING_P + 100),
}


SECTION_OF = {
    "chunk_alloc_free": "chunk_alloc",
    "moving_hit_stale": "moving_hit",
    "moving_settle_chunk": "moving_settle",
}


@pytest.mark.parametrize("case", list(MOVING_CASES))
@pytest.mark.parametrize("sig", SIGNALS)
def test_moving_hit(make_name, tmp_path, case, sig):
    """A moving log's hit struck at every store of its section (taking a chunk, giving chunks
    back, or writing the entry): afterwards, from this process and a fresh one, no lock hangs
    (a dead holder of the chunk lock has its free list rebuilt), no hit that returned is
    forgotten early, the limit is never passed, other keys are untouched, and no chunk leaked:
    once every hit has left, every chunk is on the free list, and the same load again takes
    no chunk past the heap's top."""
    limit, times, before_hits, free_made, advance = MOVING_CASES[case]
    section = SECTION_OF.get(case, case)

    def load(m: Any, clock: ManualClock, at: int) -> None:
        if free_made:
            for _ in range(2 + 2 * shmwin.backends.shm.format.CHUNK_ENTRIES):
                assert m.hit("f", 1)
            m.clear("f")
        for i in range(before_hits):
            clock.set(at + i)
            assert m.hit("k", 1)

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"mv{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        m = _moving(name, clock_path, limit, times)
        try:
            for _ in range(12):
                assert m.hit("other", 1)
            if free_made:  # the free chunks the victim's load takes from: a key's, cleared
                for _ in range(2 + 2 * shmwin.backends.shm.format.CHUNK_ENTRIES):
                    assert m.hit("f", 1)
                m.clear("f")

            def before(report):
                mine = _moving(name, clock_path, limit, times)
                mine_clock = ManualClock(path=clock_path)
                for i in range(before_hits):
                    mine_clock.set(T0 + i)
                    assert mine.hit("k", 1)
                    report[PROGRESS] += 1
                mine_clock.set(T0 + before_hits + advance)
                return mine

            with fp.strike(section, n, sig, before, lambda mine: mine.hit("k", 1),
                        lambda mine: mine.used_and_reset("k")) as s:  # fmt: skip
                assert s.report[PROGRESS] == before_hits
                now = clock()
                # the hits that returned, still counted
                held = sum(1 for i in range(before_hits) if now - MOVING_P <= T0 + i)
                used = fp.promptly(m.used_and_reset, "k")[0]
                assert used >= held + (1 if s.completed else 0), f"a counted hit was forgotten early: {used}"
                other = 12 if now - MOVING_P <= T0 else 0
                assert fp.promptly(m.used_and_reset, "other")[0] == other, "another key moved"
                assert m.hit("other", 1)
                admitted, counted = fp.in_child(_moving_hits, name, clock_path, "k", limit)
                more = sum(bool(fp.promptly(m.hit, "k", 1)) for _ in range(3))
                at_least = held + admitted + more + (1 if s.completed else 0)
                assert at_least <= limit, f"over the limit: {at_least} admitted in one period"
                if not s.fired or sig == RAISE:  # untorn: exact
                    assert at_least == limit and counted == limit
                # every hit leaves: every chunk is back once each key is emptied (the chunk
                # lock's repair rebuilt the free list if its holder died)
                clock.advance(ns=3 * MOVING_P)
                top = assert_no_chunk_leaked(m)
                load(m, clock, clock())
                assert m.hit("k", 1)
                assert m.chunks()[0] == top, "the same load took chunks past the heap's top"
            return s.fired
        finally:
            fp.drop(m, name)

    assert fp.every_store(strike_at) >= (3 if section.startswith("moving") else 5)


@pytest.mark.parametrize("sig", SIGNALS)
def test_chunk_repair(make_name, tmp_path, sig):
    """The chunk lock's repair, itself struck at every store (its holder died in chunk_alloc
    first): the next taker repairs again; no chunk is lost or in two places."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"cr{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        m = _moving(name, clock_path, 40, 1024)
        try:
            for key in ("a", "b"):
                for _ in range(20):
                    assert m.hit(key, 1)
            m.clear("a")

            def first_death(report):
                mine = _moving(name, clock_path, 40, 1024)
                _core.failpoint("chunk_alloc", 3, KILL)
                for _ in range(20):
                    mine.hit("k", 1)

            p = CTX.Process(target=first_death, args=(None,), daemon=True)
            p.start()
            p.join(60)
            assert p.exitcode == -KILL
            with fp.strike("chunk_repair", n, sig, lambda report: _moving(name, clock_path, 40, 1024),
                        lambda mine: mine.chunks()) as s:  # fmt: skip
                assert fp.promptly(m.used_and_reset, "b")[0] == 20
                used = m.used_and_reset("k")[0]
                assert used <= 40 and sum(bool(m.hit("k", 1)) for _ in range(40)) == 40 - used
                clock.advance(ns=3 * MOVING_P)
                assert_no_chunk_leaked(m)
            return s.fired
        finally:
            fp.drop(m, name)

    assert fp.every_store(strike_at) >= 2
