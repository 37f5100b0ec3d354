"""A concurrency key's row holds ``holders=`` holder entries, not one per process stripe: the
most processes holding a key at once (default: twice the limit, at least 8, at most one per
process). Its memory per key stays near a limiter's (a row of 192 bytes at limit 4, against
2112 with one entry for each of 128 processes); a limit raised in place past the entries stays
strict: a process that finds no entry is refused, never counted without one."""

from __future__ import annotations

import pytest
from support.conc_live import KEY, holders

import shmwin
from shmwin import Concurrency
from shmwin.backends.shm.roles.concurrency import holders_of

pytestmark = pytest.mark.integration


ROWS = [(4, 128, 8, 192), (4, 1024, 8, 192), (100, 128, 128, 2112), (1, 4, 4, 128)]


@pytest.mark.parametrize(("limit", "processes", "entries", "row_bytes"), ROWS)
def test_a_keys_row_holds_its_holder_entries_not_one_per_process(name, limit, processes, entries, row_bytes):
    with Concurrency(name, limit, processes=processes) as conc:
        g = conc.window.geometry
        assert holders_of(g) == entries
        assert conc.window._backend._lay.row_bytes == row_bytes  # type: ignore[attr-defined]
        with Concurrency(name, limit, processes=processes) as again:  # its geometry reads back alike
            assert again.window.geometry == g
        conc.unlink()


def test_a_new_limit_keeps_the_segments_holder_entries(name):
    with Concurrency(name, 2) as conc, Concurrency(name, 50) as raised:
        assert holders_of(raised.window.geometry) == holders_of(conc.window.geometry) == 8
        assert conc.limit == 50
        with pytest.raises(shmwin.GeometryMismatchError, match=r"holders=8, not .*holders=16"):
            Concurrency(name, 50, holders=16)  # chosen, and other: a new shape (shmwin rm)
        conc.unlink()


def test_a_limit_raised_past_the_holder_entries_stays_strict(name):
    """2 entries, limit 2 raised live to 10: two processes hold the key (any number of slots
    each); a third is refused until an entry frees -- a release of all its slots, or a death."""
    with Concurrency(name, 2, holders=2) as mine, holders(name, 2) as (forked, spawned, unrelated):
        assert forked.acquire() and spawned.acquire()
        mine.set_limit(10)
        assert [h.limit() for h in (forked, spawned, unrelated)] == [10, 10, 10]
        assert not unrelated.acquire() and not mine.acquire(KEY, 0)  # no entry: refused, under the limit
        assert forked.acquire() and forked.acquire() and mine.count(KEY) == 4  # its own entry: more slots
        assert [forked.release() for _ in range(3)] == ["ok"] * 3  # its entry free again
        assert unrelated.acquire() and not mine.acquire(KEY, 0)
        spawned.kill()  # SIGKILL: its entry is dead, the next acquire clears it
        assert mine.acquire(KEY, 0) and mine.count(KEY) == 2
        mine.release(KEY)
        mine.unlink()


def test_holders_is_checked(name):
    for bad in (0, 1025, True, 2.0):
        with pytest.raises(ValueError, match=r"holders must be an int in 1\.\.1024"):
            Concurrency(name, 2, holders=bad)
