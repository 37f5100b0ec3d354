"""The binary format of a segment as data: the one description of every offset and word.

``layout.py`` takes its constants from here, and the native core's
``shmwin/backends/shm/core/layout.h`` is generated from here (``format_c.py``): the two
sides name each word by the same name (``KEY_ROW_GEN``, ``INDEX_ENTRY_HASH``,
``STRIPE_OWNER_PID``...), and ``_core.LAYOUT`` hands back every constant the core was
compiled with, for the tests to compare. The header is committed, and a test holds it fresh;
after a change here, write it anew::

    python shmwin/backends/shm/format_c.py shmwin/backends/shm/core/layout.h

Three files, one description: this one (the header, locks, stripes, key table and rings, the
enumerations, every derived name, ``constants()`` and ``check()``), ``format_rows.py`` (the
per-role row tables; ``format_series.py``, role "series"'s own records) and ``format_c.py``
(the C header). Stdlib only, and nothing imported but
each other and ``shmwin/geometry.py`` (the limits every backend shares; stdlib only itself):
``format_c.py`` run by path loads them without the package's ``__init__``. What each word *means*
is the table at the top of ``layout.py`` (and, for the roles' rows, of ``format_rows.py``).

Names. A record (the header page, a lock, a stripe entry, an index entry, a key row's
header, a ring table entry) is a list of fields ``(name, byte offset, type)``. Each field
``f`` of record ``R`` gets ``R_F_OFF``, its byte offset, and where it starts an 8-byte word
that the core loads or stores as one (an integer at an offset that is a multiple of 8),
``R_F``, the index of that word. The header page's fields are read by name instead, once,
at attach (``header.unpack_header``; the core's ``ShmwinHeader`` struct): only the words
read or written in place afterwards get a constant, ``F_OFF`` (``INDEX_OFF``, ``ROWS_TOP_OFF``).
Types are :mod:`struct` codes (``q`` i64, ``Q`` u64, ``I`` u32, ``Ns`` N bytes), ``mutex``
(a pthread mutex, in the room up to the next field) or ``ring[N]`` (N ring table entries).
"""

from __future__ import annotations

import re
import struct

# The limits and enumerations every backend shares (MAX_FIELDS, ROLES, ...) are geometry's, written
# once there (the neutral layers never import a byte format). The format takes them from it, as its
# own names (constants() and the tests read them here): those its tables use, imported; the rest,
# below the imports, bound from geometry by name.
from ... import geometry as _neutral
from ...geometry import DTYPES, FIELD_NAME_BYTES, KINDS, MAX_CAPACITY, MAX_FIELDS, MAX_RINGS, MODES, ROLES

# The per-role row tables are part of this one description: their names are this module's too
# (the star), and the records this module lists and derives names from are named (the rest).
from .format_rows import *  # noqa: F403
from .format_rows import (
    CACHE_STATE,
    CHUNK,
    CONC_HOLDER,
    CONC_STATE,
    DIST_SLOT,
    FIXED_STATE,
    HALF_WORD_RECORDS,
    LEASE_STATE,
    MOVING_KEY_BYTES,
    MOVING_STATE,
    NAME_ENTRY,
    SEGMENT_PREFIX,
    SLIDING_STATE,
    TOKEN_STATE,
    Field,
)
from .format_series import *  # noqa: F403
from .format_series import SERIES_CELL, SERIES_ENTRY, SERIES_HDR

globals().update({name: getattr(_neutral, name) for name in (
    "MAX_BUCKETS", "MAX_LOG_ENTRIES", "MAX_STRIPES", "MAX_KEY_LOCKS", "INDEX_MIN_SLOTS", "MAX_SPAN_NS",
    "FIRST_KEY_LOCK", "MAX_CONCURRENCY", "CONC_HOLDER_BYTES", "DIST_FIELDS",
)})  # fmt: skip

MAGIC = b"SHMWIN\x00\x00"
FORMAT_VERSION = 12  # each version: CHANGELOG.md's table. 8: one-word moving log entries, compact
# rings; 9: a compact ring's ghost word; 10: live limits (LIVE_WORDS), logs in time order (LOG_HDR_*,
# the 64-byte moving row); 11: a concurrency row's entry per process stripe behind a top word; 12: LOCK.seq

# -- sizes and bounds ---------------------------------------------------------------------

WORD_BYTES = 8
PAGE_BYTES = 4096
HEADER_BYTES = 4096
CRC_START, CRC_END = 32, 1024  # the header bytes covered by header_crc
MAX_PROBES = 256  # index entries a lookup or an insert looks at, at most
MAX_STORED_KEY = 32  # key bytes a row holds; longer keys: a prefix and a digest
KEY_DIGEST_BYTES = 16
KEY_LONG_PREFIX = MAX_STORED_KEY - KEY_DIGEST_BYTES
# a key's hash (SipHash-1-3 under the segment's key) keeps KEY_HASH_BITS, never 0; an index
# entry's place word packs it with the key's row: hash << ENTRY_ROW_BITS | row (capacity fits)
KEY_HASH_BITS = 37  # with the row, 63 bits: a place word is never negative
ENTRY_ROW_BITS = 26
KEY_HASH_MASK = (1 << KEY_HASH_BITS) - 1
ENTRY_ROW_MASK = (1 << ENTRY_ROW_BITS) - 1
# a key row's ident word: hash | stored length << IDENT_LEN_SHIFT | flags << IDENT_FLAGS_SHIFT
IDENT_LEN_SHIFT = 40
IDENT_FLAGS_SHIFT = 48
MAX_GEN = 1 << 62  # a row's or an entry's generation stays below it in size: beyond is junk
MAX_NOW_NS = 1 << 62  # the latest clock reading taken (146 years of uptime)
EMPTY_EPOCH = -(1 << 63)  # a slot never written (or emptied): below every window

# -- flags, kinds and lock numbers ----------------------------------------------------------

RING_LOG = 1  # ring table flags: a limiter ring kept as hit times
KEY_FLAG_STR = 1  # a key row's flags: the key was a str (its UTF-8 is stored) ...
KEY_FLAG_DIGEST = 2  # ... a long key: KEY_LONG_PREFIX bytes, then a 16-byte digest

LOCK_STRIPE_TABLE = 0  # unkeyed: the stripe table
LOCK_KEY_TABLE = 0  # keyed: key insertion, rebuilds, the key table's state words
LOCK_SHARED_ROW = 1  # unkeyed: row 0
LOCK_CHUNKS = 1  # keyed (role "moving-log"): the chunk heap's words and every chain word

# the header's enumerations, by value; C names them KIND_WINDOW, DTYPE_FLOAT64, ...
CLOCKS = ("monotonic", "wall")  # what the writers' clock reads
# what the core answers when a new key meets a full key table (a Core's on_full, by index; the
# same tuple as shmwin.policy.ON_FULL, which tests/unit/test_layout.py holds to it): "raise"
# KeyTableFullError / OutOfSpaceError, "allow" admitted uncounted, "deny" refused. C: ON_FULL_*
ON_FULL = ("raise", "allow", "deny")
FULL_DENY_COUNT = 1 << 62  # on_full="deny"'s count for a fixed window's new key: over any limit
# what shmwin made a segment for, recorded in its header (the tools read it, never guess):
# "" = a plain window or limiter (C: ROLE_PLAIN); see shmwin.inspector.roles
# "fixed-window" and "sliding-counter": keyed windows whose rows hold limits' per-key state
# (FIXED_STATE, SLIDING_STATE below) instead of buckets; "fixed-starts" is read, no longer made;
# "decisions": a limiter's NAME.decisions (shmwin.front);
# "moving-log": limits' moving window, each key's hit times (MOVING_STATE, CHUNK below);
# "concurrency": keyed rows of holder entries (CONC_STATE) and a stripe table of processes;
# "token-bucket": a keyed window whose rows hold a TokenBucket's per-key state (TOKEN_STATE)
# "lease": a two-tier (shm+redis://) limiter's host tier: each key's row holds the lease of hits
# the host took from Redis (LEASE_STATE below), spent by every worker of the host;
# 14 "distribution": shmwin.Distribution, a locked window whose slots are DIST_SLOT and whose rows
# end with each bucket's bins (core/distribution.c; the header's sketch words say which bins);
# 15 "series": prometheus_client's values of one app (core/series.c, SERIES_* below): a segment
# of its own layout, with no rings, rows or key table; 16 "counter-cache": Django's counters (CACHE_STATE)
COUNTER_ROLES = ("fixed-window", "sliding-counter", "moving-log", "token-bucket", "lease")
STATE_ROLES = (*COUNTER_ROLES, "concurrency", "counter-cache")  # rows of state, not of buckets

# -- slots: a ring is head_slots + n_buckets slots of 1 + n_fields words ---------------------

SLOT_EPOCH = 0  # word 0 of a slot: its bucket's epoch (EMPTY_EPOCH if none) ...
SLOT_VALUES = 1  # ... then one word per field
WINDOW_HEAD_SLOTS = 1  # a window's ring: one header slot
LIMITER_HEAD_SLOTS = 2  # a limiter's ring: (head epoch, running totals), (tail epoch, -)
RING_HEAD_SLOT = 0
RING_TAIL_SLOT = 1
# a limiter's bucket ring (not a log ring) is compact: a LIMITER_RING header, then n counts
# without epochs, COUNT32_BYTES each when its limit fits COUNT32_MAX, else WORD_BYTES each,
# padded to a whole word (see ring_count_bytes)
COUNT32_BYTES = 4
COUNT32_MAX = (1 << 31) - 1

# -- records ------------------------------------------------------------------------------------

RING_ENTRY: tuple[Field, ...] = (
    ("bucket_ns", 0, "q"),  # a log ring: the period
    ("n_buckets", 8, "I"),  # a log ring: its entries
    ("flags", 12, "I"),  # RING_LOG
    ("limit", 16, "q"),
)
RING_ENTRY_BYTES = 24

HEADER: tuple[Field, ...] = (
    *SEGMENT_PREFIX,
    ("header_crc", 24, "I"),
    ("reserved", 28, "I"),
    ("n_rings", 32, "I"),
    ("kind", 36, "I"),
    ("n_fields", 40, "I"),
    ("dtype", 44, "I"),
    ("mode", 48, "I"),
    ("n_stripes", 52, "I"),
    ("n_locks", 56, "I"),
    ("capacity", 60, "I"),
    ("key_slots", 64, "I"),
    ("clock", 68, "I"),
    ("creator_pid", 72, "q"),
    ("created_real_ns", 80, "q"),
    ("created_mono_ns", 88, "q"),
    ("boot_id", 96, "16s"),
    ("locks_off", 112, "Q"),
    ("stripes_off", 120, "Q"),
    ("keys_off", 128, "Q"),
    ("rows_off", 136, "Q"),
    ("row_bytes", 144, "Q"),
    ("hash_key", 152, "16s"),
    ("role", 168, "I"),
    ("chunks_off", 176, "Q"),  # role "moving-log": the chunk heap, after the rows; else 0
    ("n_chunks", 184, "Q"),  # its chunks (the file is sparse: reserved as handed out)
    # role "distribution": its bins per bucket (DIST_FIRST_LOG_BIN + log bins), its relative
    # error and value range (IEEE-754 doubles' bits); 0 for every other role
    ("sketch_bins", 192, "I"),
    ("sketch_error", 200, "Q"),
    ("sketch_low", 208, "Q"),
    ("sketch_high", 216, "Q"),
    ("field_names", 256, f"{MAX_FIELDS * FIELD_NAME_BYTES}s"),
    ("ring_table", 768, f"ring[{MAX_RINGS}]"),
    ("rows_in_use", 1024, "q"),
    # the key table's state (keyed), written under LOCK_KEY_TABLE; index, rows_top and
    # rows_reserved are checked words (value | tag << 32)
    ("index", 1032, "Q"),
    ("index_used", 1040, "q"),
    ("keys", 1048, "q"),
    ("rows_top", 1056, "Q"),
    ("rows_reserved", 1064, "Q"),
    ("free_head", 1072, "q"),
    ("rebuilt_ns", 1080, "q"),
    # requests that met a full table (no row for a new key: capacity or /dev/shm), whatever
    # on_full then answered; added to atomically, outside any lock
    ("full_count", 1088, "q"),
    # the chunk heap's state (role "moving-log"), written under LOCK_CHUNKS; chunks_top and
    # chunks_reserved are checked words, as rows_top and rows_reserved
    ("chunks_top", 1096, "Q"),
    ("chunks_reserved", 1104, "Q"),
    ("chunk_free", 1112, "q"),
    *LIVE_WORDS,  # noqa: F405  (the star's: a limiter's live limits, format_rows.py)
)
FIXED_HEADER_END = 192  # magic .. n_chunks: the fields packed and unpacked as one struct
# the header words read or written in place (not just at attach): each gets F_OFF
HEADER_WORDS = ("magic", "header_crc", "field_names", "ring_table", "rows_in_use", "index",
                "index_used", "keys", "rows_top", "rows_reserved", "free_head", "rebuilt_ns",
                "full_count", "chunks_top", "chunks_reserved", "chunk_free", "sketch_bins", "sketch_error",
                "sketch_low", "sketch_high", "live_gen", "live_changed_ns", "live_limits")  # fmt: skip

LOCK: tuple[Field, ...] = (
    ("mutex", 0, "mutex"),  # process-shared, robust
    ("seq", 48, "q"),  # odd while a section changes a fixed window's row in place (core.h seq_at)
    ("intent", 56, "q"),  # the row (lock 0 of a keyed window: index entry) a section works on, -1
)
LOCK_BYTES = 64

STRIPE: tuple[Field, ...] = (
    ("owner", 0, "q"),  # pid of the process writing the row, 0 = free
    ("owner_start", 8, "q"),  # its start time in clock ticks (/proc stat field 22)
    ("owner_pid", 16, "q"),  # for display
    ("claimed_ns", 24, "q"),
    ("claims", 32, "q"),  # a keyed segment's (role "concurrency"): claims so far, the claim's generation
    ("mutex", 64, "mutex"),  # the liveness mutex, held by the owner's keeper thread
)
STRIPE_ENTRY_BYTES = 128

INDEX_ENTRY: tuple[Field, ...] = (
    ("gen", 0, "q"),  # 0 never used, > 0 published, < 0 being written
    ("place", 8, "Q"),  # hash << ENTRY_ROW_BITS | row; hash 0: a tombstone
)
KEY_ENTRY_BYTES = 16
INDEX_ENTRY_WORDS = KEY_ENTRY_BYTES // WORD_BYTES

KEY_ROW: tuple[Field, ...] = (  # a keyed row's key header
    ("gen", 0, "q"),  # > 0 holds a key (free: ident 0), < 0 being (re)assigned, 0 never used
    ("last_ns", 8, "q"),  # the key's newest write; on the free list: the next free row + 1
    ("ident", 16, "Q"),  # hash | len << IDENT_LEN_SHIFT | flags << IDENT_FLAGS_SHIFT; 0 = no key
    ("key", 24, f"{MAX_STORED_KEY}s"),  # NUL-padded
)
KEY_HEADER_BYTES = 56

# A limiter's compact ring's header (see "Limiter rings" in layout.py), then its counts.
LIMITER_RING: tuple[Field, ...] = (
    ("head", 0, "q"),  # the newest epoch counted in; EMPTY_EPOCH: none (every count is 0)
    ("total", 8, "q"),  # running total of the clean counts (derived)
    ("zeroed", 16, "q"),  # the counts of epochs in (head - n, zeroed] are clean (are theirs)
    ("tail", 24, "q"),  # a lower bound on the oldest clean epoch holding hits (derived), EMPTY: none
    # the hits the head's moves dropped, kept for a clock behind the head (core/rings.c, "ghost"):
    # newest dropped epoch mod 2**32 << GHOST_EPOCH_SHIFT | hits (GHOST_HITS_MAX: the limit or more)
    ("ghost", 32, "q"),
)
LIMITER_RING_BYTES = 40
LIMITER_RING_WORDS = LIMITER_RING_BYTES // WORD_BYTES
GHOST_EPOCH_SHIFT = 32
GHOST_HITS_MAX = (1 << 32) - 1

def key_header_bytes(role: str) -> int:
    """A keyed row's key header: its words, then the stored key (a moving log's: a digest)."""
    return KEY_HEADER_BYTES - MAX_STORED_KEY + (MOVING_KEY_BYTES if role == "moving-log" else MAX_STORED_KEY)


# record prefix -> (fields, the name of its size); the header page is read by name (see above)
RECORDS: dict[str, tuple[tuple[Field, ...], str]] = {
    "LOCK": (LOCK, "LOCK_BYTES"),
    "STRIPE": (STRIPE, "STRIPE_ENTRY_BYTES"),
    "INDEX_ENTRY": (INDEX_ENTRY, "KEY_ENTRY_BYTES"),
    "KEY_ROW": (KEY_ROW, "KEY_HEADER_BYTES"),
    "LIMITER_RING": (LIMITER_RING, "LIMITER_RING_BYTES"),
    "RING_ENTRY": (RING_ENTRY, "RING_ENTRY_BYTES"),
    "FIXED_STATE": (FIXED_STATE, "FIXED_STATE_BYTES"),
    "SLIDING_STATE": (SLIDING_STATE, "SLIDING_STATE_BYTES"),
    "CONC_STATE": (CONC_STATE, "CONC_STATE_BYTES"),
    "CONC_HOLDER": (CONC_HOLDER, "CONC_HOLDER_BYTES"),
    "TOKEN_STATE": (TOKEN_STATE, "TOKEN_STATE_BYTES"),
    "MOVING_STATE": (MOVING_STATE, "MOVING_STATE_BYTES"),
    "NAME_ENTRY": (NAME_ENTRY, "NAME_ENTRY_BYTES"),
    "CHUNK": (CHUNK, "CHUNK_BYTES"),
    "LEASE_STATE": (LEASE_STATE, "LEASE_STATE_BYTES"),
    "DIST_SLOT": (DIST_SLOT, "DIST_SLOT_BYTES"), "CACHE_STATE": (CACHE_STATE, "CACHE_STATE_BYTES"),
}

# role "series" (format_series.py): its own header page and records, listed here as the others
RECORDS["SERIES_HDR"] = (SERIES_HDR, "SERIES_HDR_BYTES")
RECORDS["SERIES_ENTRY"] = (SERIES_ENTRY, "SERIES_ENTRY_BYTES")
RECORDS["SERIES_CELL"] = (SERIES_CELL, "SERIES_CELL_BYTES")


def ring_count_bytes(kind: str, log: bool, limit: int) -> int:
    """Bytes of one count of a compact ring (a limiter's bucket ring); 0: a ring of slots (a
    window's ring, a log ring). A limiter's bucket never holds more than its ring's limit
    (hit_row counts only what fits), so a limit <= COUNT32_MAX keeps 4-byte counts."""
    if kind != "limiter" or log:
        return 0
    return COUNT32_BYTES if limit <= COUNT32_MAX else WORD_BYTES


def _at(fields: tuple[Field, ...], name: str) -> int:
    """The byte offset of field ``name``."""
    return next(offset for field, offset, _ in fields if field == name)


def _offsets(fields: tuple[Field, ...], *names: str) -> tuple[int, ...]:
    """``R_F_OFF`` for each field ``F`` named: its byte offset in record ``R``."""
    return tuple(_at(fields, name) for name in names)


def _words(fields: tuple[Field, ...], *names: str) -> tuple[int, ...]:
    """``R_F`` for each field ``F`` named: the index of the 8-byte word it starts."""
    return tuple(_at(fields, name) // WORD_BYTES for name in names)


# -- every name, as a module attribute too (check() holds them to constants()) ---------------

DTYPE_INT64, DTYPE_FLOAT64 = DTYPES.index("int64"), DTYPES.index("float64")
MODE_STRIPED, MODE_LOCKED = MODES.index("striped"), MODES.index("locked")
KIND_WINDOW, KIND_LIMITER = KINDS.index("window"), KINDS.index("limiter")
CLOCK_KIND_MONOTONIC, CLOCK_KIND_WALL = CLOCKS.index("monotonic"), CLOCKS.index("wall")
ROLE_PLAIN, ROLE_FIXED_STARTS = ROLES.index(""), ROLES.index("fixed-starts")
ROLE_BREAKER, ROLE_SHEDDER = ROLES.index("breaker"), ROLES.index("shedder")
ROLE_IN_FLIGHT, ROLE_ADAPTIVE = ROLES.index("in-flight"), ROLES.index("adaptive")
ROLE_HEALTH, ROLE_DECISIONS = ROLES.index("health"), ROLES.index("decisions")
ROLE_FIXED_WINDOW, ROLE_SLIDING_COUNTER = ROLES.index("fixed-window"), ROLES.index("sliding-counter")
ROLE_CONCURRENCY = ROLES.index("concurrency")
ROLE_TOKEN_BUCKET = ROLES.index("token-bucket")
ROLE_MOVING_LOG = ROLES.index("moving-log")
ROLE_LEASE, ROLE_COUNTER_CACHE = ROLES.index("lease"), ROLES.index("counter-cache")
ROLE_DISTRIBUTION, ROLE_SERIES = ROLES.index("distribution"), ROLES.index("series")
ON_FULL_RAISE, ON_FULL_ALLOW = ON_FULL.index("raise"), ON_FULL.index("allow")
ON_FULL_DENY = ON_FULL.index("deny")

(
    MAGIC_OFF, HEADER_CRC_OFF, FIELD_NAMES_OFF, RING_TABLE_OFF, ROWS_IN_USE_OFF, INDEX_OFF, INDEX_USED_OFF,
    KEYS_OFF, ROWS_TOP_OFF, ROWS_RESERVED_OFF, FREE_HEAD_OFF, REBUILT_NS_OFF, FULL_COUNT_OFF, CHUNKS_TOP_OFF,
    CHUNKS_RESERVED_OFF, CHUNK_FREE_OFF, LIVE_GEN_OFF, LIVE_CHANGED_NS_OFF, LIVE_LIMITS_OFF,
) = _offsets(
    HEADER,
    "magic", "header_crc", "field_names", "ring_table", "rows_in_use", "index", "index_used", "keys",
    "rows_top", "rows_reserved", "free_head", "rebuilt_ns", "full_count", "chunks_top",
    "chunks_reserved", "chunk_free", "live_gen", "live_changed_ns", "live_limits",
)
SKETCH_BINS_OFF, SKETCH_ERROR_OFF, SKETCH_LOW_OFF, SKETCH_HIGH_OFF = _offsets(
    HEADER, "sketch_bins", "sketch_error", "sketch_low", "sketch_high"
)
# value | tag << 32 (header.state_word)
CHECKED_WORDS = (INDEX_OFF, ROWS_TOP_OFF, ROWS_RESERVED_OFF, CHUNKS_TOP_OFF, CHUNKS_RESERVED_OFF)

LOCK_MUTEX_OFF, LOCK_SEQ_OFF, LOCK_INTENT_OFF = _offsets(LOCK, "mutex", "seq", "intent")
LOCK_INTENT = _at(LOCK, "intent") // WORD_BYTES
LOCK_SEQ = _at(LOCK, "seq") // WORD_BYTES

(
    STRIPE_OWNER_OFF, STRIPE_OWNER_START_OFF, STRIPE_OWNER_PID_OFF, STRIPE_CLAIMED_NS_OFF, STRIPE_CLAIMS_OFF,
    STRIPE_MUTEX_OFF,
) = _offsets(STRIPE, "owner", "owner_start", "owner_pid", "claimed_ns", "claims", "mutex")
(
    STRIPE_OWNER, STRIPE_OWNER_START, STRIPE_OWNER_PID, STRIPE_CLAIMED_NS, STRIPE_CLAIMS,
) = _words(STRIPE, "owner", "owner_start", "owner_pid", "claimed_ns", "claims")

INDEX_ENTRY_GEN_OFF, INDEX_ENTRY_PLACE_OFF = _offsets(INDEX_ENTRY, "gen", "place")
INDEX_ENTRY_GEN, INDEX_ENTRY_PLACE = _words(INDEX_ENTRY, "gen", "place")

(
    KEY_ROW_GEN_OFF, KEY_ROW_LAST_NS_OFF, KEY_ROW_IDENT_OFF, KEY_ROW_KEY_OFF,
) = _offsets(KEY_ROW, "gen", "last_ns", "ident", "key")
KEY_ROW_GEN, KEY_ROW_LAST_NS, KEY_ROW_IDENT = _words(KEY_ROW, "gen", "last_ns", "ident")

(
    LIMITER_RING_HEAD_OFF, LIMITER_RING_TOTAL_OFF, LIMITER_RING_ZEROED_OFF, LIMITER_RING_TAIL_OFF,
    LIMITER_RING_GHOST_OFF,
) = _offsets(LIMITER_RING, "head", "total", "zeroed", "tail", "ghost")
(
    LIMITER_RING_HEAD, LIMITER_RING_TOTAL, LIMITER_RING_ZEROED, LIMITER_RING_TAIL, LIMITER_RING_GHOST,
) = _words(LIMITER_RING, "head", "total", "zeroed", "tail", "ghost")

(
    RING_ENTRY_BUCKET_NS_OFF, RING_ENTRY_N_BUCKETS_OFF, RING_ENTRY_FLAGS_OFF, RING_ENTRY_LIMIT_OFF,
) = _offsets(RING_ENTRY, "bucket_ns", "n_buckets", "flags", "limit")
(
    RING_ENTRY_BUCKET_NS, RING_ENTRY_N_BUCKETS, RING_ENTRY_LIMIT,
) = _words(RING_ENTRY, "bucket_ns", "n_buckets", "limit")
# the word holding n_buckets | flags << 32: RING_ENTRY_N_BUCKETS

FIXED_STATE_START_OFF, FIXED_STATE_COUNT_OFF = _offsets(FIXED_STATE, "start", "count")
FIXED_STATE_START, FIXED_STATE_COUNT = _words(FIXED_STATE, "start", "count")

(
    SLIDING_STATE_WINDOW_OFF, SLIDING_STATE_CURRENT_OFF, SLIDING_STATE_PREVIOUS_OFF,
) = _offsets(SLIDING_STATE, "window", "current", "previous")
(
    SLIDING_STATE_WINDOW, SLIDING_STATE_CURRENT, SLIDING_STATE_PREVIOUS,
) = _words(SLIDING_STATE, "window", "current", "previous")

CONC_STATE_TOP_OFF = _at(CONC_STATE, "top")
CONC_STATE_TOP = _at(CONC_STATE, "top") // WORD_BYTES

CONC_HOLDER_STRIPE_OFF, CONC_HOLDER_CLAIM_OFF = _offsets(CONC_HOLDER, "stripe", "claim")
CONC_HOLDER_STRIPE, CONC_HOLDER_CLAIM = _words(CONC_HOLDER, "stripe", "claim")

TOKEN_STATE_TAT_OFF = _at(TOKEN_STATE, "tat")
TOKEN_STATE_TAT = _at(TOKEN_STATE, "tat") // WORD_BYTES

MOVING_STATE_CHAIN_OFF, MOVING_STATE_RUN_OFF, MOVING_STATE_ENTRIES_OFF = (at for _, at, _ in MOVING_STATE)
MOVING_STATE_CHAIN, MOVING_STATE_RUN = _words(MOVING_STATE, "chain", "run")

CHUNK_NEXT_OFF, CHUNK_OWNER_OFF, CHUNK_ENTRIES_OFF = _offsets(CHUNK, "next", "owner", "entries")

(
    NAME_ENTRY_GEN_OFF, NAME_ENTRY_ROW_OFF, NAME_ENTRY_LEN_OFF, NAME_ENTRY_NAME_OFF,
) = _offsets(NAME_ENTRY, "gen", "row", "len", "name")

(
    LEASE_STATE_LEASE_OFF, LEASE_STATE_GRANTED_OFF, LEASE_STATE_SPENT_OFF, LEASE_STATE_DEADLINE_NS_OFF,
    LEASE_STATE_START_NS_OFF, LEASE_STATE_GRANT_US_OFF, LEASE_STATE_LAST_NS_OFF, LEASE_STATE_DENY_NS_OFF,
    LEASE_STATE_SERVED_OFF, LEASE_STATE_LEASES_OFF, LEASE_STATE_REFUSALS_OFF,
) = _offsets(
    LEASE_STATE,
    "lease", "granted", "spent", "deadline_ns", "start_ns", "grant_us", "last_ns", "deny_ns", "served",
    "leases", "refusals",
)
(
    LEASE_STATE_LEASE, LEASE_STATE_GRANTED, LEASE_STATE_SPENT, LEASE_STATE_DEADLINE_NS, LEASE_STATE_START_NS,
    LEASE_STATE_GRANT_US, LEASE_STATE_LAST_NS, LEASE_STATE_DENY_NS, LEASE_STATE_SERVED, LEASE_STATE_LEASES,
    LEASE_STATE_REFUSALS,
) = _words(
    LEASE_STATE,
    "lease", "granted", "spent", "deadline_ns", "start_ns", "grant_us", "last_ns", "deny_ns", "served",
    "leases", "refusals",
)

(
    DIST_SLOT_EPOCH_OFF, DIST_SLOT_COUNT_OFF, DIST_SLOT_SUM_OFF, DIST_SLOT_MIN_OFF, DIST_SLOT_MAX_OFF,
) = _offsets(DIST_SLOT, "epoch", "count", "sum", "min", "max")
(
    DIST_SLOT_EPOCH, DIST_SLOT_COUNT, DIST_SLOT_SUM, DIST_SLOT_MIN, DIST_SLOT_MAX,
) = _words(DIST_SLOT, "epoch", "count", "sum", "min", "max")

_SIZES = {"q": 8, "Q": 8, "I": 4}
_ENUMS = {"DTYPE": DTYPES, "MODE": MODES, "KIND": KINDS, "CLOCK_KIND": CLOCKS, "ROLE": ROLES,
          "ON_FULL": ON_FULL}  # fmt: skip
_SCALARS = (
    "FORMAT_VERSION", "WORD_BYTES", "PAGE_BYTES", "HEADER_BYTES", "CRC_START", "CRC_END",
    "MAX_FIELDS", "FIELD_NAME_BYTES", "MAX_RINGS", "MAX_BUCKETS", "MAX_LOG_ENTRIES", "MAX_STRIPES",
    "MAX_CAPACITY", "MAX_KEY_LOCKS", "INDEX_MIN_SLOTS", "MAX_PROBES", "MAX_STORED_KEY",
    "KEY_DIGEST_BYTES", "KEY_LONG_PREFIX", "KEY_HASH_BITS", "ENTRY_ROW_BITS", "KEY_HASH_MASK",
    "ENTRY_ROW_MASK", "IDENT_LEN_SHIFT", "IDENT_FLAGS_SHIFT", "MAX_GEN", "MAX_NOW_NS", "MAX_SPAN_NS",
    "EMPTY_EPOCH", "FULL_DENY_COUNT",
    "RING_LOG", "LIVE_MOVED", "KEY_FLAG_STR", "KEY_FLAG_DIGEST", "LOCK_STRIPE_TABLE", "LOCK_KEY_TABLE",
    "LOCK_SHARED_ROW", "LOCK_CHUNKS", "FIRST_KEY_LOCK", "SLOT_EPOCH", "SLOT_VALUES", "WINDOW_HEAD_SLOTS",
    "LIMITER_HEAD_SLOTS", "RING_HEAD_SLOT", "RING_TAIL_SLOT", "LOG_TIME", "LOG_HITS",
    "LOG_HDR_POS", "LOG_HDR_TOTAL", "LOG_HDR_DEAD_TIME", "LOG_HDR_DEAD_HITS", "LOG_HDR_WORDS",
    "RING_ENTRY_BYTES", "LOCK_BYTES", "STRIPE_ENTRY_BYTES", "KEY_ENTRY_BYTES", "INDEX_ENTRY_WORDS",
    "KEY_HEADER_BYTES", "FIXED_HEADER_END", "FIXED_STATE_BYTES", "SLIDING_STATE_BYTES",
    "CONC_STATE_BYTES", "CONC_HOLDER_BYTES", "MAX_CONCURRENCY", "TOKEN_STATE_BYTES",
    "MOVING_INLINE", "MOVING_ENTRY_BYTES", "MOVING_STAMP_SHIFT", "MOVING_HITS_MAX", "MOVING_SPAN_BITS",
    "MOVING_MIN_SHIFT", "MOVING_LINK_BITS", "MOVING_LINK_MASK", "MOVING_LAST_SHIFT", "MOVING_TAIL_SHIFT",
    "MOVING_KEY_BYTES", "MOVING_STATE_BYTES", "CHUNK_ENTRIES", "CHUNK_BYTES", "NAME_SLOTS", "NAME_PROBES",
    "NAME_MAX_BYTES", "NAME_ENTRY_BYTES", "MOVING_INLINE_SHIFT", "MOVING_RUN_CHUNKS_SHIFT",
    "LIMITER_RING_BYTES", "LIMITER_RING_WORDS", "GHOST_EPOCH_SHIFT", "GHOST_HITS_MAX", "COUNT32_BYTES",
    "COUNT32_MAX", "LEASE_STATE_BYTES", "CACHE_STATE_BYTES",
    "DIST_SLOT_BYTES", "DIST_BIN_BYTES", "DIST_BIN_MAX", "DIST_BIN_ZERO", "DIST_BIN_UNDER", "DIST_BIN_OVER",
    "DIST_FIRST_LOG_BIN", "DIST_MAX_BINS",
    "SERIES_HDR_BYTES", "SERIES_ENTRY_BYTES", "SERIES_CELL_BYTES", "SERIES_SHARED", "SERIES_LIFETIME",
    "SERIES_META", "SERIES_DROPPED", "SERIES_LOCK_DIR", "SERIES_MAX_KEY", "SERIES_MAX", "SERIES_INDEX_MIN",
)  # fmt: skip


def size_of(kind: str) -> int | None:
    """Bytes of a field type (None: a mutex, whose room is up to the next field)."""
    if kind in _SIZES:
        return _SIZES[kind]
    if kind.endswith("s"):
        return int(kind[:-1])
    ring = re.fullmatch(r"ring\[(\d+)\]", kind)
    if ring:
        return int(ring.group(1)) * RING_ENTRY_BYTES
    if kind == "mutex":
        return None
    raise ValueError(f"unknown field type {kind!r}")


def _word_field(offset: int, kind: str) -> bool:
    """Does the field start a word the core loads or stores as one (an aligned integer)?"""
    return kind in _SIZES and offset % WORD_BYTES == 0


def constants() -> dict[str, int]:
    """Every named constant of the format, as C and Python both name it."""
    out = {name: int(globals()[name]) for name in _SCALARS}
    for prefix, values in _ENUMS.items():
        for i, value in enumerate(values):
            out[f"{prefix}_{re.sub(r'[^A-Z0-9]', '_', value.upper()) or 'PLAIN'}"] = i
    for name in HEADER_WORDS:
        out[f"{name.upper()}_OFF"] = _at(HEADER, name)
    for prefix, (fields, _size_name) in RECORDS.items():
        for name, offset, kind in fields:
            if name == "reserved":
                continue
            out[f"{prefix}_{name.upper()}_OFF"] = offset
            if _word_field(offset, kind) and prefix not in HALF_WORD_RECORDS:
                out[f"{prefix}_{name.upper()}"] = offset // WORD_BYTES
    return out


def fixed_struct() -> struct.Struct:
    """The header's fixed part (magic .. role) as one struct, gaps padded: little-endian."""
    code, at = "<", 0
    for _name, offset, kind in HEADER:
        if offset >= FIXED_HEADER_END:
            break
        code += "x" * (offset - at) + kind
        at = offset + (size_of(kind) or 0)
    assert at == FIXED_HEADER_END
    return struct.Struct(code)


def fixed_names() -> tuple[str, ...]:
    """The names of :func:`fixed_struct`'s values, in order."""
    return tuple(name for name, offset, _ in HEADER if offset < FIXED_HEADER_END)


def ring_struct() -> struct.Struct:
    """A ring table entry as a struct."""
    code, at = "<", 0
    for _name, offset, kind in RING_ENTRY:
        code += "x" * (offset - at) + kind
        at = offset + (size_of(kind) or 0)
    return struct.Struct(code + "x" * (RING_ENTRY_BYTES - at))


def check() -> list[str]:
    """What is wrong with the description (tests assert: nothing): fields in order, none
    overlapping another or passing its record, the checked words among the header words."""
    problems = []
    sized = [(prefix, fields, int(globals()[size])) for prefix, (fields, size) in RECORDS.items()]
    for prefix, fields, size in [*sized, ("HEADER", HEADER, HEADER_BYTES)]:
        for i, (name, offset, kind) in enumerate(fields):
            end = fields[i + 1][1] if i + 1 < len(fields) else size
            need = size_of(kind)
            if offset < 0 or offset + (need or 1) > end:
                problems.append(f"{prefix}.{name} at {offset} does not fit before {end}")
            if need is not None and kind in _SIZES and offset % need:
                problems.append(f"{prefix}.{name} at {offset} is not aligned")
    for name, value in constants().items():
        if globals().get(name) != value:
            problems.append(f"{name} is not a module attribute of the value the tables give it ({value})")
    if KEY_LONG_PREFIX + KEY_DIGEST_BYTES != MAX_STORED_KEY:
        problems.append("a long key's prefix and digest do not fill the stored key")
    if {n: o for n, o, _ in KEY_ROW}["key"] + MAX_STORED_KEY != KEY_HEADER_BYTES:
        problems.append("a key row's key bytes do not end its header")
    if MAX_CAPACITY > ENTRY_ROW_MASK + 1 or KEY_HASH_BITS + ENTRY_ROW_BITS > 63:
        problems.append("an index entry's place word does not hold a row and a hash")
    problems += _neutral_misfits()
    if KEY_HASH_BITS > IDENT_LEN_SHIFT or MAX_STORED_KEY >= 1 << (IDENT_FLAGS_SHIFT - IDENT_LEN_SHIFT):
        problems.append("a key row's ident word does not hold a hash, a length and flags")
    return problems


# What the backend-neutral layers (which never import this module) define that this format must
# hold, word for word, beside what it imports from geometry (MAX_FIELDS ... ROLES, above).
_NEUTRAL = {"shmwin.clock": ("MAX_NOW_NS",), "shmwin.geometry": ("EMPTY_EPOCH",)}


def _neutral_misfits() -> list[str]:
    """Each limit the neutral layers hold that this format does not hold as the same value (run
    by path with no package importable: nothing to compare, and the build still writes its header)."""
    import importlib

    problems = []
    for module_name, names in _NEUTRAL.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            return []
        for name in names:
            if getattr(module, name, None) != globals()[name]:
                mine = globals()[name]
                problems.append(f"{module_name}.{name} does not fit the format's {name} ({mine!r})")
    return problems
