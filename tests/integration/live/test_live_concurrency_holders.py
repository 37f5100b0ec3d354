"""A Concurrency's limit changed live, holders in forked, spawned and ``python -c`` processes
that opened it with the old limit and never open it again: for each on_change rule, never more
than the limit held at once across the change, a holder that entered before it releases
cleanly after it, every stale process meets the new limit at its next call, and a SIGKILLed
holder's slot is still reclaimed after the change."""

from __future__ import annotations

import pytest
from support.conc_live import KEY, KINDS, holders

import shmwin
from shmwin import Concurrency
from shmwin.geometry import MAX_CONCURRENCY

pytestmark = pytest.mark.integration


def test_carry_lowered_keeps_the_slots_held_and_admits_none_until_under_it(name):
    with Concurrency(name, 4) as mine, holders(name, 4) as hs:
        assert all(h.acquire() for h in hs) and mine.acquire(KEY, 0)  # 4 of 4, one per process
        mine.set_limit(2)  # carry: in place
        assert [h.limit() for h in hs] == [2, 2, 2], "a stale process did not converge"
        assert mine.count(KEY) == 4, "a slot held before the change was dropped"
        assert not any(h.acquire() for h in hs) and not mine.acquire(KEY, 0)
        assert hs[0].release() == "ok" and hs[1].release() == "ok"  # 2 held: still no room
        assert not hs[0].acquire() and not mine.acquire(KEY, 0)
        assert hs[2].release() == "ok"  # 1 held: one comes in, no more
        assert hs[1].acquire() and not hs[0].acquire() and not hs[2].acquire()
        assert mine.count(KEY) == 2
        assert hs[1].release() == "ok"
        mine.release(KEY)
        assert mine.count(KEY) == 0
        mine.unlink()


def test_carry_raised_past_the_first_limit_lets_other_processes_in_at_once(name):
    """The rows hold an entry per process: a limit raised past the one the segment was made
    with admits other processes at once, holding alongside those that entered before."""
    with Concurrency(name, 1) as mine, holders(name, 1) as hs:
        assert hs[0].acquire() and not hs[1].acquire()
        Concurrency(name, 4).close()  # a deploy with a higher limit: opening carries it
        assert [h.limit() for h in hs] == [4, 4, 4] and mine.limit == 4
        assert hs[1].acquire() and hs[2].acquire() and mine.acquire(KEY, 0)  # 4 processes
        assert not hs[1].acquire() and not mine.acquire(KEY, 0)  # 4 of 4
        assert hs[0].release() == "ok"  # the one from before the change
        assert mine.acquire(KEY, 0) and mine.count(KEY) == 4 and mine.held(KEY) == 2
        assert hs[1].release() == "ok" and hs[2].release() == "ok"
        mine.release(KEY)
        mine.release(KEY)
        mine.unlink()


def test_reset_forgets_the_slots_held_and_their_releases_are_no_ops(name):
    """on_change="reset": a new, empty segment under the name; the holders from before are
    forgotten (their slots count nowhere) and their releases are plain, not errors; every
    stale process takes its next slot in the new segment."""
    with Concurrency(name, 2) as mine, holders(name, 2) as hs:
        assert hs[0].acquire() and hs[1].acquire() and not hs[2].acquire()
        Concurrency(name, 3, on_change="reset").close()
        assert mine.count(KEY) == 0 and [h.limit() for h in hs] == [3, 3, 3]
        assert hs[2].acquire() and mine.acquire(KEY, 0) and hs[0].acquire()  # 3 new holders
        assert not hs[1].acquire() and not mine.acquire(KEY, 0)
        assert hs[1].release() == "ok"  # its slot from before: forgotten, released cleanly
        assert mine.count(KEY) == 3 and not mine.acquire(KEY, 0)
        assert hs[0].release() == "ok" and hs[0].release() == "ok"  # its new slot, then its old one
        assert hs[0].release() == "NotHeldError"  # none left
        assert mine.count(KEY) == 2 and hs[1].acquire()
        for h in (hs[1], hs[2]):
            assert h.release() == "ok"
        mine.release(KEY)
        assert mine.count(KEY) == 0
        mine.unlink()


def test_raise_keeps_the_limit_and_the_holders(name):
    with Concurrency(name, 2) as mine, holders(name, 2) as hs:
        assert hs[0].acquire() and hs[1].acquire()
        with pytest.raises(shmwin.GeometryMismatchError, match="limit 2, not 3"):
            Concurrency(name, 3, on_change="raise")
        assert [h.limit() for h in hs] == [2, 2, 2] and not hs[2].acquire()
        assert hs[0].release() == "ok" and hs[2].acquire() and hs[1].release() == "ok"
        assert hs[2].release() == "ok" and mine.count(KEY) == 0
        mine.unlink()


@pytest.mark.parametrize("rule", ["carry", "reset"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_sigkilled_holders_slot_is_reclaimed_after_a_change(name, rule, kind):
    """A holder that entered after the change (and, with carry, one from before it) is
    SIGKILLed: its slot comes back at once, under the new limit."""
    with Concurrency(name, 3) as mine, holders(name, 3, (kind, kind)) as (before, after):
        assert before.acquire()
        mine.set_limit(2, on_change=rule)
        assert after.acquire()
        assert mine.count(KEY) == (2 if rule == "carry" else 1)
        after.kill()
        assert mine.count(KEY) == (1 if rule == "carry" else 0)
        if rule == "carry":
            before.kill()
            assert mine.count(KEY) == 0
        assert mine.acquire(KEY, 0) and mine.acquire(KEY, 0) and not mine.acquire(KEY, 0)
        mine.release(KEY)
        mine.release(KEY)
        mine.unlink()


def test_set_limit_checks_its_arguments(name):
    with Concurrency(name, 2) as mine:
        for bad in (0, -1, MAX_CONCURRENCY + 1, 1.5, True):
            with pytest.raises(ValueError, match="limit must be an int"):
                mine.set_limit(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="on_change must be 'carry' or 'reset'"):
            mine.set_limit(3, on_change="raise")
        assert mine.limit == 2
        mine.unlink()


def test_the_newest_open_wins_and_the_same_limit_changes_nothing(name):
    """Another process opening with the old limit sets it back (as a limiter's rates): the
    last change wins; opening with the limit in force writes nothing."""
    with Concurrency(name, 2) as mine:
        mine.set_limit(5)
        with Concurrency(name, 5):
            pass
        gen = mine.window._backend._core.live()[0]  # type: ignore[attr-defined]
        assert mine.limit == 5 and gen == 1, "opening with the limit in force changed it again"
        with Concurrency(name, 2):
            pass
        assert mine.limit == 2
        mine.unlink()


def test_a_stale_handle_reads_the_names_segment_after_a_reset(name):
    """A handle that only reads (limit, keys, holders) after a reset follows it too, and a
    later change made in the new segment is the one it reads."""
    with Concurrency(name, 2) as stale, Concurrency.attach(name) as other:
        assert stale.acquire("old", 0)
        other.set_limit(3, on_change="reset")
        assert other.acquire("new", 0)
        other.set_limit(4)
        assert stale.limit == 4 and stale.holders() == {"new": 1} and "old" not in stale.keys()
        stale.release("old")  # forgotten, released cleanly
        other.release("new")
        stale.unlink()


def test_after_a_reset_a_forgotten_slot_is_given_back_before_a_counted_one(name):
    """A handle holding a slot from before a reset (forgotten) and one from after (counted):
    which of its threads releases first is not known, so the forgotten slot goes first and the
    counted one stays held until the last release (never a holder inside uncounted)."""
    with Concurrency(name, 2) as mine, Concurrency.attach(name) as other:
        assert mine.acquire(KEY, 0)  # thread A, before
        other.set_limit(1, on_change="reset")
        assert mine.acquire(KEY, 0)  # thread B, after: counted
        mine.release(KEY)  # whichever finished first
        assert other.count(KEY) == 1 and not other.acquire(KEY, 0), "a holder inside went uncounted"
        mine.release(KEY)
        assert other.count(KEY) == 0 and other.acquire(KEY, 0)
        with pytest.raises(shmwin.NotHeldError):
            mine.release(KEY)
        other.release(KEY)
        mine.unlink()
