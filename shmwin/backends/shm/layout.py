"""The binary format of a window segment. This table is the contract.

Segment = header page | lock table | stripe table | key table | rows. Little-endian,
every offset a multiple of 64 so no two writers share a cache line.

The tables below are also data, in ``format.py`` (the one description: the native core's
``layout.h`` is generated from it, and its names are the ones used here and in C); the tests
hold each table's offsets, sizes and names to it.

Header (4096 bytes; bytes 32..1024 are immutable after creation and covered by
``header_crc``; the magic is written *last*, so a non-zero magic means ready)::

    off  size type      name            meaning
    0    8    bytes     magic           b"SHMWIN\\x00\\x00" once the segment is ready, 0 before
    8    4    u32       version         binary format version (FORMAT_VERSION)
    12   4    u32       header_bytes    HEADER_BYTES
    16   8    u64       total_bytes     size of the whole segment; fstat must agree
    24   4    u32       header_crc      zlib.crc32 of bytes 32..1024
    28   4    u32       -               reserved, 0
    32   4    u32       n_rings         rings per row, 1..MAX_RINGS (see the ring table)
    36   4    u32       kind            0 = window, 1 = limiter (compact rings, running totals)
    40   4    u32       n_fields        value fields per bucket, 1..MAX_FIELDS
    44   4    u32       dtype           0 = int64, 1 = float64 (field values; epochs are int64)
    48   4    u32       mode            0 = striped, 1 = locked
    52   4    u32       n_stripes       per-writer rows (striped mode); a concurrency's processes; else 0
    56   4    u32       n_locks         robust mutexes in the lock table
    60   4    u32       capacity        most keys the segment may hold at once (0 = unkeyed window)
    64   4    u32       key_slots       index entries at index level 0 (INDEX_MIN_SLOTS), else 0
    68   4    u32       clock           0 = monotonic ns (the default), 1 = wall-clock ns (limits' storages)
    72   8    i64       creator_pid     pid of the creating process
    80   8    i64       created_real_ns CLOCK_REALTIME at creation  } anchor for showing
    88   8    i64       created_mono_ns CLOCK_MONOTONIC at creation } wall-clock times
    96   16   bytes     boot_id         /proc/sys/kernel/random/boot_id of the creating boot
    112  8    u64       locks_off       offset of the lock table
    120  8    u64       stripes_off     offset of the stripe table
    128  8    u64       keys_off        offset of the key table
    136  8    u64       rows_off        offset of row 0
    144  8    u64       row_bytes       bytes per row (a multiple of 64; keyed rows < 128: of 8)
    152  16   bytes     hash_key        random SipHash-1-3 key of the key table (per segment)
    168  4    u32       role            what shmwin made the segment for (ROLES): 0 = a plain
                                        window or limiter; 1 = "fixed-starts", an older shmwin's
                                        start records of limits' fixed windows (not summed by the
                                        tools); 7 = "fixed-window", 8 = "sliding-counter", 10 =
                                        "moving-log", 12 = "token-bucket": keyed rows of per-key
                                        state, not buckets (see "Counter rows"); 9 = "decisions"
                                        (a limiter's decisions window); 11 = "concurrency": keyed
                                        rows of holder entries and a stripe table of processes
                                        (see "Concurrency rows"); 13 = "lease": a two-tier
                                        limiter's host tier (see "Lease rows"); 14 =
                                        "distribution": slots of (count, sum, min, max) and
                                        each bucket's bins (format_rows.DIST_SLOT)
    176  8    u64       chunks_off      role "moving-log": offset of the chunk heap (after the
                                        rows, page-aligned); else 0
    184  8    u64       n_chunks        its chunks: capacity x the longest chain a key holds; else 0
    192  4    u32       sketch_bins     role "distribution": bins per bucket (3 + log bins); else 0
    200  8    u64       sketch_error    its relative error (a double's bits); else 0
    208  8    u64       sketch_low      the low end of its log bins' range (a double's bits); else 0
    216  8    u64       sketch_high     the high end (a double's bits); else 0
    256  512  utf-8     field_names     MAX_FIELDS x 32 bytes, NUL-padded
    768  192  ring[8]   ring_table      per ring: i64 bucket_ns, u32 n_buckets, u32 flags, i64 limit
                                        (flags: 1 = a log ring, see "Log rings")
    1024 8    i64       rows_in_use     rows readers must sum (unkeyed: stripes ever claimed + 1)

Keyed segments keep their key table's state in the words after it, written only under
lock 0 (LOCK_KEY_TABLE) and checked on attach. The three that decide where memory is
touched are *checked words* (C): u32 value | u32 tag << 32, the tag :func:`state_tag` of the
value, the word's offset and the hash key, written in one store; junk fails the tag, so no
corrupt word sends a process into the sparse file's holes (a SIGBUS on a full /dev/shm)::

    1032 8    C         index           the current index: 2 x level + copy (see "Key table")
    1040 8    i64       index_used      its entries that are not "never used" (keys + tombstones)
    1048 8    i64       keys            its entries that hold a key, live or idle
    1056 8    C         rows_top        rows handed out so far (the heap's high-water mark)
    1064 8    C         rows_reserved   rows whose memory is reserved (posix_fallocate); >= rows_top
    1072 8    i64       free_head       first row of the free list, + 1 (0: empty)
    1080 8    i64       rebuilt_ns      when the index was last rebuilt or reclaimed (monotonic ns)
    1088 8    i64       full_count      requests that met a full table (no row for a new key:
                                        capacity, or no memory after reclaim), whatever on_full
                                        answered; added to atomically, under no lock
    1096 8    C         chunks_top      role "moving-log", under lock 1 (LOCK_CHUNKS): chunks handed out
    1104 8    C         chunks_reserved chunks whose memory is reserved; >= chunks_top
    1112 8    i64       chunk_free      first chunk of the chunk free list, + 1 (0: empty)
    1120 8    i64       live_gen        a limiter's live limits (core/live.c), under lock 0: the
                                        changes made (0: none, the ring table's limits hold); bit
                                        62 (LIVE_MOVED): the segment was replaced under its name
    1128 8    i64       live_changed_ns when the last change was made (wall ns)
    1136 128  i64[16]   live_limits     two tables of 8 limits; generation g's is table g & 1

Lock table: ``n_locks`` x 64 bytes. Lock 0 guards the stripe table (unkeyed) or
key insertion (keyed); lock 1 guards row 0 (unkeyed) or the chunk heap (keyed, role
"moving-log": LOCK_CHUNKS, taken after a row lock, never before); keyed row *s* is guarded
by lock ``2 + s % (n_locks - 2)``. Each entry::

    off  size type      name     meaning
    0    <=48 mutex     mutex    process-shared *robust* pthread mutex (owner-dead on death)
    48   8    i64       seq      odd while a section changes a fixed window's row in place
                                 under the lock (or died in one): lock-free readers recheck it
    56   8    i64       intent   row (lock 0 of a keyed window: index entry) the holder's section
                                 works on, -1 = none;
                                 what an EOWNERDEAD repair looks at (see core/locks.c)

Stripe table (unkeyed, and keyed segments of role "concurrency", whose ``n_stripes`` are
processes, not rows): ``n_stripes + 1`` x 128 bytes, entry *r* describes row *r* (or process *r*).
A stripe belongs to a *process*: every write is one native call under the GIL, so
the threads of a process never interleave inside a stripe. Who owns a stripe is the
kernel's word, not /proc's: the owner's keeper thread holds its liveness mutex, which
turns owner-dead when the owner dies (see "the keeper" in core/threads.c)::

    off  size type  name         meaning
    0    8    i64   owner        pid of the process writing this row, 0 = free (row 0: always 0)
    8    8    i64   owner_start  owner's start time in clock ticks (/proc stat field 22)
    16   8    i64   owner_pid    owner's process id, for display
    24   8    i64   claimed_ns   CLOCK_MONOTONIC when claimed
    32   8    i64   claims       role "concurrency": claims so far (each claim adds one: its identity)
    64   <=56 mutex mutex        liveness: a robust mutex held by the owner process while it owns the row

Key table (keyed only) -- an index over a heap of rows. The segment file is sized for
``capacity`` keys but *sparse*: only what is in use is reserved, so memory follows the
keys in use, not the capacity. The index is an open-addressed (linear probing) table of
16-byte entries; level *k* has ``key_slots << k`` of them, and each level has two copies, so
a rebuild (to grow, or to drop idle keys and tombstones) always writes a copy nobody reads;
the copies older than the one it replaced give their pages back (a hole punched). An insert
rebuilds past a load of 5/8, into the level whose load is at most 5/16.
Copy ``(k, c)`` starts at ``keys_off + 16 * key_slots * (2 * (2**k - 1) + c * 2**k)``::

    off  size type  name         meaning
    0    8    i64   gen          0 = never used; > 0 published (= its row's generation);
                                 < 0 being written (a dead writer's is dropped by the repair)
    8    8    u64   place        hash << 26 | row: the key's hash (37 bits of SipHash-1-3
                                 under the segment's hash_key, never 0) and the heap row
                                 holding its counts, one word; hash 0 = tombstone (the key
                                 was dropped; probing goes on)

Rows: unkeyed windows have ``n_stripes + 1`` rows -- row 0 shared and written
only under lock 1 (locked mode, and striped mode's fallback when every stripe is
taken), row *r >= 1* written only by its owner process, without a lock. Keyed
windows have a heap of up to ``capacity`` rows after the index, handed out in order
(``rows_top``) or from the free list; a keyed row is written under lock
``2 + row % (n_locks - 2)`` and starts with a 56-byte key header -- the key's identity
is the row's, so a hot write touches no index line. Rows are whole cache lines (two
processes writing two keys never share a line), but keyed rows under 128 bytes, which are
packed (8-byte words, one after another): a small row costs what its key and state hold::

    off  size type  name         meaning
    0    8    i64   gen          > 0: holds the key below (free: ident 0); < 0: being
                                 (re)assigned or released; 0: never handed out. Only grows
                                 in size.
    8    8    i64   last_ns      the key's newest write (monotonic ns; idle keys are reused);
                                 on the free list: the next free row + 1
    16   8    u64   ident        hash | len << 40 | flags << 48: the hash as in the index, the
                                 bytes stored, flags 1 = the key was a str, 2 = a long key
                                 (16 bytes, then a 16-byte keyed digest of the whole); 0 = no key
    24   32   bytes key          the key's bytes, NUL-padded

After the key header (keyed) or from word 0 (unkeyed) come the rings one after another.
A window's ring *i* (and a limiter's log ring, see "Log rings") is ``head_slots +
n_buckets_i`` slots of ``1 + n_fields`` 8-byte words, the first ``head_slots`` being the
ring's header (one for windows, two for a limiter's log rings)::

    header slot 0      word 0: head epoch    (unused by windows)
    bucket slots       word 0: bucket epoch  words 1..F: field values    (EMPTY_EPOCH = -2**63 if none)

A limiter's log ring (exact=...): its slots are entries (LOG_TIME: t ns, LOG_HITS: hits), a
circular run of them in time order; its header's first four words (0 when empty, LOG_HDR_*,
core/exactlog.c) are the run's position (tail << 32 | len), its running total (>= the run's
hits), and the dead entry's time and hits (hits expired from the tail, for a clock stepped back).

Limiter rings: a limiter's bucket ring is *compact* -- a 40-byte header (LIMITER_RING), then
``n_buckets`` counts with no epoch, each ``ring_count_bytes`` wide: 4 (i32) when the ring's
limit is at most COUNT32_MAX = 2**31 - 1 (a bucket never holds more than its limit: a hit is
counted only if it fits), else 8 (i64); the counts are padded to a whole word. From the ring
table, so immutable and under header_crc::

    off  size type  name     meaning
    0    8    i64   head     the newest epoch counted in (a clock behind it counts there);
                             EMPTY_EPOCH: nothing counted (every count is then junk or 0)
    8    8    i64   total    running total of the clean counts (derived)
    16   8    i64   zeroed   the counts of epochs in (head - n, zeroed] are clean
    24   8    i64   tail     a lower bound on the oldest clean epoch holding hits (derived),
                             EMPTY_EPOCH if none holds any
    32   8    u64   ghost    the hits head moves dropped, for a clock behind the head: the
                             newest dropped epoch mod 2**32 << 32 | their hits (0: none),
                             capped at limit - total when written
    40   n*w  i32/i64 counts count *s* is that of the one epoch e == s (mod n) in (head - n,
                             head]: *clean* (the epoch's own, in the total) iff e <= zeroed;
                             the count of an epoch in (zeroed, head] is *stale* (an epoch n
                             or more before, already out of the total), zeroed before use

At rest (no "hit" section running) zeroed == head, and total is the sum of the counts.
Moving the head from h to e, "hit" stores head = e, lowers total by the clean counts that
left, zeroes the stale counts, then zeroed = e: a tear leaves total >= the clean counts
(refused early, never admitted late), and the repair zeroes the counts of (zeroed, head],
sets zeroed = head and recomputes the total (``core/rings.c``, "the limiter's compact rings").
A reader (lock-free) derives each count's epoch from head and zeroed, read before and after.
A clock behind the head counts there, sees every count, and adds the ghost's hits while the
ghost's epoch is in its window: "hit" writes the ghost before it moves the head, so a clock
stepped back never sees fewer hits than it recorded in its window, up to the limit
(``core/rings.c``, "a clock stepped back: the ring's ghost").

The rows of the roles whose rows hold state instead of buckets (counters, token buckets,
concurrency, moving logs and their chunk heap and key names, leases) are drawn with their
records, in ``format_rows.py``. The header page is packed and checked in ``header.py``.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass

from ...geometry import (
    CONC_HOLDER_BYTES,
    DTYPES,
    FIELD_NAME_BYTES,
    FIRST_KEY_LOCK,
    INDEX_MIN_SLOTS,
    KINDS,
    MAX_BUCKETS,
    MAX_CAPACITY,
    MAX_FIELDS,
    MAX_KEY_LOCKS,
    MAX_LOG_ENTRIES,
    MAX_RINGS,
    MAX_SPAN_NS,
    MAX_STRIPES,
    MODES,
    ROLES,
    Geometry,
)
from . import format as _words

# The format's constants: one description, format.py, which the native core's layout.h
# is generated from; these are the same names, with the same values (tests/unit/test_layout.py).
# (The limits every backend shares, MAX_FIELDS ... ROLES, are geometry's: the format takes them
# from there too.)
from .format import (
    CHECKED_WORDS,
    CLOCKS,
    CRC_END,
    CRC_START,
    EMPTY_EPOCH,
    FIELD_NAMES_OFF,
    FORMAT_VERSION,
    FREE_HEAD_OFF,
    FULL_COUNT_OFF,
    HEADER_BYTES,
    HEADER_CRC_OFF,
    INDEX_ENTRY_GEN,
    INDEX_ENTRY_PLACE,
    INDEX_ENTRY_WORDS,
    INDEX_OFF,
    INDEX_USED_OFF,
    KEY_ENTRY_BYTES,
    KEY_FLAG_DIGEST,
    KEY_FLAG_STR,
    KEY_HEADER_BYTES,
    KEY_LONG_PREFIX,
    KEY_ROW_GEN,
    KEY_ROW_IDENT,
    KEY_ROW_KEY_OFF,
    KEY_ROW_LAST_NS,
    KEYS_OFF,
    LIMITER_HEAD_SLOTS,
    LIMITER_RING_HEAD,
    LIMITER_RING_TAIL,
    LIMITER_RING_TOTAL,
    LIMITER_RING_WORDS,
    LIMITER_RING_ZEROED,
    LOCK_BYTES,
    LOCK_INTENT_OFF,
    LOCK_KEY_TABLE,
    LOCK_SHARED_ROW,
    LOCK_STRIPE_TABLE,
    MAGIC,
    MAGIC_OFF,
    MAX_PROBES,
    MAX_STORED_KEY,
    PAGE_BYTES,
    REBUILT_NS_OFF,
    RING_LOG,
    RING_TABLE_OFF,
    ROWS_IN_USE_OFF,
    ROWS_RESERVED_OFF,
    ROWS_TOP_OFF,
    SLOT_EPOCH,
    SLOT_VALUES,
    STRIPE_ENTRY_BYTES,
    STRIPE_MUTEX_OFF,
    WINDOW_HEAD_SLOTS,
    WORD_BYTES,
)

__all__ = [  # this module's own, then the format's constants it re-exports
    "CHECKED_WORDS",
    "CLOCKS",
    "CRC_END",
    "CRC_START",
    "DTYPES",
    "EMPTY_EPOCH",
    "FIELD_NAMES_OFF",
    "FIELD_NAME_BYTES",
    "FIRST_KEY_LOCK",
    "FORMAT_VERSION",
    "FREE_HEAD_OFF",
    "FULL_COUNT_OFF",
    "HEADER_BYTES",
    "HEADER_CRC_OFF",
    "INDEX_ENTRY_GEN",
    "INDEX_ENTRY_PLACE",
    "INDEX_ENTRY_WORDS",
    "INDEX_MIN_SLOTS",
    "INDEX_OFF",
    "INDEX_USED_OFF",
    "KEYS_OFF",
    "KEY_BYTES_OFF",
    "KEY_ENTRY_BYTES",
    "KEY_FLAG_DIGEST",
    "KEY_FLAG_STR",
    "KEY_HEADER_BYTES",
    "KEY_LONG_PREFIX",
    "KEY_ROW_GEN",
    "KEY_ROW_IDENT",
    "KEY_ROW_KEY_OFF",
    "KEY_ROW_LAST_NS",
    "KINDS",
    "LIMITER_HEAD_SLOTS",
    "LIMITER_RING_HEAD",
    "LIMITER_RING_TAIL",
    "LIMITER_RING_TOTAL",
    "LIMITER_RING_WORDS",
    "LIMITER_RING_ZEROED",
    "LOCK_BYTES",
    "LOCK_INTENT_OFF",
    "LOCK_KEY_TABLE",
    "LOCK_SHARED_ROW",
    "LOCK_STRIPE_TABLE",
    "MAGIC",
    "MAGIC_OFF",
    "MAX_BUCKETS",
    "MAX_CAPACITY",
    "MAX_FIELDS",
    "MAX_KEY_LOCKS",
    "MAX_LOG_ENTRIES",
    "MAX_PROBES",
    "MAX_RINGS",
    "MAX_SPAN_NS",
    "MAX_STORED_KEY",
    "MAX_STRIPES",
    "MODES",
    "PAGE_BYTES",
    "REBUILT_NS_OFF",
    "RING_LOG",
    "RING_TABLE_OFF",
    "ROLES",
    "ROWS_IN_USE_OFF",
    "ROWS_RESERVED_OFF",
    "ROWS_TOP_OFF",
    "SLOT_EPOCH",
    "SLOT_VALUES",
    "STRIPE_ENTRY_BYTES",
    "STRIPE_MUTEX_OFF",
    "WINDOW_HEAD_SLOTS",
    "WORD_BYTES",
    "Layout",
    "empty_rings",
]

KEY_BYTES_OFF = KEY_ROW_KEY_OFF  # the key's bytes within a key row (its earlier name)



def _align64(n: int) -> int:
    return (n + 63) // 64 * 64


PACKED_ROW_BYTES = 128  # keyed rows smaller than this are not padded to a cache line
# the counter roles' rows: a key header, then the state (its ring, in the header, gives the
# period and the idle time; no bucket is in the row)
STATE_BYTES = {
    "fixed-window": _words.FIXED_STATE_BYTES,
    "sliding-counter": _words.SLIDING_STATE_BYTES,
    "token-bucket": _words.TOKEN_STATE_BYTES,
    "moving-log": _words.MOVING_STATE_BYTES,
    "lease": _words.LEASE_STATE_BYTES,
}
MAX_CHUNKS = _words.MOVING_LINK_MASK  # a chain word names a chunk in MOVING_LINK_BITS (chunks_top: < 2**32)


def state_words(g: Geometry) -> int:
    """Words of a concurrency row's state: its top word and its holder entries (``g.holders``,
    0: one per process stripe)."""
    return (_words.CONC_STATE_BYTES + (g.holders or g.n_stripes) * CONC_HOLDER_BYTES) // WORD_BYTES


def holders_in_row(row_bytes: int) -> int:
    """The holder entries a concurrency row of ``row_bytes`` holds (its padding's too, as
    core/concurrency.c reads them: the header stores no count, the row's size says it)."""
    room = row_bytes - _words.key_header_bytes("concurrency") - _words.CONC_STATE_BYTES
    return max(0, min(MAX_STRIPES, room // CONC_HOLDER_BYTES))


def canonical_holders(g: Geometry) -> Geometry:
    """``g`` with its holder entries as its header reads back: every entry its row's size holds
    (0 if that is one per stripe), so that a geometry and its segment's compare equal."""
    if g.role != "concurrency":
        return g
    fill = holders_in_row(Layout.plan(g).row_bytes)
    stripes = holders_in_row(Layout.plan(dataclasses.replace(g, holders=0)).row_bytes)
    return dataclasses.replace(g, holders=0 if fill == stripes else fill)


def chunks_per_key(g: Geometry) -> int:
    """Role "moving-log": the most chunks one key's chain holds -- its entries past the inline
    ones, min(limit, times) in all (the log ring's n_buckets), in chunks; else 0."""
    if g.role != "moving-log" or not g.keyed:
        return 0
    extra = max(g.rings[0].n_buckets - _words.MOVING_INLINE, 0)
    return -(-extra // _words.CHUNK_ENTRIES)


def names_bytes(role: str) -> int:
    """A keyed segment's key names area, just before its index: a moving log's (whose rows
    keep digests), NAME_SLOTS entries; else none."""
    return _words.NAME_SLOTS * _words.NAME_ENTRY_BYTES if role == "moving-log" else 0


def _align_page(n: int) -> int:
    return (n + PAGE_BYTES - 1) // PAGE_BYTES * PAGE_BYTES


@dataclass(frozen=True)
class Layout:
    """Byte offsets derived from a Geometry (never stored independently of it)."""

    locks_off: int
    stripes_off: int
    keys_off: int
    rows_off: int
    row_bytes: int
    n_rows: int
    total_bytes: int
    slot_words: int
    ring_words: tuple[int, ...]  # word offset of each ring's (first) header slot within a row
    head_slots: int = 1  # header slots per slot ring: 2 for a limiter (a log ring's: LOG_HDR_*)
    first_bytes: int = 0  # bytes reserved at creation (keyed: the file past them is sparse)
    chunks_off: int = 0  # role "moving-log": the chunk heap, after the rows (page-aligned)
    n_chunks: int = 0
    count_bytes: tuple[int, ...] = ()  # per ring: bytes of a compact ring's count; 0 = slots
    bins_word: int = 0  # role "distribution": word offset of the bins (ring 0's first bucket's) in a row
    bin_stride: int = 0  # role "distribution": bytes of one bucket's bins (a whole number of words)

    def index_copy(self, index: int, key_slots: int) -> tuple[int, int]:
        """``(offset, entries)`` of index copy ``index`` (= 2 x level + copy)."""
        level, copy = divmod(index, 2)
        offset = self.keys_off + KEY_ENTRY_BYTES * key_slots * (2 * ((1 << level) - 1) + copy * (1 << level))
        return offset, key_slots << level

    @property
    def bucket_words(self) -> tuple[int, ...]:
        """Word offset of each ring's first bucket slot (a compact ring: its first count) within a row."""
        return tuple(
            w + (LIMITER_RING_WORDS if self.compact(i) else self.head_slots * self.slot_words)
            for i, w in enumerate(self.ring_words)
        )

    def compact(self, ring: int) -> bool:
        """Is ring ``ring`` a limiter's compact ring (a header, then counts without epochs)?"""
        return bool(self.count_bytes) and self.count_bytes[ring] > 0

    @property
    def rings_bytes(self) -> int:
        """Bytes of a row after its key header (the part that emptying a row resets)."""
        return self.row_bytes - self.ring_words[0] * WORD_BYTES

    @classmethod
    def plan(cls, g: Geometry) -> Layout:
        locks_off = HEADER_BYTES
        stripes_off = locks_off + g.n_locks * LOCK_BYTES
        n_entries = g.n_stripes + 1 if not g.keyed or g.n_stripes else 0  # keyed: a concurrency's processes
        keys_off = _align64(stripes_off + n_entries * STRIPE_ENTRY_BYTES)
        if g.keyed and g.role == "moving-log":  # its key names (its rows keep digests), reserved at once
            keys_off += names_bytes(g.role)
        # index copies of every level, then the row heap (page-aligned: reserved page by page)
        index_entries = 2 * g.key_slots * ((1 << g.index_levels) - 1)
        rows_off = _align_page(keys_off + index_entries * KEY_ENTRY_BYTES) if g.keyed else keys_off
        slot_words = SLOT_VALUES + len(g.fields)
        head_slots = LIMITER_HEAD_SLOTS if g.kind == "limiter" else WINDOW_HEAD_SLOTS
        ring_words, words = [], _words.key_header_bytes(g.role) // WORD_BYTES if g.keyed else 0
        count_bytes = tuple(_words.ring_count_bytes(g.kind, ring.log, ring.limit) for ring in g.rings)
        for ring, width in zip(g.rings, count_bytes, strict=True):
            ring_words.append(words)
            if width:  # a limiter's compact ring: its header, then its counts, padded to a word
                words += LIMITER_RING_WORDS + -(-ring.n_buckets * width // WORD_BYTES)
            else:
                words += (head_slots + ring.n_buckets) * slot_words
        if g.keyed and g.role in STATE_BYTES:  # limits' per-key state, no ring: the row is its words
            words = ring_words[0] + STATE_BYTES[g.role] // WORD_BYTES
        if g.keyed and g.role == "concurrency":  # a top word, then one holder entry per process
            words = ring_words[0] + state_words(g)
        bins_word, bin_stride = words, 0
        if g.sketch is not None:  # a distribution's bins: every bucket's, after the rings (distribution.c)
            bin_stride = -(-g.sketch.n_bins * _words.DIST_BIN_BYTES // WORD_BYTES) * WORD_BYTES
            words += sum(ring.n_buckets for ring in g.rings) * bin_stride // WORD_BYTES
        # rows are whole cache lines, so that two processes writing two rows never share one
        # (stripes; the keys of a limiter): measured, packed 424-byte limiter rows (format 6) cut two
        # processes' hits on distinct keys to a third. Keyed rows under PACKED_ROW_BYTES are
        # packed (a key costs its words, not a line's): small per-key state, memory first
        row_bytes = words * WORD_BYTES
        if not g.keyed or row_bytes >= PACKED_ROW_BYTES:
            row_bytes = _align64(row_bytes)
        n_rows = g.capacity if g.keyed else g.n_stripes + 1
        total = rows_off + n_rows * row_bytes
        chunks_off = n_chunks = 0
        if chunks_per_key(g):  # the chunk heap: every key's chain at its longest, sparse as the rows
            chunks_off = _align_page(total)
            n_chunks = min(n_rows * chunks_per_key(g), MAX_CHUNKS)
            total = chunks_off + n_chunks * _words.CHUNK_BYTES
        # keyed: the header, locks and level 0's first copy; rows are reserved as handed out
        first = keys_off + g.key_slots * KEY_ENTRY_BYTES if g.keyed else total
        return cls(
            locks_off, stripes_off, keys_off, rows_off, row_bytes, n_rows, total, slot_words,
            tuple(ring_words), head_slots, _align_page(first) if g.keyed else total, chunks_off, n_chunks,
            count_bytes, bins_word if bin_stride else 0, bin_stride,
        )  # fmt: skip


def empty_rings(g: Geometry, lay: Layout) -> bytes:
    """A row's rings as they are when empty (``lay.rings_bytes``; what the core's empty_row
    holds): every slot's epoch and every compact ring's head, zeroed and tail words
    EMPTY_EPOCH, every other word 0."""
    words = [0] * (lay.rings_bytes // WORD_BYTES)
    first = lay.ring_words[0]
    if g.keyed and g.role in STATE_BYTES:  # a counter role's state: its first word EMPTY ("none")
        words[0] = EMPTY_EPOCH
        return struct.pack(f"<{len(words)}q", *words)
    if g.keyed and g.role == "concurrency":  # a top word of 0 and free entries: all 0s
        return struct.pack(f"<{len(words)}q", *words)
    for i, ring in enumerate(g.rings):
        at = lay.ring_words[i] - first
        if lay.compact(i):
            for word in (LIMITER_RING_HEAD, LIMITER_RING_ZEROED, LIMITER_RING_TAIL):
                words[at + word] = EMPTY_EPOCH
            continue
        first_slot = lay.head_slots if ring.log else 0  # a log ring's header (LOG_HDR_*): all 0s
        for s in range(first_slot, lay.head_slots + ring.n_buckets):
            words[at + s * lay.slot_words + SLOT_EPOCH] = EMPTY_EPOCH
    return struct.pack(f"<{len(words)}q", *words)
