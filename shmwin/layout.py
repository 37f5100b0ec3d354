"""The binary format of a window segment. This table is the contract.

Segment = header page | lock table | stripe table | rows.  Little-endian,
every offset a multiple of 64 so no two writers share a cache line.

Header (4096 bytes; bytes 32..1024 are immutable after creation and covered by
``header_crc``; the magic is written *last*, so a non-zero magic means ready)::

    off  size type      name            meaning
    0    8    bytes     magic           b"SHMWIN\\x00\\x00" once the segment is ready, 0 before
    8    4    u32       version         binary format version (FORMAT_VERSION)
    12   4    u32       header_bytes    HEADER_BYTES
    16   8    u64       total_bytes     size of the whole segment; fstat must agree
    24   4    u32       header_crc      zlib.crc32 of bytes 32..1024
    28   4    u32       -               reserved, 0
    32   8    i64       bucket_ns       width of one bucket in nanoseconds
    40   4    u32       n_buckets       buckets in the ring (span = bucket_ns * n_buckets)
    44   4    u32       n_fields        value fields per bucket, 1..MAX_FIELDS
    48   4    u32       dtype           0 = int64, 1 = float64 (field values; epochs are int64)
    52   4    u32       mode            0 = striped, 1 = locked
    56   4    u32       n_stripes       per-writer rows (striped mode), 0 in locked mode
    60   4    u32       n_locks         robust mutexes in the lock table
    64   4    u32       capacity        key slots (0 = unkeyed window)
    68   4    u32       -               reserved, 0
    72   8    i64       creator_pid     pid of the creating process
    80   8    i64       created_real_ns CLOCK_REALTIME at creation  } anchor for showing
    88   8    i64       created_mono_ns CLOCK_MONOTONIC at creation } wall-clock times
    96   16   bytes     boot_id         /proc/sys/kernel/random/boot_id of the creating boot
    112  8    u64       locks_off       offset of the lock table
    120  8    u64       stripes_off     offset of the stripe table
    128  8    u64       rows_off        offset of row 0
    136  8    u64       row_bytes       bytes per row (a multiple of 64)
    256  512  utf-8     field_names     MAX_FIELDS x 32 bytes, NUL-padded
    1024 8    i64       rows_in_use     rows ever claimed + 1 (readers sum rows below it)

Lock table: ``n_locks`` x 64 bytes, each a process-shared *robust* pthread
mutex (the kernel marks it owner-dead when its holder dies). Lock 0 guards the
stripe table; lock 1 guards row 0.

Stripe table: ``n_stripes + 1`` x 64 bytes, entry *r* describes row *r*::

    off  size type  name         meaning
    0    8    i64   owner_tid    thread id writing this row, 0 = free (row 0: always 0)
    8    8    i64   owner_start  owner's start time in clock ticks (/proc stat field 22)
    16   8    i64   owner_pid    owner's process id, for display
    24   8    i64   claimed_ns   CLOCK_MONOTONIC when claimed

Rows: ``n_stripes + 1`` rows of ``row_bytes``. Row 0 is shared and written only
under lock 1 (locked mode, and striped mode's fallback when every stripe is
taken); row *r >= 1* is written only by its owner thread, without a lock. A row
is ``n_buckets`` slots of ``1 + n_fields`` 8-byte words::

    word 0        i64            epoch of the bucket in this slot (EMPTY_EPOCH = -2**63 if none)
    word 1..F     int64/float64  field values
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass

from .duration import format_ns
from .errors import CorruptSegmentError, IncompatibleVersionError

MAGIC = b"SHMWIN\x00\x00"
FORMAT_VERSION = 1
HEADER_BYTES = 4096
CRC_START, CRC_END = 32, 1024
LOCK_BYTES = 64
STRIPE_ENTRY_BYTES = 64
WORD_BYTES = 8
ROWS_IN_USE_OFF = 1024

MAX_FIELDS = 16
FIELD_NAME_BYTES = 32
MAX_BUCKETS = 1_000_000
MAX_STRIPES = 1024
MAX_LOCKS = 4096

LOCK_STRIPE_TABLE = 0
LOCK_SHARED_ROW = 1

DTYPES = ("int64", "float64")
MODES = ("striped", "locked")

_FIXED = struct.Struct("<8sIIQII qIIIIIIII qqq16s QQQQ")
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _align64(n: int) -> int:
    return (n + 63) // 64 * 64


@dataclass(frozen=True)
class Geometry:
    """What two processes must agree on to share a window."""

    bucket_ns: int
    n_buckets: int
    fields: tuple[str, ...]
    dtype: str = "int64"
    mode: str = "striped"
    n_stripes: int = 64
    capacity: int = 0

    def __post_init__(self) -> None:
        _check_geometry(self)

    @property
    def span_ns(self) -> int:
        return self.bucket_ns * self.n_buckets

    @property
    def n_locks(self) -> int:
        return 2  # stripe table + shared row; keyed windows add segments

    def __str__(self) -> str:
        parts = [
            f"span={format_ns(self.span_ns)}",
            f"buckets={self.n_buckets}x{format_ns(self.bucket_ns)}",
            f"fields=({','.join(self.fields)})",
            f"dtype={self.dtype}",
            f"mode={self.mode}",
        ]
        if self.mode == "striped":
            parts.append(f"stripes={self.n_stripes}")
        if self.capacity:
            parts.append(f"capacity={self.capacity}")
        return " ".join(parts)


def _check_geometry(g: Geometry) -> None:
    if not 1 <= g.n_buckets <= MAX_BUCKETS:
        raise ValueError(f"buckets must be 1..{MAX_BUCKETS}, not {g.n_buckets}")
    if g.bucket_ns <= 0:
        raise ValueError("bucket width must be positive")
    if not 1 <= len(g.fields) <= MAX_FIELDS:
        raise ValueError(f"a window has 1..{MAX_FIELDS} fields, not {len(g.fields)}")
    for name in g.fields:
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise ValueError(f"field name {name!r} must be an identifier (letters, digits, _)")
        if len(name.encode()) >= FIELD_NAME_BYTES:
            raise ValueError(f"field name {name!r} is longer than {FIELD_NAME_BYTES - 1} bytes")
    if len(set(g.fields)) != len(g.fields):
        raise ValueError(f"field names must be unique: {g.fields}")
    if g.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {g.dtype!r}")
    if g.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {g.mode!r}")
    if g.mode == "striped" and not 1 <= g.n_stripes <= MAX_STRIPES:
        raise ValueError(f"stripes must be 1..{MAX_STRIPES}, not {g.n_stripes}")
    if g.mode == "locked" and g.n_stripes != 0:
        raise ValueError("a locked window has no stripes")
    if g.capacity < 0:
        raise ValueError("capacity cannot be negative")


@dataclass(frozen=True)
class Layout:
    """Byte offsets derived from a Geometry (never stored independently of it)."""

    locks_off: int
    stripes_off: int
    rows_off: int
    row_bytes: int
    n_rows: int
    total_bytes: int
    slot_words: int

    @classmethod
    def plan(cls, g: Geometry) -> Layout:
        locks_off = HEADER_BYTES
        stripes_off = locks_off + g.n_locks * LOCK_BYTES
        n_rows = g.n_stripes + 1
        rows_off = _align64(stripes_off + n_rows * STRIPE_ENTRY_BYTES)
        slot_words = 1 + len(g.fields)
        row_bytes = _align64(g.n_buckets * slot_words * WORD_BYTES)
        total = rows_off + n_rows * row_bytes
        return cls(locks_off, stripes_off, rows_off, row_bytes, n_rows, total, slot_words)


@dataclass(frozen=True)
class Meta:
    """Facts about a segment's creation, for the inspector."""

    creator_pid: int
    created_real_ns: int
    created_mono_ns: int
    boot_id: bytes


def pack_header(g: Geometry, lay: Layout, meta: Meta) -> bytes:
    """The header page, magic left zero (the creator writes it last)."""
    page = bytearray(HEADER_BYTES)
    names = b"".join(n.encode().ljust(FIELD_NAME_BYTES, b"\0") for n in g.fields)
    page[256 : 256 + len(names)] = names
    _FIXED.pack_into(
        page, 0,
        b"\0" * 8, FORMAT_VERSION, HEADER_BYTES, lay.total_bytes, 0, 0,
        g.bucket_ns, g.n_buckets, len(g.fields), DTYPES.index(g.dtype), MODES.index(g.mode),
        g.n_stripes, g.n_locks, g.capacity, 0,
        meta.creator_pid, meta.created_real_ns, meta.created_mono_ns, meta.boot_id,
        lay.locks_off, lay.stripes_off, lay.rows_off, lay.row_bytes,
    )  # fmt: skip
    struct.pack_into("<I", page, 24, zlib.crc32(page[CRC_START:CRC_END]))
    return bytes(page)


def unpack_header(page: bytes, actual_bytes: int) -> tuple[Geometry, Layout, Meta]:
    """Validate a header page against the segment's real size; raise, never guess."""
    if len(page) < HEADER_BYTES or actual_bytes < HEADER_BYTES:
        raise CorruptSegmentError(
            f"segment is {actual_bytes} bytes, smaller than a shmwin header ({HEADER_BYTES})"
        )
    (magic, version, header_bytes, total, crc, _r0,
     bucket_ns, n_buckets, n_fields, dtype, mode, n_stripes, n_locks, capacity, _r1,
     pid, real_ns, mono_ns, boot_id,
     locks_off, stripes_off, rows_off, row_bytes) = _FIXED.unpack_from(page, 0)  # fmt: skip
    if magic != MAGIC:
        raise CorruptSegmentError(f"not a shmwin segment (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise IncompatibleVersionError(
            f"segment has format version {version}; this shmwin reads version {FORMAT_VERSION}"
        )
    if zlib.crc32(page[CRC_START:CRC_END]) != crc or header_bytes != HEADER_BYTES:
        raise CorruptSegmentError("segment header is corrupt (checksum mismatch)")
    if dtype >= len(DTYPES) or mode >= len(MODES) or not 1 <= n_fields <= MAX_FIELDS:
        raise CorruptSegmentError("segment header names an unknown dtype, mode or field count")
    names = [
        page[256 + i * FIELD_NAME_BYTES : 256 + (i + 1) * FIELD_NAME_BYTES].rstrip(b"\0")
        for i in range(n_fields)
    ]
    try:
        g = Geometry(
            bucket_ns, n_buckets, tuple(n.decode() for n in names),
            DTYPES[dtype], MODES[mode], n_stripes, capacity,
        )  # fmt: skip
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptSegmentError(f"segment header holds an impossible geometry: {exc}") from exc
    lay = Layout.plan(g)
    stored = (locks_off, stripes_off, rows_off, row_bytes, total, n_locks)
    if stored != (lay.locks_off, lay.stripes_off, lay.rows_off, lay.row_bytes,
                  lay.total_bytes, g.n_locks):  # fmt: skip
        raise CorruptSegmentError("segment header offsets do not match its geometry")
    if actual_bytes != total:
        raise CorruptSegmentError(
            f"segment is {actual_bytes} bytes but its header says {total}: truncated or resized"
        )
    return g, lay, Meta(pid, real_ns, mono_ns, boot_id)
