"""Forged live words (core/live.c): junk written into a limiter's header by whoever can write
the segment is a clear error at the next call, never a crash, a wild read or an over-admission;
a role whose limits never change in place (a token bucket's) never reads limits from them, and
a concurrency's are bounded by what its rows hold."""

from __future__ import annotations

import os
import struct

import pytest

import shmwin
from shmwin import Concurrency, Limiter, ManualClock, TokenBucket
from shmwin.backends.shm import format as words
from shmwin.backends.shm.segment import path_of


def _poke(name: str, offset: int, value: int) -> None:
    fd = os.open(path_of(name), os.O_RDWR)
    try:
        os.pwrite(fd, struct.pack("<q", value), offset)
    finally:
        os.close(fd)


def _table(gen: int) -> int:
    return words.LIVE_LIMITS_OFF + (gen & 1) * words.MAX_RINGS * words.WORD_BYTES


@pytest.mark.parametrize(
    ("gen", "limit", "error"),
    [
        (-5, 3, shmwin.CorruptSegmentError),  # a negative generation
        (1, -1, shmwin.CorruptSegmentError),  # a negative limit
        (1, 1 << 40, shmwin.CorruptSegmentError),  # past what a 4-byte count holds
    ],
)
def test_junk_live_words_are_a_clear_error(name, gen, limit, error):
    with Limiter(name, "5/minute", clock=ManualClock(10**12)) as lim:
        assert lim.hit("k")
        _poke(name, _table(gen), limit)
        _poke(name, words.LIVE_GEN_OFF, gen)
        with pytest.raises(error):
            lim.hit("k")
        lim.unlink()


def test_a_forged_generation_with_sound_limits_is_followed_strictly(name):
    """A writer of the segment can change its limits (as shmwin set does): never past them."""
    with Limiter(name, "5/minute", clock=ManualClock(10**12)) as lim:
        _poke(name, _table(7), 2)
        _poke(name, words.LIVE_GEN_OFF, 7)
        assert [lim.hit("k") for _ in range(4)] == [True, True, False, False]
        lim.unlink()


def test_a_forged_moved_bit_is_taken_over_as_a_dead_movers(name):
    clock = ManualClock(10**12)
    with Limiter(name, "5/minute", clock=clock, ready_timeout=0.2) as lim:
        assert lim.hit("k")
        _poke(name, words.LIVE_GEN_OFF, words.LIVE_MOVED)  # retired, and no mover holds it
        assert lim.hit("k")  # the next call takes the "move" over: a new segment, the hit carried
        with Limiter.attach(name, clock=clock) as again:
            assert again.stats("k").used == 2
        lim.unlink()


def test_another_role_never_reads_limits_from_live_words(name):
    """A token bucket's limits change only by a move (a new segment): forged live words there
    change nothing (a concurrency's did before format 11; its limit now changes in place)."""
    with TokenBucket(name, "2/minute", burst=2, clock=ManualClock(10**12)) as tb:
        _poke(name, _table(1), 1000)
        _poke(name, words.LIVE_GEN_OFF, 1)
        assert [tb.hit("k") for _ in range(3)] == [True, True, False]  # still 2
        tb.unlink()


@pytest.mark.parametrize("junk", [0, -1, words.MAX_CONCURRENCY + 1, 1 << 40])
def test_a_concurrency_follows_forged_live_words_only_within_its_bounds(name, junk):
    """A concurrency's limit is read from its live words: a sound one is followed (its rows
    hold an entry per process, so a limit of 1000 reads no entry past them); junk (outside
    1..MAX_CONCURRENCY) is a CorruptSegmentError at the next call, never an admission."""
    with Concurrency(name, limit=2, processes=4) as conc:
        _poke(name, _table(1), 1000)
        _poke(name, words.LIVE_GEN_OFF, 1)
        assert all(conc.acquire("k", timeout=0) for _ in range(5)) and conc.limit == 1000
        _poke(name, _table(2), junk)
        _poke(name, words.LIVE_GEN_OFF, 2)
        with pytest.raises(shmwin.CorruptSegmentError, match="junk live limit"):
            conc.acquire("k", timeout=0)
        _poke(name, _table(2), 5)  # the table sound again: nothing was taken meanwhile
        assert conc.held("k") == 5 and not conc.acquire("k", timeout=0)
        for _ in range(5):
            conc.release("k")
        conc.unlink()
