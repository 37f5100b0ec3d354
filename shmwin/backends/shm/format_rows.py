"""The per-role row tables of the format: what a keyed row holds after its key header for each
role whose rows hold state (``format.STATE_ROLES``), and a moving log's chunk heap and key names.

Part of the one description: ``format.py`` lists these records in its ``RECORDS`` and derives
their ``R_F`` names, and the core's ``layout.h`` is generated from both (``format_c.py``). Stdlib
only, importing nothing: the format is loaded without the package when ``layout.h`` is written.
The segment's other parts (header, locks, stripes, key table, rings) are drawn in ``layout.py``.

Counter rows (roles "fixed-window" and "sliding-counter", limits' strategies on ``shm://``):
a keyed window of one ring of 1 (fixed) or 2 (sliding) buckets of the period P, whose rows
hold state instead, right after the key header (``core/counters.c``; EMPTY_EPOCH in word 0
of an emptied row: no state). A fixed window's (FIXED_STATE)::

    off  size type  name      meaning
    0    8    i64   start     the live window's start (ns, the storage's clock); it ends at start + P
    8    8    i64   count     its hits

A sliding counter's (SLIDING_STATE)::

    off  size type  name      meaning
    0    8    i64   window    the index (now // P) of the window "current" counts
    8    8    i64   current   hits in that window
    16   8    i64   previous  hits in the window before it

A token bucket's (TOKEN_STATE, role "token-bucket", ``shmwin.TokenBucket``): a keyed window of
one ring of ``burst`` buckets of the emission interval T = ceil(period / limit) ns, limit the
rate's limit; the span burst x T is the key's idle time (its bucket is full again by then)::

    off  size type  name      meaning
    0    8    i64   tat       the theoretical arrival time (GCRA, ns): the bucket holds
                              (now - tat + burst x T) // T tokens; EMPTY_EPOCH: full

Concurrency rows (role "concurrency", ``shmwin.Concurrency``; ``core/concurrency.c``): a keyed
window of one ring of 1 bucket, whose width is a key's idle time and whose limit is the
concurrency limit L (1..MAX_CONCURRENCY) as created (live limits: the header's live words
once changed, as a limiter's); after the key header, a top word (CONC_STATE), then one holder
entry (CONC_HOLDER) per process stripe (n_stripes): an entry is one process's slots of the key,
so a row has room for every holder there can be, whatever the limit (format 11; 10 had L
entries, and a limit could not change). An entry counts while its stripe's claims word is the
claim it names and the stripe's liveness mutex is held: a dead holder's slots stop counting
when the kernel marks its mutex owner-dead. A key with a live holder is never idle::

    off  size type  name      meaning
    0    8    i64   top       entries from this one on are all free (0 in an emptied row);
                              junk (< 0, > n_stripes): every entry is looked at

and each holder entry (16 bytes, entry *i* at 8 + 16 *i*)::

    off  size type  name      meaning
    0    8    i64   stripe    the holder's stripe r (1..n_stripes) | its slots << 32; 0 = free
    8    8    i64   claim     that stripe's claims word when the holder took it

A moving log's (role "moving-log", limits' moving window: ``core/moving.c``; one log ring in
the header: the period P, n = min(limit, times) entries a key at most, the limit, at most
MOVING_HITS_MAX). Its key header stores an 8-byte keyed digest of the key, not the key
(MOVING_KEY_BYTES: a 32-byte key header). Each entry is one word, stamp << 32 | hits: the
stamp is the hit's time rounded up to the quantum q = 2**moving_quantum_shift(P) ns, modulo
2**32, read back against the row's last write (every entry holding hits lies within P of it);
counted while hits > 0 and t >= now - P. A key's entries are one run in time order: from
entry `tail` of its oldest chunk through its chain (oldest to newest; every chunk whole but
the oldest) to its newest chunk, then `inline` entries of the row; a call walks it from the
oldest end only past what stopped counting. A row of 64 bytes::

    off  size type  name      meaning
    0    8    i64   chain     the run's shape: oldest chunk + 1 | newest chunk + 1 << 29 |
                              tail << 58 | inline << 60 (0: no entry); one store changes it
    8    8    i64   run       derived: the run's hits (running total, low 32 bits) | its chunks << 32
    16   16   u64[] entries   MOVING_INLINE (2) entries

Key names (role "moving-log", whose rows keep digests): NAME_SLOTS (512) entries of 64 bytes
just before the index (``keys_off - 512 x 64``), reserved with the header; the core names a
key when it inserts it (after the section "insert", under LOCK_KEY_TABLE: a display hint in
no invariant), in a free or stale entry among 4 from the key's hash; the tools take a name
only if the entry's generation reads the same before and after and is the row's own::

    off  size type  name      meaning
    0    8    i64   gen       the named row's generation; 0 = free (or being written)
    8    4    u32   row
    12   4    u32   len       name bytes (<= 48) | key flags << 16 | cut << 24
    16   48   bytes name      the key's first bytes (UTF-8 for a str)

Chunk heap (role "moving-log"): ``n_chunks`` chunks of 32 bytes from ``chunks_off``, sparse
like the rows (reserved as handed out, ``chunks_top``); a chunk is on the free list, in one
key's chain (oldest first), or -- inside a section -- in neither; chain words change only
under LOCK_CHUNKS (lock 1, taken after a row lock), entries under their key's row lock::

    off  size type  name      meaning
    0    4    u32   next      the next chunk of its chain (or of the free list) + 1; 0 = last
    4    4    u32   owner     the row whose chain holds it + 1; 0 = free
    8    24   u64[] entries   CHUNK_ENTRIES (3) entries

Lease rows (role "lease", the host tier of ``backend="shm+redis://..."``: ``core/lease.c``,
``shmwin.backends.twotier``): a keyed window of one ring of one bucket of the longest period P
(the key's idle time; its limit the tightest rate's). After the key header, LEASE_STATE, the
lease of hits the host holds from Redis and what its workers spent of it (88 bytes)::

    off  size type  name         meaning
    0    8    i64   lease        the Redis lease id being spent (> 0); 0 = none (sealed);
                                 EMPTY_EPOCH = never one (an emptied row)
    8    8    i64   granted      its hits, k
    16   8    i64   spent        hits spent of it (<= granted)
    24   8    i64   deadline_ns  host time after which it is not spent (d, converted to the host's
                                 clock so it is never later than d)
    32   8    i64   start_ns     host time the lease was asked for (before its grant)
    40   8    i64   grant_us     the grant time t0 on Redis's clock, µs
    48   8    i64   last_ns      host time of its newest spend
    56   8    i64   deny_ns      until then, refused without a round trip (Redis refused); 0 = none
    64   8    i64   served       hits served from the host's leases (all of them)
    72   8    i64   leases       leases installed
    80   8    i64   refusals     refusals Redis answered (leases + refusals: the round trips)

Counter-cache rows (role "counter-cache", Django's cache of int counters:
``shmwin.integrations.django``, ``core/cache.c``): a keyed window of one ring of one bucket
of a second, the key's idle time I, whose limit is the longest timeout T the cache keeps.
After the key header, CACHE_STATE (16 bytes)::

    off  size type  name         meaning
    0    8    i64   expires_ns   the value is live while now < expires_ns (the cache's clock);
                                 EMPTY_EPOCH = none (an emptied or deleted key)
    8    8    i64   value        the counter
"""

from __future__ import annotations

Field = tuple[str, int, str]  # (name, byte offset, type): every record of the format is of it

# The words every segment's header page starts with, whatever its kind (a window's HEADER, a
# series' SERIES_HDR): what a reader checks before it knows which header it holds.
SEGMENT_PREFIX: tuple[Field, ...] = (
    ("magic", 0, "8s"),
    ("version", 8, "I"),
    ("header_bytes", 12, "I"),
    ("total_bytes", 16, "Q"),
)

# The per-key state of the counter roles, in a keyed row right after its key header (where a
# window's first ring starts: core/counters.c). A keyed window of one ring of 1 bucket
# (fixed) or 2 buckets (sliding) of the period P gives the room and the idle time (P, 2P).
FIXED_STATE: tuple[Field, ...] = (  # role "fixed-window": limits' fixed window
    ("start", 0, "q"),  # the live window's start (ns, the storage's clock); EMPTY_EPOCH: none
    ("count", 8, "q"),  # its hits; it ends at start + P exactly
)
FIXED_STATE_BYTES = 16
SLIDING_STATE: tuple[Field, ...] = (  # role "sliding-counter": limits' sliding window counter
    ("window", 0, "q"),  # the index (now // P) of the window counted in "current"; EMPTY_EPOCH: none
    ("current", 8, "q"),  # hits in that window
    ("previous", 16, "q"),  # hits in the window before it
)
SLIDING_STATE_BYTES = 24
# role "concurrency": a top word (entries from it on are free; 0 in an emptied row), then one
# holder entry of CONC_HOLDER_BYTES per process stripe (the ring's span is the idle time)
CONC_STATE: tuple[Field, ...] = (("top", 0, "q"),)
CONC_STATE_BYTES = 8
CONC_HOLDER: tuple[Field, ...] = (  # one process's slots of the key
    ("stripe", 0, "q"),  # its stripe row r (1..n_stripes) | slots held << 32; 0 = a free entry
    ("claim", 8, "q"),  # that stripe's claims when this process took it: dead once they differ
)  # its size, CONC_HOLDER_BYTES, and MAX_CONCURRENCY: geometry's (the neutral layers size by them)
# role "token-bucket": a TokenBucket's GCRA state (core/counters.c). Its keyed window has one ring
# of `burst` buckets of the emission interval T (ns per token): the row's room and its idle time
# burst x T, after which the bucket is full again; the ring's limit is the rate's limit.
TOKEN_STATE: tuple[Field, ...] = (
    ("tat", 0, "q"),  # the theoretical arrival time (ns): the bucket is full from then on; EMPTY_EPOCH: full
)
TOKEN_STATE_BYTES = 8
# A limiter's log ring (exact=...): its slots are entries (time ns, hits), in a slot's first two
# words; its header (its two header slots' first four words, 0 when empty, core/exactlog.c) holds
# the run of entries in time order from tail (the oldest) over len slots, their running total
# (>= their sum), and the one dead entry kept for a clock stepped back (the hits expired from
# the run's tail, at the newest of their times).
LOG_TIME = 0
LOG_HITS = 1
LOG_HDR_POS = 0  # tail << 32 | len
LOG_HDR_TOTAL = 1
LOG_HDR_DEAD_TIME = 2
LOG_HDR_DEAD_HITS = 3
LOG_HDR_WORDS = 4

# role "moving-log": limits' moving window, each key's hits as entries of one word each,
# MOVING_INLINE of them in the row, the rest in chunks of the segment's chunk heap, chained from
# the row (core/moving.c). A keyed window of one log ring (P, at most min(limit, times) entries,
# the limit) gives the period, the idle time P and the limit.
#
# An entry is stamp << MOVING_STAMP_SHIFT | hits (hits 0: an empty entry). The stamp is a time
# rounded UP to the segment's quantum q = 2**moving_quantum_shift(P) ns (32 ns for P up to
# 2**33 ns, 8.6 s; above, P / 2**28 rounded up to a power of two: 256 ns for a minute, 524 us
# for a day), kept modulo 2**32 and read back against the row's last write (KEY_ROW.last_ns),
# which every entry holding hits lies within 2**30 quanta (34 s at least, 4 P) of:
# core/moving.c moves a key's dead hits (kept as one entry) up to that bound as the last write
# moves on (later: strict), and stamps a hit from a clock further behind at that bound. Rounded up, a
# hit is forgotten at most q - 1 ns late, never early (strict). A moving log's limit is at
# most MOVING_HITS_MAX.
MOVING_INLINE = 2
MOVING_ENTRY_BYTES = 8
MOVING_STAMP_SHIFT = 32
MOVING_HITS_MAX = (1 << 32) - 1
MOVING_SPAN_BITS = 28  # a period spans at most 2**28 quanta: stamps 2**31 apart stay ordered
MOVING_MIN_SHIFT = 5  # a quantum of 32 ns at least: stamps span 2**37 ns (137 s), clocks may lag 34 s
# a moving log's row keeps its key as an 8-byte keyed digest (its ident word's hash is another,
# independent one: 101 bits tell keys apart), not MAX_STORED_KEY bytes: tools show the digest
MOVING_KEY_BYTES = 8
# A key's entries form one run in time order (core/moving.c): from entry `tail` of its oldest
# chunk through its chain (oldest first) to its newest chunk, then `inline` entries of the row.
# Every chunk of the run but the oldest is whole. The chain word holds the run's shape (one
# store publishes any change of it); the run word is derived from it (the running total of the
# run's hits, its chunks), and recomputed by the row's repair.
MOVING_LINK_BITS = 29  # a chunk index + 1 in the chain word: the heap holds fewer than 2**29 chunks
MOVING_LINK_MASK = (1 << MOVING_LINK_BITS) - 1
MOVING_LAST_SHIFT = MOVING_LINK_BITS  # the newest chunk + 1
MOVING_TAIL_SHIFT = 2 * MOVING_LINK_BITS  # 2 bits: the run's first entry in the oldest chunk
MOVING_INLINE_SHIFT = 2 * MOVING_LINK_BITS + 2  # 2 bits: the run's entries in the row (0..2)
MOVING_RUN_CHUNKS_SHIFT = 32  # the run word: total hits (low 32 bits, saturating) | chunks << 32
MOVING_STATE: tuple[Field, ...] = (
    ("chain", 0, "q"),  # oldest chunk + 1 | newest chunk + 1 << 29 | tail << 58 | inline << 60; 0: none
    ("run", 8, "q"),  # derived: the run's hits (its running total) | its chunks << 32
    ("entries", 16, f"{MOVING_INLINE * MOVING_ENTRY_BYTES}s"),  # MOVING_INLINE entries
)
MOVING_STATE_BYTES = 16 + MOVING_INLINE * MOVING_ENTRY_BYTES
CHUNK_ENTRIES = 3
# a chunk of the heap: in one key's chain, on the free list, or (inside a section) neither
CHUNK: tuple[Field, ...] = (
    ("next", 0, "I"),  # the next (newer) chunk of its chain (or of the free list) + 1; 0: the last
    ("owner", 4, "I"),  # the row whose chain holds it + 1; 0: free
    ("entries", 8, f"{CHUNK_ENTRIES * MOVING_ENTRY_BYTES}s"),  # CHUNK_ENTRIES entries
)
CHUNK_BYTES = 8 + CHUNK_ENTRIES * MOVING_ENTRY_BYTES
# a moving log's key names, for the tools (its rows keep digests): NAME_SLOTS entries between
# the stripe table and the index, reserved at creation. The core names a key when it inserts
# it (under LOCK_KEY_TABLE, after the section "insert": a display hint, in no invariant) into
# a free or stale entry of NAME_PROBES from its hash (stale: its row holds another generation,
# or its key is idle);
# a reader takes a name only if the entry's generation is read the same before and after and
# is the row's own. Keys past NAME_MAX_BYTES keep that much; a key not named shows its digest.
NAME_SLOTS = 512
NAME_PROBES = 4
NAME_MAX_BYTES = 48
NAME_ENTRY: tuple[Field, ...] = (
    ("gen", 0, "q"),  # the named row's generation; 0: free (or being written)
    ("row", 8, "I"),
    ("len", 12, "I"),  # the name's bytes (at most NAME_MAX_BYTES) | key flags << 16 | cut << 24
    ("name", 16, f"{NAME_MAX_BYTES}s"),
)
NAME_ENTRY_BYTES = 16 + NAME_MAX_BYTES
HALF_WORD_RECORDS = ("CHUNK", "NAME_ENTRY")  # records whose 4-byte fields are loaded and stored as such


def moving_quantum_shift(period_ns: int) -> int:
    """log2 of a moving log's quantum (ns) for the period P: P spans at most 2**MOVING_SPAN_BITS."""
    return max(MOVING_MIN_SHIFT, (period_ns - 1).bit_length() - MOVING_SPAN_BITS)



# role "lease": the host tier of a two-tier limiter (core/lease.c). A lease is k hits taken from
# Redis in one step, counted there at its spend deadline d; the host's workers spend it while
# now <= deadline_ns (d on the host's clock, never later). Its keyed window has one ring of one
# bucket of the longest period P (the key's idle time), whose limit is the tightest rate's limit.
LEASE_STATE: tuple[Field, ...] = (
    ("lease", 0, "q"),  # the Redis lease id (> 0) being spent; 0: none (sealed); EMPTY_EPOCH: never one
    ("granted", 8, "q"),  # its hits, k
    ("spent", 16, "q"),  # the hits spent of it (<= granted)
    ("deadline_ns", 24, "q"),  # no spend after it (host clock): the lease's d, converted conservatively
    ("start_ns", 32, "q"),  # host time the lease was asked for (before Redis granted it)
    ("grant_us", 40, "q"),  # the grant time t0 on Redis's clock (µs): a seal time converts from it
    ("last_ns", 48, "q"),  # host time of the lease's newest spend
    ("deny_ns", 56, "q"),  # a refusal from Redis: until then refuse without asking (0: none)
    ("served", 64, "q"),  # hits served by the host from its leases, all leases
    ("leases", 72, "q"),  # leases installed for the key
    ("refusals", 80, "q"),  # refusals Redis answered for the key (with leases: the round trips)
)
LEASE_STATE_BYTES = 88
# role "counter-cache": one int counter per key and when it expires (core/cache.c). Every write
# keeps the key's last write at least expires_ns - I (I: the ring's bucket, the idle time), so
# the key table never reuses a live key's row, and reuses it about I after its value expired.
CACHE_STATE: tuple[Field, ...] = (
    ("expires_ns", 0, "q"),  # live while now < expires_ns; EMPTY_EPOCH: no value
    ("value", 8, "q"),  # the counter
)
CACHE_STATE_BYTES = 16
CACHE_STATE_EXPIRES_NS_OFF, CACHE_STATE_VALUE_OFF = (off for _, off, _ in CACHE_STATE)
CACHE_STATE_EXPIRES_NS, CACHE_STATE_VALUE = (off // 8 for _, off, _ in CACHE_STATE)  # words

# role "distribution" (core/distribution.c): a locked window (keyed or not) of the fields
# DIST_FIELDS, whose every bucket slot is a DIST_SLOT, and whose row ends with the bins of every
# bucket of every ring, ring after ring: sketch_bins u32 counts per bucket, padded to a word
# (DIST_BIN_BYTES each; a count stops at DIST_BIN_MAX). A bucket's bins are its slot's: recycled
# (zeroed) with it, before its new epoch is stamped. DIST_FIELDS: geometry's.
DIST_SLOT: tuple[Field, ...] = (
    ("epoch", 0, "q"),  # the bucket's epoch, as any window slot's
    ("count", 8, "q"),  # values recorded (an integer, though the window's dtype is float64)
    ("sum", 16, "q"),  # their sum (a double's bits)
    ("min", 24, "q"),  # the least (a double's bits; +inf: none)
    ("max", 32, "q"),  # the greatest (a double's bits; -inf: none)
)
DIST_SLOT_BYTES = 40
DIST_BIN_BYTES = 4
DIST_BIN_MAX = (1 << 32) - 1
DIST_BIN_ZERO, DIST_BIN_UNDER, DIST_BIN_OVER, DIST_FIRST_LOG_BIN = 0, 1, 2, 3
DIST_MAX_BINS = 1 << 16

# A limiter's live limits (core/live.c; layout.py, "Live limits"): words of the header page
# (format.HEADER takes them), written under LOCK_KEY_TABLE. live_gen counts the changes (0:
# none, the ring table's limits hold); its bit LIVE_MOVED says the segment was replaced under
# its name. live_changed_ns: when the last change was made (wall ns). live_limits: two tables
# of MAX_RINGS (8) limits, generation g's at table g & 1.
LIVE_WORDS: tuple[Field, ...] = (
    ("live_gen", 1120, "q"),
    ("live_changed_ns", 1128, "q"),
    ("live_limits", 1136, "128s"),
)
LIVE_MOVED = 1 << 62
