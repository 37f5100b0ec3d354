"""The key table of a keyed segment, read side: which key owns which row.

Entry *s* names the key whose counts live in row *s* (see ``layout``). Finding,
inserting, reclaiming and rolling back entries are the native core's (``_core.c``):
open addressing with double hashing over a prime number of entries, SipHash-1-3
under the segment's random key, at most ``MAX_PROBES`` probes, and an idle key's
entry reused once every ring's span has passed since its newest write.

This module only reads, lock-free: an entry's generation is read before and after
its key bytes, and a changed or negative generation means "being rewritten".
"""

from __future__ import annotations

from . import _core, layout

Key = str | bytes

MAX_PROBES = _core.MAX_PROBES
_W = layout.WORD_BYTES
_ENTRY_WORDS = layout.KEY_ENTRY_BYTES // _W
_FLAG_STR, _FLAG_DIGEST = 1, 2
_LONG_PREFIX = layout.MAX_STORED_KEY - 16


def decode(stored: bytes, flags: int) -> Key:
    """The key as callers gave it (long keys: the stored prefix, then '…' and the digest)."""
    if flags & _FLAG_DIGEST:
        stored = stored[:_LONG_PREFIX] + b"\xe2\x80\xa6" + stored[_LONG_PREFIX:].hex().encode()
    return stored.decode(errors="replace") if flags & _FLAG_STR else stored


class KeyTable:
    """This process's read-only view of a segment's key table."""

    def __init__(self, mm: object, q: memoryview, g: layout.Geometry, lay: layout.Layout, core: _core.Core):
        self._rows = lay.rows_off // _W  # row s's key header: generation copy, newest write
        self._row_words = lay.row_bytes // _W
        self._mm = mm
        self._q = q
        self._base = lay.keys_off // _W
        self._keys_off = lay.keys_off
        self.n_slots = g.key_slots
        self._idle_ns = g.idle_ns
        self._core = core

    def find(self, key: Key) -> tuple[int, int] | None:
        """``(slot, generation)`` of ``key``, or None; verify the generation after reading."""
        found = self._core.find(key)
        return None if found is None else (int(found[0]), int(found[1]))

    def generation(self, slot: int) -> int:
        return int(self._q[self._base + slot * _ENTRY_WORDS])

    def entry(self, slot: int) -> Key | None:
        """The key held by entry ``slot``, or None (never used, rolled back, or being rewritten)."""
        e = self._base + slot * _ENTRY_WORDS
        generation = self.generation(slot)
        if generation <= 0 or self._q[e + 1] == 0:
            return None
        word = self._q[e + 3]
        length, flags = word & 0xFFFFFFFF, (word >> 32) & 0xFFFFFFFF
        off = self._keys_off + slot * layout.KEY_ENTRY_BYTES + layout.KEY_BYTES_OFF
        stored = bytes(self._mm[off : off + min(length, layout.MAX_STORED_KEY)])  # type: ignore[index]
        return decode(stored, flags) if self.generation(slot) == generation else None

    def last_write_ns(self, slot: int) -> int:
        return int(self._q[self._rows + slot * self._row_words + 1])

    def entries(self) -> list[tuple[int, Key, int]]:
        """``(slot, key, last_ns)`` of every entry that has a key (idle or not)."""
        out = []
        for slot in range(self.n_slots):
            key = self.entry(slot)
            if key is not None:
                out.append((slot, key, self.last_write_ns(slot)))
        return out

    def is_idle(self, slot: int, now_ns: int) -> bool:
        return now_ns - self.last_write_ns(slot) > self._idle_ns
