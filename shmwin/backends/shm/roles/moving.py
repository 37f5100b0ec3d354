"""Role "moving-log": each key's hit times, in its row (``format.MOVING_STATE``) and in chunks
of the segment's chunk heap (``CHUNK``), written by ``core/moving.c``; read back here lock-free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...._core import MovingLogCore
from ....errors import CorruptSegmentError
from ....geometry import ADDRESS_BUDGET_BYTES, DEFAULT_MAX_KEYS, Geometry, Ring
from ...contract import Key
from ..format import (
    CHUNK_BYTES,
    CHUNK_ENTRIES,
    CHUNK_ENTRIES_OFF,
    CHUNK_NEXT_OFF,
    CHUNKS_TOP_OFF,
    MOVING_HITS_MAX,
    MOVING_INLINE,
    MOVING_INLINE_SHIFT,
    MOVING_LAST_SHIFT,
    MOVING_LINK_MASK,
    MOVING_STAMP_SHIFT,
    MOVING_STATE_BYTES,
    MOVING_TAIL_SHIFT,
    WORD_BYTES,
    key_header_bytes,
    moving_quantum_shift,
)
from ..header import state_value
from .base import RoleEngine

ROLE = "moving-log"
ROW_BYTES = key_header_bytes(ROLE) + MOVING_STATE_BYTES  # a key's row: its header and inline entries


class MovingEngine(RoleEngine):
    role = ROLE
    _core_type = MovingLogCore
    _core: MovingLogCore

    @property
    def native_hit(self) -> Callable[[Key, int], bool]:
        """limits' hot path, ``native_hit(key, cost)``: the core's own method (bind it once: no
        Python frame between)."""
        return self._core.moving_hit

    def hit(self, key: Key, cost: int) -> bool:
        """Count ``cost`` hits now if the last period's hits leave room for them under the limit."""
        return bool(self._core.moving_hit(key, cost))

    def get(self, key: Key) -> tuple[int, int]:
        """(hits counted now, ns until the oldest of them is forgotten; 0 if none)."""
        used, reset_ns = self._core.moving_get(key)
        return int(used), int(reset_ns)

    def chunks(self) -> tuple[int, int, int, int]:
        """The chunk heap: (handed out, on the free list, reserved, its size)."""
        top, free, reserved, size = self._core.moving_chunks()
        return int(top), int(free), int(reserved), int(size)

    def values(self, now_ns: int) -> list[tuple[Key, int]]:
        """``(key, hits counted at now_ns)`` of each key (a key shows as its digest): the row's
        entries, then its chain's, each link bounds-checked (a chain that moves or is junk
        meanwhile is read up to there: a tool's reading, never a crash)."""
        backend = self.window
        q, lay, keys = backend._q, backend._lay, backend._keyed()
        ring = backend.geometry.rings[0]
        since, shift = now_ns - ring.bucket_ns, moving_quantum_shift(ring.bucket_ns)
        top_word = int(q[CHUNKS_TOP_OFF // WORD_BYTES])
        try:
            top = state_value(top_word, CHUNKS_TOP_OFF, backend.meta.hash_key, lay.n_chunks)
        except CorruptSegmentError:
            top = 0
        longest, first = chunks_per_key(ring.n_buckets) + 2, lay.ring_words[0]
        out = []
        for row, key, last_ns, generation in keys.entries_with_generation():
            if keys.is_idle(row, now_ns):
                continue
            at = (lay.rows_off + row * lay.row_bytes) // WORD_BYTES + first
            chain, _run, *inline = (int(x) & ((1 << 64) - 1) for x in q[at : at + 2 + MOVING_INLINE])
            words = run_words(q, lay.chunks_off, chain, inline, top, longest)
            if keys.generation(row) != generation:
                continue  # the row holds another key now: its words are not this key's
            entries = times(words, last_ns, shift)
            out.append((key, sum(hits for t, hits in entries if hits > 0 and t >= since)))
        return out


def geometry(limit: int, period_ns: int, times: int, capacity: int | None) -> Geometry:
    """A keyed window of one log ring: the period, at most min(limit, times) entries a key,
    the limit; ``capacity`` keys (None: as many as the address budget maps, the rows and
    every key's longest chain counted: only what is in use is ever reserved)."""
    if limit > MOVING_HITS_MAX:
        raise ValueError(f"a moving window's limit is at most {MOVING_HITS_MAX}, not {limit}")
    entries = max(1, min(limit, times))
    if capacity is None:
        per_key = ROW_BYTES + 64 + 512 + chunks_per_key(entries) * CHUNK_BYTES
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    ring = Ring(period_ns, entries, limit, log=True)
    return Geometry((ring,), ("hits",), "int64", "locked", 0, capacity, "window", ROLE)


def chunks_per_key(entries: int) -> int:
    """Chunks a key of ``entries`` hit times needs beyond its row's inline ones."""
    return -(-max(entries - MOVING_INLINE, 0) // CHUNK_ENTRIES)


def run_words(q: Any, chunks_off: int, chain: int, inline: list[int], top: int, longest: int) -> list[int]:
    """A key's run of entry words, oldest first, as its chain word ``chain`` shapes it: from the
    oldest chunk's ``tail`` entry through the chain to the newest chunk, then its row's
    ``inline`` entries in the run (a junk word or link ends the reading there)."""
    first, last = (chain & MOVING_LINK_MASK) - 1, (chain >> MOVING_LAST_SHIFT & MOVING_LINK_MASK) - 1
    tail, count = chain >> MOVING_TAIL_SHIFT & 3, chain >> MOVING_INLINE_SHIFT & 3
    words: list[int] = []
    link = first + 1 if first >= 0 else 0
    for _ in range(longest):
        if not 0 < link <= top:
            break
        at = (chunks_off + (link - 1) * CHUNK_BYTES) // WORD_BYTES
        chunk = [int(x) & ((1 << 64) - 1) for x in q[at : at + CHUNK_BYTES // WORD_BYTES]]
        entries = chunk[CHUNK_ENTRIES_OFF // WORD_BYTES :]
        words += entries[tail if link == first + 1 else 0 :]
        if link == last + 1:
            break
        link = chunk[CHUNK_NEXT_OFF // WORD_BYTES] >> (8 * (CHUNK_NEXT_OFF % WORD_BYTES)) & 0xFFFFFFFF
    return words + inline[: min(count, MOVING_INLINE)]


def times(words: list[int], last_ns: int, shift: int) -> list[tuple[int, int]]:
    """``(time ns, hits)`` of entry words, their stamps read back against the row's last write."""
    anchor = (max(last_ns, 0) + (1 << shift) - 1) >> shift
    out = []
    for w in words:
        w &= (1 << 64) - 1
        low = w >> MOVING_STAMP_SHIFT
        delta = (low - anchor) & 0xFFFFFFFF
        stamp = anchor + (delta - (1 << 32) if delta >= 1 << 31 else delta)
        out.append((stamp << shift if stamp >= 0 else -1, w & MOVING_HITS_MAX))
    return out
