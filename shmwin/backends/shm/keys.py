"""The key table of a keyed segment, read side: which key owns which row.

The table (see ``layout``, "Key table") is an index over a heap of rows; a row's key
header names its key. Finding, inserting, rebuilding and repairing are the native core's
(``core/index.c``): linear probing over a power-of-two index of SipHash-1-3 hashes under the
segment's random key, at most ``MAX_PROBES`` probes, an idle key's row reused once every
ring's span has passed since its newest write, and a rebuild (to grow the index, or to
drop idle keys) into the index copy nobody reads.

This module only reads, lock-free, from the rows: a row's generation is read before and
after its key bytes, and a changed or non-positive generation means "not a key now".
"""

from __future__ import annotations

from ... import _core, geometry
from ...errors import CorruptSegmentError
from ..contract import Key
from . import format as _words
from . import header, layout
from .layout import (
    KEY_FLAG_DIGEST,
    KEY_FLAG_STR,
    KEY_LONG_PREFIX,
    KEY_ROW_GEN,
    KEY_ROW_IDENT,
    KEY_ROW_LAST_NS,
    MAX_STORED_KEY,
)

MAX_PROBES = layout.MAX_PROBES
_W = layout.WORD_BYTES


def decode(stored: bytes, flags: int) -> Key:
    """The key as callers gave it (long keys: the stored prefix, then '…' and the digest; a
    moving log's keys: '…' and their digest, all it stores)."""
    if flags & KEY_FLAG_DIGEST:
        prefix = KEY_LONG_PREFIX if len(stored) == MAX_STORED_KEY else 0
        stored = stored[:prefix] + b"\xe2\x80\xa6" + stored[prefix:].hex().encode()
    return stored.decode(errors="replace") if flags & KEY_FLAG_STR else stored


class KeyTable:
    """This process's read-only view of a segment's key table. Rows are the heap's."""

    def __init__(
        self,
        mm: object,
        q: memoryview,
        g: geometry.Geometry,
        lay: layout.Layout,
        core: _core.Core,
        key: bytes,
    ):
        self._g, self._lay = g, lay
        self._hash_key = key  # the segment's hash key: the checked words' tags
        self._rows_off = lay.rows_off
        self._row_bytes = lay.row_bytes
        self._n_rows = lay.n_rows
        self._mm = mm
        self._q = q
        names = layout.names_bytes(g.role)  # a moving log's key names, just before the index
        self._names_off = lay.keys_off - names if names else -1
        self._idle_ns = g.idle_ns
        self._core = core

    def _checked(self, offset: int, most: int) -> int:
        return header.state_value(int(self._q[offset // _W]), offset, self._hash_key, most)

    def rows_top(self) -> int:
        """Rows handed out so far: every key's row is below it, and reserved. The words are
        checked (junk is a CorruptSegmentError, never a read in the file's holes); rows_top is
        read first, as the core does: it is stored after rows_reserved."""
        top = self._checked(layout.ROWS_TOP_OFF, self._n_rows)
        reserved = self._checked(layout.ROWS_RESERVED_OFF, self._n_rows)
        if top > reserved:
            raise CorruptSegmentError(f"segment's key table is corrupt: {top} rows used, {reserved} reserved")
        return top

    def count(self) -> int:
        """Keys the table holds (live or idle, not yet reclaimed); junk is clamped."""
        return max(0, min(int(self._q[layout.KEYS_OFF // _W]), self._n_rows))

    def full_count(self) -> int:
        """Requests that met a full table (no row for a new key), whatever on_full answered."""
        return max(0, int(self._q[layout.FULL_COUNT_OFF // _W]))

    def index_entries(self) -> list[tuple[int, int, int]]:
        """``(generation, hash, row)`` of every entry of the current index (a snapshot)."""
        index = self._checked(layout.INDEX_OFF, 2 * self._g.index_levels - 1)
        offset, slots = self._lay.index_copy(index, self._g.key_slots)
        per = layout.INDEX_ENTRY_WORDS
        words = self._q[offset // _W : offset // _W + slots * per]
        out = []
        for i in range(0, len(words), per):
            place = int(words[i + layout.INDEX_ENTRY_PLACE]) & ((1 << 64) - 1)
            out.append((int(words[i + layout.INDEX_ENTRY_GEN]), place >> _words.ENTRY_ROW_BITS,
                        place & _words.ENTRY_ROW_MASK))  # fmt: skip
        return out

    def find(self, key: Key) -> tuple[int, int] | None:
        """``(row, generation)`` of ``key``, or None; verify the generation after reading."""
        found = self._core.find(key)
        return None if found is None else (int(found[0]), int(found[1]))

    def _word(self, row: int, i: int) -> int:
        """Word ``i`` of ``row``'s key header (``layout.KEY_ROW_*``)."""
        return int(self._q[(self._rows_off + row * self._row_bytes) // _W + i])

    def generation(self, row: int) -> int:
        return self._word(row, KEY_ROW_GEN)

    def entry(self, row: int) -> Key | None:
        """The key held by ``row``, or None (free, never used, or being rewritten)."""
        generation = self.generation(row)
        ident = self._word(row, KEY_ROW_IDENT)  # hash | len << 40 | flags << 48
        if generation <= 0 or ident & _words.KEY_HASH_MASK == 0:
            return None
        length = (ident >> _words.IDENT_LEN_SHIFT) & 0xFF
        flags = (ident >> _words.IDENT_FLAGS_SHIFT) & 0xFF
        off = self._rows_off + row * self._row_bytes + layout.KEY_ROW_KEY_OFF
        stored = bytes(self._mm[off : off + min(length, layout.MAX_STORED_KEY)])  # type: ignore[index]
        if self.generation(row) != generation:
            return None
        named = self._name(row, generation, ident & _words.KEY_HASH_MASK) if self._names_off >= 0 else None
        return decode(stored, flags) if named is None else named

    def _name(self, row: int, generation: int, key_hash: int) -> Key | None:
        """A digest row's key as its inserter named it (``format.NAME_ENTRY``), or None:
        an entry whose generation reads the same before and after, and is the row's own."""
        for i in range(_words.NAME_PROBES):
            at = self._names_off + (key_hash + i) % _words.NAME_SLOTS * _words.NAME_ENTRY_BYTES
            before = int(self._q[at // _W])
            head = int(self._q[at // _W + 1]) & ((1 << 64) - 1)  # row | len << 32
            name = bytes(self._mm[at + _words.NAME_ENTRY_NAME_OFF : at + _words.NAME_ENTRY_BYTES])  # type: ignore[index]
            if before != generation or int(self._q[at // _W]) != generation or head & 0xFFFFFFFF != row:
                continue
            length = head >> 32 & 0xFFFF
            if length > _words.NAME_MAX_BYTES:
                return None
            flags, cut = head >> 48 & 0xFF, head >> 56 & 0xFF
            key = decode(name[:length], flags & KEY_FLAG_STR)
            if cut:
                key = key + "\u2026" if isinstance(key, str) else key + b"\xe2\x80\xa6"
            return key
        return None

    def last_write_ns(self, row: int) -> int:
        return self._word(row, KEY_ROW_LAST_NS)

    def entries(self) -> list[tuple[int, Key, int]]:
        """``(row, key, last_ns)`` of every row that holds a key (idle or not)."""
        out = []
        for row in range(self.rows_top()):
            key = self.entry(row)
            if key is not None:
                out.append((row, key, self.last_write_ns(row)))
        return out

    def entries_with_generation(self) -> list[tuple[int, Key, int, int]]:
        """``(row, key, last_ns, generation)`` of every row that holds a key: a reader that finds
        the row's generation unchanged after reading its words read that key's words."""
        out = []
        for row in range(self.rows_top()):
            generation = self.generation(row)
            key = self.entry(row)
            last_ns = self.last_write_ns(row)
            if key is not None and self.generation(row) == generation:
                out.append((row, key, last_ns, generation))
        return out

    def is_idle(self, row: int, now_ns: int) -> bool:
        return now_ns - self.last_write_ns(row) > self._idle_ns
