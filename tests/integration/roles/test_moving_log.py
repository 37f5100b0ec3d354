"""limits' moving window as each key's hit times, in memory that follows the hits held
(role "moving-log", core/moving.c).

A key's row holds two entries (time, hits) and the head of a chain of chunks of the
segment's chunk heap, taken as the key's hits need them and given back once their hits have
left. Here: the rule with time driven by hand (a hit forgotten exactly one period after it),
chunks handed out and given back (and reused: the heap does not grow again), junk in the
chain words (an error, never a crash), processes racing on one key (exact), and what a key
costs in /dev/shm.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support.helpers import ROOT, open_core_as

import shmwin
from shmwin import ManualClock, Window, _core
from shmwin.backends.shm import format as layout
from shmwin.backends.shm.segment import path_of
from shmwin.errors import CorruptSegmentError, ShmwinError
from shmwin.integrations import limits_moving
from shmwin.integrations.limits_moving import MovingLogs

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000 * S
P = 10 * S
Q = 1 << layout.moving_quantum_shift(P)  # the quantum of P's hit times: 64 ns


def moving(name: str, clock: ManualClock, limit: int, times: int = 1024, capacity: int | None = 64
           ) -> MovingLogs:  # fmt: skip
    found = MovingLogs.open(name, limit, P, times, clock, capacity, create=True)
    assert found is not None
    return found


@contextmanager
def opened(name: str, clock: ManualClock, limit: int, **sizes: Any) -> Iterator[MovingLogs]:
    """A fresh moving log (as :func:`moving` makes it), closed and unlinked after the test."""
    m = moving(name, clock, limit, **sizes)
    try:
        yield m
    finally:
        m.close()
        shmwin.unlink(name)


def state_at(m: MovingLogs, key: str) -> int:
    """The word index (in the mapping, as int64 words) of ``key``'s state: its chain word."""
    b = m.counts._backend
    row, _ = b._core.find(key)
    return (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0]


def words(m: MovingLogs) -> memoryview:
    return m.counts._backend._q


# -- the rule -----------------------------------------------------------------------------------


def test_a_hit_is_forgotten_exactly_one_period_after_it(name):
    """Times on the segment's quantum (64 ns for P = 10 s): exact to the nanosecond."""
    clock = ManualClock(T0)
    with opened(name, clock, 3) as m:
        assert m.used_and_reset("k") == (0, 0) and m.test("k", 3) and not m.test("k", 4)
        assert m.hit("k", 1)
        clock.set(T0 + Q)
        assert m.hit("k", 1)
        clock.set(T0 + 2 * Q)
        assert m.hit("k", 1) and not m.hit("k", 1) and not m.test("k", 1) and m.test("k", 0)
        assert m.used_and_reset("k") == (3, P + 1 - 2 * Q)  # the oldest (T0) leaves at T0 + P + 1
        clock.set(T0 + P)  # 1 ns before the first hit leaves: still counted
        assert m.used_and_reset("k") == (3, 1) and not m.hit("k", 1)
        clock.set(T0 + P + 1)  # gone, and only it
        assert m.used_and_reset("k") == (2, Q) and m.hit("k", 1) and not m.hit("k", 1)
        clock.set(T0 + P + 2 * Q + 1)  # T0 + Q and T0 + 2Q gone
        assert m.used_and_reset("k")[0] == 1
        clock.set(T0 + 2 * P + Q + 1)  # the last hit (T0 + P + 1, stamped T0 + P + Q) gone too
        assert m.used_and_reset("k") == (0, 0)


@pytest.mark.parametrize("period_ns", [S // 4, P, 86_400 * S])
def test_a_hit_off_the_quantum_is_forgotten_late_never_early(name, period_ns):
    """A hit's time is rounded up to the quantum (32 ns up to 2**33 ns, then P / 2**28 at most,
    a power of two): it leaves at most a quantum less 1 ns late, never a nanosecond early."""
    q = 1 << layout.moving_quantum_shift(period_ns)
    assert q == {S // 4: 32, P: 64, 86_400 * S: 1 << 19}[period_ns]
    assert period_ns >> 28 < q <= max(32, period_ns >> 27)
    clock = ManualClock(T0 + 1)
    found = MovingLogs.open(name, 1, period_ns, 1024, clock, 64, create=True)
    assert found is not None
    m = found
    try:
        assert m.hit("k", 1)
        stamped = -(-(T0 + 1) // q) * q  # rounded up
        clock.set(T0 + 1 + period_ns)  # the exact rule still counts it
        assert not m.hit("k", 1)
        clock.set(stamped + period_ns)  # and so does the rounded time, to its last ns
        assert not m.hit("k", 1) and m.used_and_reset("k") == (1, 1)
        clock.set(stamped + period_ns + 1)
        assert m.used_and_reset("k") == (0, 0) and m.hit("k", 1)
    finally:
        m.close()
        shmwin.unlink(name)


def test_an_entry_that_left_never_comes_back_when_its_stamp_wraps(name):
    """Stamps are kept modulo 2**32 quanta (275 s for P = 10 s) and read back against the
    row's last write. An entry that left but was not reused (the hits go to the first entry
    that counts nothing) must not read back as a live one once the last write has moved 2**31
    quanta past it: a hit zeroes such entries before it moves the last write on."""
    clock = ManualClock(T0)
    m = moving(name, clock, 2)
    wrap_ns = (1 << 32) * Q
    try:
        assert m.hit("k", 1) and m.hit("k", 1)  # both inline entries at T0
        step = P + Q + 1
        for i in range(1, 2 * wrap_ns // step + 2):  # one hit a period, for two wraps
            clock.set(T0 + i * step)
            assert m.used_and_reset("k")[0] == 0 and m.test("k", 2), f"step {i}: an old entry counts"
            assert m.hit("k", 1) and m.used_and_reset("k")[0] == 1
        clock.set(T0 + -(-(clock() + 1 - T0) // wrap_ns) * wrap_ns)  # the first hits' very stamp, wraps on
        assert m.used_and_reset("k")[0] == 0 and m.hit("k", 2) and not m.hit("k", 1)
    finally:
        m.close()
        shmwin.unlink(name)


def test_costs_are_counted_whole_and_refused_whole(name):
    clock = ManualClock(T0)
    with opened(name, clock, 10) as m:
        assert not m.hit("k", 11) and m.counts.keys() == []  # over the limit: never, no key made
        assert m.hit("k", 4) and m.hit("k", 6) and not m.hit("k", 1)
        assert m.hit("k", 0) and m.used_and_reset("k")[0] == 10  # a cost of 0 counts nothing, fits
        clock.advance(ns=P + 1)
        assert m.hit("k", 10) and not m.hit("other", 11) and m.hit("other", 10)
        m.clear("k")
        assert m.used_and_reset("k") == (0, 0) and m.hit("k", 10)
        assert m.reset() == 2 and m.used_and_reset("other") == (0, 0)
        with pytest.raises(ValueError, match="cost"):
            m.hit("k", -1)


def test_many_hits_take_chunks_and_give_them_back_for_other_keys(name):
    """4,000 hits on one key (limit 4,000: exact), each in an entry of its own: chunks come as
    they are needed; once the hits have left, the key's next hit gives every chunk back, and
    another key's 4,000 hits take the same chunks (the heap does not grow)."""
    clock = ManualClock(T0)
    limit = 4_000
    m = moving(name, clock, limit, times=4_096)
    per_key = -(-(limit - layout.MOVING_INLINE) // layout.CHUNK_ENTRIES)
    try:
        for i in range(limit):
            clock.set(T0 + i)
            assert m.hit("k", 1)
        assert not m.hit("k", 1) and m.used_and_reset("k") == (limit, P + 1 - (limit - 1))
        assert m.chunks()[:2] == (per_key, 0)
        clock.set(T0 + P + 1)  # the first hit left, and only it
        assert m.used_and_reset("k")[0] == limit - 1 and m.hit("k", 1) and not m.hit("k", 1)
        clock.set(T0 + 3 * P)
        assert m.hit("k", 1)  # its chunks counted nothing: back on the free list
        assert m.chunks()[:2] == (per_key, per_key)
        for i in range(limit):
            clock.set(T0 + 3 * P + 1 + i)
            assert m.hit("j", 1)
        assert not m.hit("j", 1) and m.used_and_reset("k")[0] == 1
        assert m.chunks()[:2] == (per_key, 0), "the chunks were reused"
        m.clear("j")  # a cleared key's chunks go back at once
        assert m.chunks()[:2] == (per_key, per_key)
        clock.set(T0 + 5 * P)
        for key in ("a", "b"):  # each takes a part of the free list
            for _ in range(200):
                assert m.hit(key, 1)
        assert m.chunks()[0] == per_key
    finally:
        m.close()
        shmwin.unlink(name)


def test_past_times_entries_the_oldest_merge_later_never_earlier(name):
    """limit 50, times=5: 50 hits at 50 instants all fit (counts merged into the newer time),
    the 51st is refused, and the merged hits leave later than they came (strict), never sooner."""
    clock = ManualClock(T0)
    with opened(name, clock, 50, times=5) as m:
        for i in range(50):
            clock.set(T0 + i * S // 10)
            assert m.hit("k", 1)
        # a run in time order: 5 counting, 1 merged away, 1 new; its oldest chunk back once emptied
        assert not m.hit("k", 1) and m.chunks()[0] <= 2
        clock.set(T0 + P + 1)  # the first hit would have left: merged, it is still counted
        assert m.used_and_reset("k")[0] == 50 and not m.hit("k", 1)
        clock.set(T0 + 49 * S // 10 + P + 1)  # every hit's time has passed a period ago
        assert m.used_and_reset("k") == (0, 0) and m.hit("k", 50)


def test_an_idle_keys_row_and_chunks_are_reused(name):
    """capacity 2: a third key takes the row of an idle one (its newest hit over a period old),
    and with it that key's chunks go back."""
    clock = ManualClock(T0)
    with opened(name, clock, 100, capacity=2) as m:
        for key in ("a", "b"):
            for _ in range(40):
                assert m.hit(key, 1)
        top = m.chunks()[0]
        assert top > 0 and m.chunks()[1] == 0
        clock.advance(ns=P + 1)
        for _ in range(40):
            assert m.hit("c", 1)
        assert m.chunks()[0] == top, "the idle keys' chunks were reused"
        assert m.used_and_reset("a") == (0, 0) and m.used_and_reset("c")[0] == 40


def test_a_moving_log_is_not_written_as_a_plain_window(name):
    clock = ManualClock(T0)
    m = moving(name, clock, 50)
    long_key = "LIMITER/127.0.0.1//login/50/10/second/" + "x" * 40  # stored as a prefix and a digest
    try:
        m.hit("k", 1)
        for _ in range(20):  # two chunks past its row's two entries
            m.hit(long_key, 2)
        with Window.attach(name, clock=clock) as w:
            assert w.geometry.role == "moving-log" and w.geometry.idle_ns == P
            with pytest.raises(ShmwinError, match="moving-log"):
                w.add(1, key="k")
            found = dict(limits_moving.values(w, clock()))  # lock-free, the chains walked
            assert sorted(found.values()) == [1, 40] and found["k"] == 1
            # the rows keep 8-byte digests; the names area keeps up to 48 bytes of each key
            assert found[long_key[:48] + "\u2026"] == 40 and sorted(w.keys()) == sorted(found)
            clock.advance(ns=P + 1)
            assert limits_moving.values(w, clock()) == []  # idle keys are not listed
        plain = Window(name + "p", span="10s", buckets=10, capacity=8)
        try:
            assert not hasattr(plain._backend._core, "moving_hit")  # a WindowCore: no moving method
            with pytest.raises(ValueError, match="not a moving-log"):
                open_core_as(plain, _core.MovingLogCore)
        finally:
            plain.close()
            shmwin.unlink(name + "p")
    finally:
        m.close()
        shmwin.unlink(name)


# -- key names: the rows keep digests, the names area what the tools show ------------------------


def test_keys_are_named_for_the_tools_while_names_last(name):
    """NAME_SLOTS names: past them (4 probes from a key's hash), a key shows as its digest;
    once named keys are idle and their rows reused, their names' entries go to new keys."""
    clock = ManualClock(T0)
    with opened(name, clock, 5, capacity=4 * layout.NAME_SLOTS) as m:
        first = [f"client-{i}" for i in range(3 * layout.NAME_SLOTS)]
        for key in first:
            assert m.hit(key, 1)
        shown = {str(k): v for k, v in limits_moving.values(m.counts, clock())}
        named = [key for key in first if key in shown]
        digests = [key for key in shown if key.startswith("\u2026")]
        assert len(named) + len(digests) == len(first) and all(v == 1 for v in shown.values())
        assert layout.NAME_SLOTS // 2 < len(named) <= layout.NAME_SLOTS and digests
        assert all(re.fullmatch("\u2026[0-9a-f]{16}", key) for key in digests)
        clock.advance(ns=P + 1)  # every key idle: the next keys take their rows, then their names
        later = [f"later-{i}" for i in range(200)]
        for key in later:
            assert m.hit(key, 1)
        shown = {str(k): v for k, v in limits_moving.values(m.counts, clock())}
        assert len(shown) == 200 and sum(key in shown for key in later) >= 180, "stale names were not reused"


def test_junk_in_the_names_area_shows_digests_never_a_crash(name):
    clock = ManualClock(T0)
    with opened(name, clock, 5) as m:
        for key in ("a", "b", "c"):
            assert m.hit(key, 1)
        lay = m.counts._backend._lay
        start = (lay.keys_off - layout.NAME_SLOTS * layout.NAME_ENTRY_BYTES) // 8
        q = words(m)
        rng = random.Random(3)
        for i in range(start, lay.keys_off // 8):
            q[i] = rng.getrandbits(64) - (1 << 63)
        shown = dict(limits_moving.values(m.counts, clock()))
        assert sorted(shown.values()) == [1, 1, 1] and all(str(k).startswith("\u2026") for k in shown)
        assert m.hit("a", 1) and m.used_and_reset("a")[0] == 2  # counting never reads names
        assert m.hit("d", 1) and "d" in dict(limits_moving.values(m.counts, clock()))  # named again


# -- junk in the chain words: an error, never a crash --------------------------------------------


@pytest.mark.parametrize("junk", [-1, 10**9, "self", "cycle", "foreign"])
def test_junk_chain_words_are_a_corrupt_segment_error(name, junk):
    clock = ManualClock(T0)
    with opened(name, clock, 100) as m:
        for key, at in (("k", T0), ("other", T0 + P // 2)):
            clock.set(at)
            for _ in range(30):
                m.hit(key, 1)
        q = words(m)
        at = state_at(m, "k") + layout.MOVING_STATE_CHAIN
        lay = m.counts._backend._lay
        oldest = (int(q[at]) & layout.MOVING_LINK_MASK) - 1  # the run's chain runs oldest to newest
        chunk_word = (lay.chunks_off + oldest * layout.CHUNK_BYTES) // 8
        next_word = chunk_word + layout.CHUNK_NEXT_OFF // 8  # a chunk's next: the low half of its first word
        if junk == "self":  # the oldest chunk's next names itself: a cycle
            q[next_word] = q[next_word] & ~0xFFFFFFFF | oldest + 1
        elif junk == "cycle":  # the second chunk's next names the oldest
            second = (int(q[next_word]) & 0xFFFFFFFF) - 1
            second_next = (lay.chunks_off + second * layout.CHUNK_BYTES + layout.CHUNK_NEXT_OFF) // 8
            q[second_next] = q[second_next] & ~0xFFFFFFFF | oldest + 1
        elif junk == "foreign":  # another key's chunk
            q[at] = q[state_at(m, "other") + layout.MOVING_STATE_CHAIN]
        else:
            q[at] = junk
        if junk in ("self", "cycle"):  # a key's calls walk its run from the oldest end to what counts:
            clock.set(T0 + P + 1)  # its hits have left, so the walk crosses the junk link
        with pytest.raises(CorruptSegmentError, match="chain"):
            m.hit("k", 1)
        with pytest.raises(CorruptSegmentError, match="chain"):
            m.used_and_reset("k")
        assert m.used_and_reset("other")[0] == 30 and m.hit("other", 1)  # another key is unaffected
        m.clear("k")  # its row emptied: the junk chain cut, the key usable again
        clock.set(T0 + 2 * P)  # a whole quantum
        assert m.hit("k", 1) and m.used_and_reset("k") == (1, P + 1)


@pytest.mark.parametrize("word", ["chunks_top", "chunks_reserved", "chunk_free"])
def test_junk_heap_words_refuse_the_segment(name, word):
    clock = ManualClock(T0)
    m = moving(name, clock, 100)
    m.hit("k", 1)
    offset = {"chunks_top": layout.CHUNKS_TOP_OFF, "chunks_reserved": layout.CHUNKS_RESERVED_OFF,
              "chunk_free": layout.CHUNK_FREE_OFF}[word]  # fmt: skip
    words(m)[offset // 8] = -5 if word == "chunk_free" else 1 << 31 | 7
    m.close()
    try:
        with pytest.raises(CorruptSegmentError, match="chunk heap"):
            Window.attach(name)
    finally:
        shmwin.unlink(name)


def test_junk_heap_words_met_by_a_live_core_are_an_error(name):
    clock = ManualClock(T0)
    with opened(name, clock, 100) as m:
        for _ in range(30):
            m.hit("k", 1)
        words(m)[layout.CHUNKS_TOP_OFF // 8] = 3  # no tag
        with pytest.raises(CorruptSegmentError, match="chunks_top"):
            m.hit("k", 1)


def test_a_truncated_moving_log_is_refused(name):
    clock = ManualClock(T0)
    m = moving(name, clock, 100)
    m.hit("k", 1)
    chunks_off = m.counts._backend._lay.chunks_off
    m.close()
    try:
        os.truncate(path_of(name), chunks_off)
        with pytest.raises(CorruptSegmentError):
            Window.attach(name)
    finally:
        shmwin.unlink(name)


# -- processes racing on the same keys: exact ----------------------------------------------------

HAMMER = 2_000


def _hammer(name: str, clock_path: str, n: int) -> int:
    clock = ManualClock(path=clock_path)
    m = MovingLogs.open(name, 0, 0, 0, clock, None, create=False)
    assert m is not None
    try:
        return sum(m.hit(key, 1) for _ in range(n // 2) for key in ("k", "j"))
    finally:
        m.close()


ATTACH = textwrap.dedent(
    """
    import sys
    from shmwin import ManualClock
    from shmwin.integrations.limits_moving import MovingLogs
    m = MovingLogs.open(sys.argv[1], 0, 0, 0, ManualClock(path=sys.argv[2]), None, create=False)
    print(sum(m.hit(key, 1) for _ in range(int(sys.argv[3]) // 2) for key in ("k", "j")))
    m.close()
    """
)


def test_processes_on_the_same_keys_admit_exactly_the_limit(name, tmp_path):
    """Two forked processes and an unrelated ``python -c`` (attaching by name) hammer two keys
    whose hits need chunks: together they admit exactly the limit of each, never one more."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    limit = 2_500  # reachable by the three together only
    with opened(name, clock, limit, times=4_096) as m:
        other = subprocess.Popen(
            [sys.executable, "-c", ATTACH, name, str(clock_path), str(2 * HAMMER)],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        with mp.get_context("fork").Pool(2) as pool:
            got = pool.starmap(_hammer, [(name, str(clock_path), 2 * HAMMER)] * 2)
        out, _ = other.communicate(timeout=120)
        assert other.returncode == 0
        assert sum(got) + int(out) == 2 * limit
        assert m.used_and_reset("k")[0] == limit and m.used_and_reset("j")[0] == limit
        per_key = -(-(limit - layout.MOVING_INLINE) // layout.CHUNK_ENTRIES)
        assert m.chunks()[0] == 2 * per_key


# -- memory: what a key costs ------------------------------------------------------------------------


@pytest.mark.parametrize("hits", [1, 2, 3, 5, 10])
def test_bytes_per_key_at_a_hundred_thousand_keys(name, hits, record_property):
    """st_blocks of the segment over 100,000 keys in random order (limit 1000/day, as the
    issue's app), index and key included, against the memory issue's target: 96 bytes and 16
    a hit held. A key's row is 64 bytes (a 32-byte key header with its digest, a chain word,
    a run word, two one-word entries); hits past two take 32-byte chunks of 3 entries; the index is 16
    bytes an entry at a load of 5/16 to 5/8. Measured: 102 (1 hit), 135 (3 hits)."""
    clock = ManualClock(T0)
    m = MovingLogs.open(name, 1_000, 86_400 * S, 1_024, clock, None, create=True)
    assert m is not None
    try:
        keys = [f"10.{i >> 16}.{i >> 8 & 255}.{i & 255}" for i in range(100_000)]
        random.Random(5).shuffle(keys)
        for key in keys:
            for _ in range(hits):
                assert m.hit(key, 1)
        clock.advance(2)
        m.hit("later", 1)  # the index copy a rebuild replaced gives its pages back
        per_key = os.stat(path_of(name)).st_blocks * 512 / len(keys)
        record_property("bytes_per_key", per_key)
        row_bytes = m.counts._backend._lay.row_bytes
        assert row_bytes == layout.key_header_bytes("moving-log") + layout.MOVING_STATE_BYTES == 64
        assert per_key <= 96 + 16 * hits, f"{per_key:.1f} bytes per key"
        assert m.counts.full_count() == 0
    finally:
        m.close()
        shmwin.unlink(name)


def test_bytes_per_hit_of_one_busy_key(name, record_property):
    """One key, 1,000 hits held: its chunks (3 entries of 8 bytes in 32), ~11 bytes a hit (the
    memory issue's target: 16)."""
    clock = ManualClock(T0)
    m = MovingLogs.open(name, 1_000, 86_400 * S, 1_024, clock, None, create=True)
    assert m is not None
    try:
        m.hit("k", 1)
        before = os.stat(path_of(name)).st_blocks * 512
        for _ in range(999):
            assert m.hit("k", 1)
        assert not m.hit("k", 1)
        grown = os.stat(path_of(name)).st_blocks * 512 - before
        record_property("bytes_per_hit", grown / 999)
        top, _, reserved, _ = m.chunks()
        assert top == -(-998 // layout.CHUNK_ENTRIES) and reserved - top <= max(16, top // 8)
        assert grown / 999 <= 16, f"{grown / 999:.1f} bytes per hit"  # whole pages, reserved ahead
    finally:
        m.close()
        shmwin.unlink(name)
