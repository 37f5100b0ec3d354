"""limits' fixed window and sliding window counter as per-key state (core/counters.c).

Each format is a keyed window with a role ("fixed-window", "sliding-counter") whose rows hold
a few words of state after the key header. Here: the rules with time driven by hand, junk in
the state words (an error, never a crash), processes racing on one key (fork and spawn: the
total is exact, never one admitted too many), and what a key costs in /dev/shm.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import struct

import pytest
from support.helpers import open_core_as
from support.workers import counter_hits

import shmwin
from shmwin import ManualClock, Window, _core
from shmwin.backends.shm import format as layout
from shmwin.backends.shm.segment import path_of
from shmwin.errors import CorruptSegmentError, ShmwinError
from shmwin.integrations import limits_fixed, limits_sliding
from shmwin.integrations.limits_counters import UNIT
from shmwin.integrations.limits_fixed import FixedWindows
from shmwin.integrations.limits_sliding import SlidingCounters

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000 * S
P = 10 * S


def fixed(name: str, clock: ManualClock, capacity: int | None = 64) -> FixedWindows:
    found = FixedWindows.open(name, P, clock, capacity, create=True)
    assert found is not None
    return found


def sliding(name: str, clock: ManualClock, capacity: int | None = 64) -> SlidingCounters:
    found = SlidingCounters.open(name, P, clock, capacity, create=True)
    assert found is not None
    return found


def state_at(w: Window, key: str) -> int:
    """The word index (in the mapping, as int64 words) of ``key``'s state."""
    b = w._backend
    row, _ = b._core.find(key)
    return (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0]


# -- the rules --------------------------------------------------------------------------------


def test_a_fixed_window_starts_at_the_first_incr_and_ends_one_period_later(name):
    clock = ManualClock(T0 + 3 * S)
    f = fixed(name, clock)
    try:
        assert f.get("k") == 0 and f.end_ns("k") is None
        assert [f.incr("k", 1) for _ in range(3)] == [1, 2, 3]
        assert f.incr("k", 5) == 8 and f.get("k") == 8 and f.end_ns("k") == T0 + 3 * S + P
        clock.set(T0 + 3 * S + P - 1)
        assert f.get("k") == 8  # live until start + P, exactly
        clock.advance(ns=1)
        assert f.get("k") == 0 and f.end_ns("k") is None
        assert f.incr("k", 2) == 2 and f.end_ns("k") == T0 + 3 * S + P + P  # a new window, now
        assert f.incr("other", 0) == 0 and f.incr("other", 1) == 1  # a count of 0 restarts, as memory://
        assert f.end_ns("other") == clock() + P
        f.clear("k")
        assert f.get("k") == 0
        assert f.reset() == 1 and f.get("other") == 0
    finally:
        f.close()
        shmwin.unlink(name)


def test_a_clock_behind_the_window_start_counts_in_it(name):
    clock = ManualClock(T0)
    f = fixed(name, clock)
    lagging = FixedWindows.open(name, P, ManualClock(T0 - 3 * S), None, create=False)  # an earlier reading
    assert lagging is not None
    try:
        f.incr("k", 1)
        assert lagging.incr("k", 1) == 2 and lagging.end_ns("k") == T0 + P
        key_row = f.counts._backend._keys
        assert max(last for _, _, last in key_row.entries()) == T0  # the key's last write never goes back
    finally:
        lagging.close()
        f.close()
        shmwin.unlink(name)


def test_the_sliding_counter_weighs_the_previous_window(name):
    clock = ManualClock(T0)  # T0 is a multiple of P: window 100 starts
    s = sliding(name, clock)
    try:
        assert [s.hit("k", 5, 1) for _ in range(6)] == [True] * 5 + [False]
        assert s.window("k") == (0, 5, 0)
        clock.advance(12)  # window 101, 2 s in: 5 x 8/10 = 4 still weigh
        assert s.window("k") == (5, 0, 2 * S)
        assert s.hit("k", 5, 1) and not s.hit("k", 5, 1)
        clock.advance(2)  # 5 x 6/10 = 3, + 1
        assert s.hit("k", 5, 1) and not s.hit("k", 5, 1)
        assert not s.hit("k", 5, 6) and s.window("k") == (5, 2, 4 * S)  # a cost over the limit: never
        clock.advance(10)  # window 102: the 2 weigh, the 5 are gone
        assert s.window("k") == (2, 0, 4 * S)
        clock.advance(20)
        assert s.window("k") == (0, 0, 4 * S)
        assert s.hit("k", 5, 0) and s.window("k") == (0, 0, 4 * S)  # a cost of 0 counts nothing
        s.hit("k", 5, 2)
        assert s.reset() == 1 and s.window("k") == (0, 0, 4 * S)
    finally:
        s.close()
        shmwin.unlink(name)


def test_a_sliding_state_one_window_ahead_counts_at_its_start(name):
    """A clock that lags the writer's by a window boundary counts in the newer window, with
    the previous one weighing fully (refuse early, never admit late)."""
    clock = ManualClock(T0 + 10 * S)  # window 101
    s = sliding(name, clock)
    lagging = SlidingCounters.open(name, P, ManualClock(T0 + 9 * S), None, create=False)  # window 100
    assert lagging is not None
    try:
        for _ in range(3):
            s.hit("k", 10, 1)
        assert lagging.window("k") == (0, 3, 0)
        assert lagging.hit("k", 10, 1) and lagging.window("k") == (0, 4, 0) and s.window("k") == (0, 4, 0)
    finally:
        lagging.close()
        s.close()
        shmwin.unlink(name)


@pytest.mark.parametrize("make", [limits_fixed, limits_sliding])
def test_the_tools_read_each_keys_value_lock_free(name, make):
    clock = ManualClock(T0)
    c = fixed(name, clock) if make is limits_fixed else sliding(name, clock)
    try:
        for key, n in (("a", 3), ("b", 1)):
            for _ in range(n):
                c.incr(key, 1) if isinstance(c, FixedWindows) else c.hit(key, 10, 1)
        assert sorted(make.values(c.counts, clock())) == [("a", 3), ("b", 1)]
        clock.advance(15)  # the fixed windows are over (their keys idle); the sliding counts weigh half
        after = sorted(make.values(c.counts, clock()))
        assert after == ([] if make is limits_fixed else [("a", 1), ("b", 0)])
        with pytest.raises(ShmwinError, match="a Window may only read it"):
            c.counts.add(1, key="a")
    finally:
        c.close()
        shmwin.unlink(name)


def test_a_plain_window_is_not_a_counter_segment(name):
    with Window(name, span="10s", buckets=1, capacity=4) as w:
        # its core (a WindowCore) has no counter method; the counters' types refuse its segment
        assert not hasattr(w._backend._core, "fixed_incr") and not hasattr(w._backend._core, "sliding_get")
        with pytest.raises(ValueError, match="not a fixed-window segment"):
            open_core_as(w, _core.FixedWindowCore)
        with pytest.raises(ValueError, match="not a sliding-counter segment"):
            open_core_as(w, _core.SlidingCounterCore)
    shmwin.unlink(name)


# -- junk in the state words: an error, never a crash -------------------------------------------------


@pytest.mark.parametrize(
    ("make", "word", "junk", "complaint"),
    [
        ("fixed", 0, -5, "window start"),
        ("fixed", 0, 2**62, "window start"),
        ("fixed", 1, -1, "count"),
        ("sliding", 0, -7, "window index"),
        ("sliding", 0, 2**63 - 1, "window index"),
        ("sliding", 1, -1, "current count"),
        ("sliding", 2, -(2**63) + 1, "previous count"),
    ],
)
def test_junk_state_is_a_corrupt_segment_error(name, make, word, junk, complaint):
    clock = ManualClock(T0)
    c = fixed(name, clock) if make == "fixed" else sliding(name, clock)
    try:
        c.incr("k", 1) if isinstance(c, FixedWindows) else c.hit("k", 5, 1)
        q = c.counts._backend._q
        q[state_at(c.counts, "k") + word] = junk
        with pytest.raises(CorruptSegmentError, match=complaint):
            c.incr("k", 1) if isinstance(c, FixedWindows) else c.hit("k", 5, 1)
        with pytest.raises(CorruptSegmentError, match=complaint):
            c.get("k") if isinstance(c, FixedWindows) else c.window("k")
        make_ = limits_fixed if make == "fixed" else limits_sliding
        assert all(v >= 0 for _, v in make_.values(c.counts, clock()))  # the tools: junk counts 0
        c.clear("k")  # a cleared key starts afresh
        assert (c.incr("k", 1) == 1) if isinstance(c, FixedWindows) else c.hit("k", 5, 1)
    finally:
        c.close()
        shmwin.unlink(name)


def test_counts_saturate_instead_of_wrapping(name):
    clock = ManualClock(T0)
    f, s = fixed(name, clock), sliding(name + "s", clock)
    try:
        f.incr("k", 1)
        f.counts._backend._q[state_at(f.counts, "k") + 1] = 2**63 - 2  # units (thousandths of a hit)
        assert f.incr("k", 5) == (2**63 - 1) / UNIT
        s.hit("k", 2**62, 1)
        s.counts._backend._q[state_at(s.counts, "k") + 2] = 2**63 - 1  # previous: weighs fully at 0 s
        assert not s.hit("k", 2**62, 1)
    finally:
        f.close()
        s.close()
        shmwin.unlink(name)
        shmwin.unlink(name + "s")


# -- processes racing on one key: exact ---------------------------------------------------------------

HAMMER = 3_000


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("kind", ["fixed", "sliding"])
def test_two_processes_on_one_key_count_exactly(name, tmp_path, method, kind):
    """Two processes hammer one key: the fixed count is every incr, and the sliding counter
    admits exactly its limit (never one more), whatever the interleaving."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    c = fixed(name, clock) if kind == "fixed" else sliding(name, clock)
    limit = 2 * HAMMER - 1_001  # reachable by the two together only
    try:
        ctx = mp.get_context(method)
        with ctx.Pool(2) as pool:
            got = pool.starmap(counter_hits, [(kind, name, str(clock_path), HAMMER, limit, P)] * 2)
        if isinstance(c, FixedWindows):
            assert c.get("k") == 2 * HAMMER
        else:
            assert sum(got) == limit and c.window("k") == (0, limit, 0)
    finally:
        c.close()
        shmwin.unlink(name)


# -- memory: what a key costs -----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fixed", "sliding"])
def test_bytes_per_key_at_a_hundred_thousand_keys(name, kind, record_property):
    """st_blocks of the segment over 100,000 keys in random order, 3 hits each, index and
    key included: at most 128 bytes a key (nginx's limit_req state). A row is the 56-byte key
    header and the state (2 or 3 words); the index is 16 bytes an entry at a load of 5/16 to
    5/8; the copy a rebuild replaced gives its pages back a second later (the insert after)."""
    clock = ManualClock(T0)
    c = fixed(name, clock, capacity=None) if kind == "fixed" else sliding(name, clock, capacity=None)
    try:
        keys = [f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}" for i in range(100_000)]
        random.Random(5).shuffle(keys)
        for key in keys:
            for _ in range(3):
                c.incr(key, 1) if isinstance(c, FixedWindows) else c.hit(key, 5, 1)
        clock.advance(2)
        c.incr("later", 1) if isinstance(c, FixedWindows) else c.hit("later", 5, 1)
        per_key = os.stat(path_of(name)).st_blocks * 512 / len(keys)
        record_property("bytes_per_key", per_key)
        state = layout.FIXED_STATE_BYTES if kind == "fixed" else layout.SLIDING_STATE_BYTES
        assert c.counts._backend._lay.row_bytes == layout.KEY_HEADER_BYTES + state, "a key header, its state"
        assert per_key <= 128, f"{per_key:.1f} bytes per key"
        assert c.counts.full_count() == 0
    finally:
        c.close()
        shmwin.unlink(name)


def test_a_native_limiters_bytes_per_key_at_a_hundred_thousand_keys(name, record_property):
    """The same measure for ``Limiter("100/minute")`` (20 buckets, 21 kept): its compact ring
    (layout.py, "Limiter rings") -- a 40-byte ring header and 21 four-byte counts after the
    key header, 180 bytes in a 192-byte row -- and the index: at most 256 bytes a key."""
    clock = ManualClock(T0)
    lim = shmwin.Limiter(name, "100/minute", clock=clock)
    try:
        keys = [f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}" for i in range(100_000)]
        random.Random(5).shuffle(keys)
        for key in keys:
            for _ in range(3):
                assert lim.hit(key)
        clock.advance(2)
        assert lim.hit("later")
        per_key = os.stat(path_of(name)).st_blocks * 512 / len(keys)
        record_property("bytes_per_key", per_key)
        assert lim.window._backend._lay.row_bytes == 192
        assert per_key <= 256, f"{per_key:.1f} bytes per key"
        assert lim.full_count() == 0
    finally:
        lim.close()
        shmwin.unlink(name)


def test_state_words_are_where_the_layout_says(name):
    """The words the core writes are the ones format.py names (FIXED_STATE, SLIDING_STATE)."""
    clock = ManualClock(T0 + 3 * S)
    f, s = fixed(name, clock), sliding(name + "s", clock)
    try:
        f.incr("k", 4)
        s.hit("k", 9, 2)
        raw = bytes(f.counts._backend._buf[state_at(f.counts, "k") * 8 :][: layout.FIXED_STATE_BYTES])
        assert struct.unpack("<qq", raw) == (T0 + 3 * S, 4 * UNIT)  # start, count (in units)
        raw = bytes(s.counts._backend._buf[state_at(s.counts, "k") * 8 :][: layout.SLIDING_STATE_BYTES])
        assert struct.unpack("<qqq", raw) == ((T0 + 3 * S) // P, 2 * UNIT, 0)  # window, current, previous
    finally:
        f.close()
        s.close()
        shmwin.unlink(name)
        shmwin.unlink(name + "s")

