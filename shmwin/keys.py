"""The key table of a keyed segment: open addressing, fixed capacity, idle keys reused.

Entry *s* names the key whose counts live in row *s* (see ``layout``). Probing
is double hashing over a prime number of entries, so a probe sequence visits
every entry; it gives up after ``MAX_PROBES`` (at the table's 80 % design load
the chance of that is below 1e-12 per key).

Concurrency contract:

* finding a key is lock-free: an entry's generation is read before and after
  its key bytes, and entries never go back to generation 0;
* giving an entry a key happens under the key-table lock *and* the entry's row
  lock, so no writer is inside the row being recycled; the generation is bumped
  last, after the key bytes and the emptied row;
* a writer holds the row lock and re-checks the generation it looked up; a
  changed generation means the key moved, and it looks again.

An entry is reused once its key has been idle for longer than every ring's span
(``Geometry.idle_ns``): by then all of its buckets are stale anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

from . import layout
from .errors import KeyTableFullError
from .locks import LockTable

Key = str | bytes

MAX_PROBES = 128
_SLOT_MASK = 0xFFFFFFFF  # capacity <= 50M: a slot fits 32 bits
_W = layout.WORD_BYTES
_ENTRY_WORDS = layout.KEY_ENTRY_BYTES // _W
_FLAG_STR, _FLAG_DIGEST = 1, 2
_LONG_PREFIX = layout.MAX_STORED_KEY - 16


def encode(key: Key) -> tuple[bytes, int]:
    """The bytes stored for ``key`` and its flags; long keys keep a prefix and a digest."""
    if isinstance(key, str):
        raw, flags = key.encode(), _FLAG_STR
    elif isinstance(key, bytes | bytearray | memoryview):
        raw, flags = bytes(key), 0
    else:
        raise TypeError(f"a key is a str or bytes, not {type(key).__name__}")
    if len(raw) > layout.MAX_STORED_KEY:
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        raw, flags = raw[:_LONG_PREFIX] + digest, flags | _FLAG_DIGEST
    return raw, flags


def decode(stored: bytes, flags: int) -> Key:
    """The key as callers gave it (long keys: the stored prefix, then '…' and the digest)."""
    if flags & _FLAG_DIGEST:
        stored = stored[:_LONG_PREFIX] + b"\xe2\x80\xa6" + stored[_LONG_PREFIX:].hex().encode()
    return stored.decode(errors="replace") if flags & _FLAG_STR else stored


def key_hash(stored: bytes, flags: int) -> int:
    """64-bit hash, the same in every process (Python's hash() is salted per process)."""
    h = int.from_bytes(hashlib.blake2b(stored, digest_size=8, salt=bytes([flags])).digest(), "little")
    return h >> 1 or 1  # fits an i64 word, never 0


class KeyTable:
    """This process's view of a segment's key table."""

    def __init__(self, mm: Any, q: memoryview, g: layout.Geometry, lay: layout.Layout, locks: LockTable):
        self._rows = lay.rows_off // _W  # row s's key header: generation copy, newest write
        self._row_words = lay.row_bytes // _W
        self._mm = mm
        self._q = q
        self._base = lay.keys_off // _W
        self._keys_off = lay.keys_off
        self.n_slots = g.key_slots
        self._n_key_locks = g.n_key_locks
        self._idle_ns = g.idle_ns
        self._locks = locks
        self._reset_row: Callable[[int], None] = lambda slot: None
        # key -> generation << 32 | slot, checked under the row lock; one int, not a tuple of
        # two, is one heap object fewer to miss on for every hit of a cold key
        self.cache: dict[Key, int] = {}

    def lock_of(self, slot: int) -> int:
        return layout.FIRST_KEY_LOCK + slot % self._n_key_locks

    def on_reuse(self, reset_row: Callable[[int], None]) -> None:
        """How to empty a row before its entry gets a new key (set by the window)."""
        self._reset_row = reset_row

    # -- writers: return holding the row lock ------------------------------------------------

    def lock_key(self, key: Key, now_ns: int, create: bool) -> int:
        """Lock the row of ``key`` and return its slot, or -1 if absent and not ``create``.

        Raises :class:`KeyTableFullError` if it must be created and no entry is free.
        """
        while True:
            packed = self.cache.get(key)
            hit = None if packed is None else (packed & _SLOT_MASK, packed >> 32)
            if hit is None:
                hit = self._find(*encode(key))
            if hit is None:
                if not create:
                    return -1
                hit = self._insert(key, now_ns)
                if hit is None:
                    continue
            slot, generation = hit
            lock = self.lock_of(slot)
            self._locks.acquire(lock)
            if self._q[self._rows + slot * self._row_words] == generation:
                try:
                    self._remember(key, hit)
                except BaseException:
                    self._locks.release(lock)
                    raise
                return slot
            self._locks.release(lock)  # the entry was recycled meanwhile: look again
            self.cache.pop(key, None)

    def unlock_row(self, slot: int) -> None:
        self._locks.release(self.lock_of(slot))

    def touch(self, slot: int, now_ns: int) -> None:
        """Record a write (caller holds the row lock)."""
        self._q[self._rows + slot * self._row_words + 1] = now_ns

    # -- readers: lock-free ------------------------------------------------------------------

    def find(self, key: Key) -> tuple[int, int] | None:
        """``(slot, generation)`` of ``key``, or None; verify the generation after reading."""
        packed = self.cache.get(key)
        return self._find(*encode(key)) if packed is None else (packed & _SLOT_MASK, packed >> 32)

    def generation(self, slot: int) -> int:
        return int(self._q[self._base + slot * _ENTRY_WORDS])

    def entry(self, slot: int) -> Key | None:
        """The key held by entry ``slot``, or None (never used, or being rewritten)."""
        generation = self.generation(slot)
        if generation <= 0:
            return None
        stored, flags = self._stored(slot)
        return decode(stored, flags) if self.generation(slot) == generation else None

    def entries(self) -> list[tuple[int, Key, int]]:
        """``(slot, key, last_ns)`` of every entry that has a key (idle or not)."""
        out = []
        for slot in range(self.n_slots):
            last_ns = int(self._q[self._rows + slot * self._row_words + 1])
            key = self.entry(slot)
            if key is not None:
                out.append((slot, key, last_ns))
        return out

    def is_idle(self, slot: int, now_ns: int) -> bool:
        return bool(now_ns - self._q[self._rows + slot * self._row_words + 1] > self._idle_ns)

    # -- internals ---------------------------------------------------------------------------

    def _probe(self, h: int) -> Iterator[int]:
        """The entries key hash ``h`` may live in, in order (lazily: most lookups stop early)."""
        n = self.n_slots
        slot, step = h % n, 1 + (h >> 20) % (n - 1) if n > 1 else 1
        for _ in range(min(MAX_PROBES, n)):
            yield slot
            slot = (slot + step) % n

    def _stored(self, slot: int) -> tuple[bytes, int]:
        e = self._base + slot * _ENTRY_WORDS
        word = self._q[e + 3]
        length, flags = word & 0xFFFFFFFF, (word >> 32) & 0xFFFFFFFF
        off = self._keys_off + slot * layout.KEY_ENTRY_BYTES + layout.KEY_BYTES_OFF
        return bytes(self._mm[off : off + min(length, layout.MAX_STORED_KEY)]), flags

    def _matches(self, slot: int, h: int, stored: bytes, flags: int) -> bool:
        return self._q[self._base + slot * _ENTRY_WORDS + 1] == h and self._stored(slot) == (stored, flags)

    def _find(self, stored: bytes, flags: int, h: int = 0) -> tuple[int, int] | None:
        h = h or key_hash(stored, flags)
        q = self._q
        for slot in self._probe(h):
            generation = q[self._base + slot * _ENTRY_WORDS]
            if not generation:
                return None  # never used: the key would have been placed here or before
            if self._matches(slot, h, stored, flags) and q[self._base + slot * _ENTRY_WORDS] == generation:
                return slot, int(generation)
        return None

    def _insert(self, key: Key, now_ns: int) -> tuple[int, int] | None:
        """Give ``key`` an entry under the key-table lock; None if it appeared meanwhile."""
        stored, flags = encode(key)
        h = key_hash(stored, flags)
        self._locks.acquire(layout.LOCK_KEY_TABLE)
        try:
            if self._find(stored, flags, h) is not None:
                return None
            for slot in self._probe(h):
                if self._q[self._base + slot * _ENTRY_WORDS] and not self.is_idle(slot, now_ns):
                    continue
                lock = self.lock_of(slot)
                self._locks.acquire(lock)
                try:
                    if self.generation(slot) and not self.is_idle(slot, now_ns):
                        continue  # written while we waited for its lock
                    return slot, self._assign(slot, stored, flags, h, now_ns)
                finally:
                    self._locks.release(lock)
            raise KeyTableFullError(
                f"no free key entry for {key!r}: all {self.n_slots} entries it may use hold live "
                "keys. Give the window a larger capacity"
            )
        finally:
            self._locks.release(layout.LOCK_KEY_TABLE)

    def _assign(self, slot: int, stored: bytes, flags: int, h: int, now_ns: int) -> int:
        """Write the entry, empty its row, publish the new generation last (both locks held)."""
        q, e = self._q, self._base + slot * _ENTRY_WORDS
        off = self._keys_off + slot * layout.KEY_ENTRY_BYTES + layout.KEY_BYTES_OFF
        generation = int(q[e]) + 1
        q[e] = -generation  # negative while rewriting: readers' generation checks fail
        self._mm[off : off + layout.MAX_STORED_KEY] = stored.ljust(layout.MAX_STORED_KEY, b"\0")
        q[e + 3] = len(stored) | flags << 32
        q[e + 1] = h
        self._reset_row(slot)
        row = self._rows + slot * self._row_words
        q[row + 1] = now_ns
        q[row] = generation  # the writers' copy, then the entry: readers trust it last
        q[e] = generation
        return generation

    def _remember(self, key: Key, hit: tuple[int, int]) -> None:
        if len(self.cache) > 4 * self.n_slots:
            self.cache.clear()
        self.cache[key] = hit[1] << 32 | hit[0]
