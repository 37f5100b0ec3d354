"""The header page of a segment: packed once at creation, unpacked and checked at every attach
(a header is trusted only once its magic, version, checksum and offsets all agree with the
segment's size and geometry), and the key table's checked words (``value | tag << 32``), which
live outside the checksum and are checked on their own. The page's table is drawn at the top
of ``layout.py``; its words come from ``format.py``.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

from ...errors import CorruptSegmentError, IncompatibleVersionError
from ...geometry import (
    DTYPES,
    FIELD_NAME_BYTES,
    KINDS,
    MAX_FIELDS,
    MAX_RINGS,
    MODES,
    ROLES,
    Geometry,
    Meta,
    Ring,
    Sketch,
)
from . import format as _words
from .format import (
    CHECKED_WORDS,
    CHUNK_FREE_OFF,
    CHUNKS_RESERVED_OFF,
    CHUNKS_TOP_OFF,
    CLOCKS,
    CRC_END,
    CRC_START,
    FIELD_NAMES_OFF,
    FORMAT_VERSION,
    FREE_HEAD_OFF,
    HEADER_BYTES,
    HEADER_CRC_OFF,
    INDEX_OFF,
    INDEX_USED_OFF,
    KEYS_OFF,
    MAGIC,
    RING_LOG,
    RING_TABLE_OFF,
    ROWS_RESERVED_OFF,
    ROWS_TOP_OFF,
)
from .layout import Layout, canonical_holders, holders_in_row

_FIXED = _words.fixed_struct()  # magic .. role, by name: _words.fixed_names()
_FIXED_NAMES = _words.fixed_names()
_RING = _words.ring_struct()
_U64 = (1 << 64) - 1


def pack_header(g: Geometry, lay: Layout, meta: Meta) -> bytes:
    """The header page, magic left zero (the creator writes it last)."""
    page = bytearray(HEADER_BYTES)
    names = b"".join(n.encode().ljust(FIELD_NAME_BYTES, b"\0") for n in g.fields)
    page[FIELD_NAMES_OFF : FIELD_NAMES_OFF + len(names)] = names
    for i, ring in enumerate(g.rings):
        flags = RING_LOG if ring.log else 0
        _RING.pack_into(
            page, RING_TABLE_OFF + i * _RING.size, ring.bucket_ns, ring.n_buckets, flags, ring.limit
        )
    fixed = {
        "magic": b"\0" * 8, "version": FORMAT_VERSION, "header_bytes": HEADER_BYTES,
        "total_bytes": lay.total_bytes, "header_crc": 0, "reserved": 0, "n_rings": len(g.rings),
        "kind": KINDS.index(g.kind), "n_fields": len(g.fields), "dtype": DTYPES.index(g.dtype),
        "mode": MODES.index(g.mode), "n_stripes": g.n_stripes, "n_locks": g.n_locks, "capacity": g.capacity,
        "key_slots": g.key_slots, "clock": CLOCKS.index(meta.clock), "creator_pid": meta.creator_pid,
        "created_real_ns": meta.created_real_ns, "created_mono_ns": meta.created_mono_ns,
        "boot_id": meta.boot_id, "locks_off": lay.locks_off, "stripes_off": lay.stripes_off,
        "keys_off": lay.keys_off, "rows_off": lay.rows_off, "row_bytes": lay.row_bytes,
        "hash_key": meta.hash_key, "role": ROLES.index(g.role), "chunks_off": lay.chunks_off,
        "n_chunks": lay.n_chunks,
    }  # fmt: skip
    _FIXED.pack_into(page, 0, *(fixed[name] for name in _FIXED_NAMES))
    _SKETCH.pack_into(page, _words.SKETCH_BINS_OFF, *_sketch_words(g.sketch))
    struct.pack_into("<I", page, HEADER_CRC_OFF, zlib.crc32(page[CRC_START:CRC_END]))
    if g.keyed:  # an empty key table: index 0, nothing handed out or reserved
        for offset in CHECKED_WORDS:
            struct.pack_into("<Q", page, offset, state_word(0, offset, meta.hash_key))
    return bytes(page)


def unpack_header(page: bytes, actual_bytes: int) -> tuple[Geometry, Layout, Meta]:
    """Validate a header page against the segment's real size; raise, never guess."""
    if len(page) < HEADER_BYTES or actual_bytes < HEADER_BYTES:
        raise CorruptSegmentError(
            f"segment is {actual_bytes} bytes, smaller than a shmwin header ({HEADER_BYTES})"
        )
    h = dict(zip(_FIXED_NAMES, _FIXED.unpack_from(page, 0), strict=True))
    magic, version, total, crc = h["magic"], h["version"], h["total_bytes"], h["header_crc"]
    n_rings, kind, n_fields, dtype, mode = h["n_rings"], h["kind"], h["n_fields"], h["dtype"], h["mode"]
    clock, role, n_stripes, capacity = h["clock"], h["role"], h["n_stripes"], h["capacity"]
    if magic != MAGIC:
        raise CorruptSegmentError(f"not a shmwin segment (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise IncompatibleVersionError(
            f"segment has format version {version}; this shmwin reads version {FORMAT_VERSION}"
        )
    if zlib.crc32(page[CRC_START:CRC_END]) != crc or h["header_bytes"] != HEADER_BYTES:
        raise CorruptSegmentError("segment header is corrupt (checksum mismatch)")
    if (dtype >= len(DTYPES) or mode >= len(MODES) or kind >= len(KINDS) or clock >= len(CLOCKS)
            or role >= len(ROLES)
            or not 1 <= n_fields <= MAX_FIELDS or not 1 <= n_rings <= MAX_RINGS):  # fmt: skip
        raise CorruptSegmentError("segment header names an unknown dtype, mode, kind or count")
    try:
        g = Geometry(
            _read_rings(page, n_rings), _read_fields(page, n_fields),
            DTYPES[dtype], MODES[mode], n_stripes, capacity, KINDS[kind], ROLES[role], _read_sketch(page),
        )  # fmt: skip
        if g.role == "concurrency":  # its holder entries: as many as its rows hold (no word of their own)
            held = holders_in_row(h["row_bytes"])
            g = canonical_holders(dataclasses.replace(g, holders=held)) if held else g
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptSegmentError(f"segment header holds an impossible geometry: {exc}") from exc
    lay = Layout.plan(g)
    offsets = ("locks_off", "stripes_off", "keys_off", "rows_off", "row_bytes", "total_bytes", "chunks_off",
               "n_chunks")  # fmt: skip
    stored = (*(h[n] for n in offsets), h["n_locks"], h["key_slots"])
    if stored != (lay.locks_off, lay.stripes_off, lay.keys_off, lay.rows_off, lay.row_bytes,
                  lay.total_bytes, lay.chunks_off, lay.n_chunks, g.n_locks, g.key_slots):  # fmt: skip
        raise CorruptSegmentError("segment header offsets do not match its geometry")
    if actual_bytes != total:
        raise CorruptSegmentError(
            f"segment is {actual_bytes} bytes but its header says {total}: truncated or resized"
        )
    meta = Meta(h["creator_pid"], h["created_real_ns"], h["created_mono_ns"], h["boot_id"], h["hash_key"],
                CLOCKS[clock])  # fmt: skip
    return g, lay, meta


# the sketch words (role "distribution"): bins, then the bits of three doubles (format.HEADER)
_SKETCH = struct.Struct("<I4xQQQ")


def _sketch_words(sketch: Sketch | None) -> tuple[int, int, int, int]:
    """A distribution's sketch words: its bins, then its error and range as doubles' bits; zeros
    for no sketch."""
    if sketch is None:
        return 0, 0, 0, 0
    error, low, high = (
        struct.unpack("<Q", struct.pack("<d", x))[0] for x in (sketch.relative_error, sketch.low, sketch.high)
    )
    return sketch.n_bins, error, low, high


def _read_sketch(page: bytes) -> Sketch | None:
    """The sketch the header's words describe (ValueError if impossible); None: all zero."""
    words = _SKETCH.unpack_from(page, _words.SKETCH_BINS_OFF)
    if not any(words):
        return None
    error, low, high = (struct.unpack("<d", struct.pack("<Q", w))[0] for w in words[1:])
    sketch = Sketch(error, low, high)
    if sketch.n_bins != words[0]:
        raise ValueError(f"its sketch says {words[0]} bins, its error and range {sketch.n_bins}")
    return sketch


def _read_rings(page: bytes, n_rings: int) -> tuple[Ring, ...]:
    rings = []
    for i in range(n_rings):
        bucket_ns, n_buckets, flags, limit = _RING.unpack_from(page, RING_TABLE_OFF + i * _RING.size)
        if flags & ~RING_LOG:
            raise CorruptSegmentError(f"segment header: ring {i} has unknown flags {flags:#x}")
        rings.append(Ring(bucket_ns, n_buckets, limit, bool(flags & RING_LOG)))
    return tuple(rings)


def _read_fields(page: bytes, n_fields: int) -> tuple[str, ...]:
    start = FIELD_NAMES_OFF
    return tuple(
        page[start + i * FIELD_NAME_BYTES : start + (i + 1) * FIELD_NAME_BYTES].rstrip(b"\0").decode()
        for i in range(n_fields)
    )


def state_tag(value: int, offset: int, hash_key: bytes) -> int:
    """The tag of a checked word (``core/index.c``'s state_tag: both must agree)."""
    k0, k1 = struct.unpack("<QQ", hash_key)
    x: int = ((value | offset << 32) ^ k0) * (k1 | 1) & _U64
    x ^= x >> 32
    return (x * 0x9E3779B97F4A7C15 & _U64) >> 32


def state_word(value: int, offset: int, hash_key: bytes) -> int:
    """The u64 a checked word holds for ``value`` (0 <= value < 2**32)."""
    return state_tag(value, offset, hash_key) << 32 | value


def state_value(word: int, offset: int, hash_key: bytes, most: int) -> int:
    """A checked word's value, in [0, most]; CorruptSegmentError if it fails its tag."""
    word &= _U64
    value = word & 0xFFFFFFFF
    if word >> 32 != state_tag(value, offset, hash_key) or value > most:
        raise CorruptSegmentError(f"segment's key table is corrupt: word {offset} ({word:#x}) fails its tag")
    return value


def check_key_state(mm: Buffer, g: Geometry, lay: Layout, hash_key: bytes) -> None:
    """Refuse a keyed segment whose key-table words (outside the header checksum) are junk.
    Read lock-free while other processes insert: the checked words each pass their tag (one
    store writes a word and its tag) and rows_top <= rows_reserved (stored in that order, read
    in this one); the counting words are checked against their own bounds only."""
    if not g.keyed:
        return
    index_word, used, keys = (
        struct.unpack_from("<q", mm, offset)[0] for offset in (INDEX_OFF, INDEX_USED_OFF, KEYS_OFF)
    )
    most_entries = g.key_slots << max(g.index_levels - 1, 0)
    problems = []
    try:
        state_value(index_word, INDEX_OFF, hash_key, 2 * g.index_levels - 1)
    except CorruptSegmentError:
        problems.append(f"index descriptor {index_word & _U64:#x}")
    if not 0 <= used <= most_entries or not 0 <= keys <= g.capacity:
        problems.append(f"counts (keys {keys}, entries used {used})")
    row_words = (ROWS_TOP_OFF, ROWS_RESERVED_OFF, FREE_HEAD_OFF)
    problems += _heap_problems(mm, "row heap", row_words, lay.n_rows, hash_key)
    if lay.n_chunks:
        chunk_words = (CHUNKS_TOP_OFF, CHUNKS_RESERVED_OFF, CHUNK_FREE_OFF)
        problems += _heap_problems(mm, "chunk heap", chunk_words, lay.n_chunks, hash_key)
    if problems:
        raise CorruptSegmentError(f"segment's key table is corrupt: {', '.join(problems)}")


def _heap_problems(
    mm: Buffer, heap: str, offsets: tuple[int, int, int], most: int, hash_key: bytes
) -> list[str]:
    """A heap's words (rows or chunks: top, reserved, free head) that are junk, as one problem:
    top and reserved each pass their tag, top <= reserved (stored in that order, read in this
    one), and the free list's head is within the heap."""
    top_word, reserved_word, free_head = (struct.unpack_from("<q", mm, offset)[0] for offset in offsets)
    try:
        top = state_value(top_word, offsets[0], hash_key, most)
        if top > state_value(reserved_word, offsets[1], hash_key, most) or not 0 <= free_head <= most:
            raise CorruptSegmentError(heap)
    except CorruptSegmentError:
        words = f"top {top_word & _U64:#x}, reserved {reserved_word & _U64:#x}, free list {free_head}"
        return [f"{heap} ({words})"]
    return []
