"""limits' moving window in shared memory: each key's hit times, exactly, in memory that follows
the hits a key holds.

One segment per (limit L, period P), ``PREFIX.moving.L.P`` (role "moving-log"): a keyed
window whose rows hold, after a key header that keeps an 8-byte keyed digest of the key, two
entries (one word each: the hit's time rounded up to the segment's quantum, and its hits)
and the head of a chain of *chunks* of 3 more entries each, taken from the segment's chunk
heap as a key's hits need them and given back once they have all left
(``format.MOVING_STATE``, ``CHUNK``; the native sections are ``core/moving.c``). A key
with one or two hits costs its 56-byte row (and its index entry); further hits held cost a
32-byte chunk per 3 (about 11 bytes a hit).

As limits' memory storage: a hit counts while ``t >= now - P`` (it is forgotten one period
after it: at most a quantum late, 32 ns for periods up to 8.6 s, 256 ns for a minute, 524 us
for a day -- never early), and a hit of ``cost`` is admitted when the last period's hits leave room
for it under L, counted in the same native section, so concurrent processes never admit
past the limit together. A key keeps at most ``min(L, times)`` entries (``?times=``, default
1024): a limit at or under it is exact; past it, the two oldest entries merge into the
newer one's time (their hits are forgotten later, never earlier: strict). So does a key
that cannot get a chunk (/dev/shm full).
"""

from __future__ import annotations

from typing import Any

from ..backends.contract import Key
from ..backends.shm.format import (
    CHUNK_BYTES,
    CHUNK_ENTRIES,
    CHUNK_ENTRIES_OFF,
    CHUNK_NEXT_OFF,
    CHUNKS_TOP_OFF,
    MOVING_HITS_MAX,
    MOVING_INLINE,
    MOVING_STAMP_SHIFT,
    MOVING_STATE_BYTES,
    WORD_BYTES,
    key_header_bytes,
    moving_quantum_shift,
)
from ..backends.shm.layout import state_value
from ..clock import Clock
from ..errors import CorruptSegmentError, GeometryMismatchError, WindowNotFoundError
from ..geometry import ADDRESS_BUDGET_BYTES, DEFAULT_MAX_KEYS, Geometry, Ring
from ..window import Window

ROLE = "moving-log"


class MovingLogs:
    """The moving windows of one (limit, period), for one storage (see the module docstring)."""

    role = ROLE

    def __init__(self, counts: Window):
        self.counts = counts
        ring = counts.geometry.rings[0]
        self.limit, self.period_ns, self.times = ring.limit, ring.bucket_ns, ring.n_buckets
        self._core = counts._backend._core  # type: ignore[attr-defined]  # shared memory's, always: its sections

    @classmethod
    def open(
        cls, name: str, limit: int, period_ns: int, times: int, clock: Clock, capacity: int | None,
        create: bool,
    ) -> MovingLogs | None:
        """Create or attach (``create``), or attach only: None if the segment is not there."""
        if not create:
            try:
                w = Window.attach(name, clock=clock)
            except WindowNotFoundError:
                return None
            if w.geometry.role != ROLE:
                role = w.geometry.role
                w.close()
                raise GeometryMismatchError(f"{name!r} is not a {ROLE} segment (role {role!r})")
            return cls(w)
        return cls(Window.open_geometry(name, geometry(limit, period_ns, times, capacity), clock=clock))

    def hit(self, key: str, cost: int) -> bool:
        """Count ``cost`` hits now if the last period's hits leave room for them under the limit."""
        return bool(self._core.moving_hit(key, cost))

    def test(self, key: str, cost: int) -> bool:
        """Would ``cost`` hits fit now? Nothing is counted."""
        used, _ = self._core.moving_get(key)
        return cost <= self.limit and used <= self.limit - cost

    def used_and_reset(self, key: str) -> tuple[int, int]:
        """(hits counted now, ns until the oldest of them is forgotten; 0 if none)."""
        used, reset_ns = self._core.moving_get(key)
        return int(used), int(reset_ns)

    def chunks(self) -> tuple[int, int, int, int]:
        """The chunk heap: (handed out, on the free list, reserved, its size)."""
        top, free, reserved, size = self._core.moving_chunks()
        return int(top), int(free), int(reserved), int(size)

    def clear(self, key: Key) -> None:
        self.counts.clear(key)

    def reset(self) -> int:
        """Empty the segment; the number of keys that held hits (its rows keep digests, not
        keys: counted from the rows, as the tools read them)."""
        held = sum(1 for _, hits in values(self.counts, int(self.counts._clock())) if hits > 0)
        self.counts.reset()
        return held

    def close(self) -> None:
        self.counts.close()


def chunks_per_key(times: int) -> int:
    return -(-max(times - MOVING_INLINE, 0) // CHUNK_ENTRIES)


def geometry(limit: int, period_ns: int, times: int, capacity: int | None) -> Geometry:
    """A keyed window of one log ring: the period, at most min(limit, times) entries a key,
    the limit; ``capacity`` keys (None: as many as the address budget maps, the rows and
    every key's longest chain counted: only what is in use is ever reserved)."""
    if limit > MOVING_HITS_MAX:
        raise ValueError(f"a moving window's limit is at most {MOVING_HITS_MAX}, not {limit}")
    entries = max(1, min(limit, times))
    if capacity is None:
        row_bytes = key_header_bytes(ROLE) + MOVING_STATE_BYTES
        per_key = row_bytes + 64 + 512 + chunks_per_key(entries) * CHUNK_BYTES
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    ring = Ring(period_ns, entries, limit, log=True)
    return Geometry((ring,), ("hits",), "int64", "locked", 0, capacity, "window", ROLE)


def _times(words: list[int], last_ns: int, shift: int) -> list[tuple[int, int]]:
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


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, hits counted at now_ns)`` of each key of a moving-log segment, read lock-free
    (for the tools; a key shows as its digest): the row's entries, then its chain's, each link
    bounds-checked (a chain that moves or is junk meanwhile is read up to there: a tool's
    reading, never a crash)."""
    backend: Any = w._backend  # shared memory's, always: its words
    q, lay, keys = backend._q, backend._lay, backend._keyed()
    ring = w.geometry.rings[0]
    since, shift = now_ns - ring.bucket_ns, moving_quantum_shift(ring.bucket_ns)
    top_word = int(q[CHUNKS_TOP_OFF // WORD_BYTES])
    try:
        top = state_value(top_word, CHUNKS_TOP_OFF, backend.meta.hash_key, lay.n_chunks)
    except CorruptSegmentError:
        top = 0
    longest, first = chunks_per_key(ring.n_buckets), lay.ring_words[0]
    out = []
    for row, key, last_ns, generation in keys.entries_with_generation():
        if keys.is_idle(row, now_ns):
            continue
        at = (lay.rows_off + row * lay.row_bytes) // WORD_BYTES + first
        chain, *words = (int(x) for x in q[at : at + 1 + MOVING_INLINE])
        for _ in range(longest):
            if not 0 < chain <= top:
                break
            at = (lay.chunks_off + (chain - 1) * CHUNK_BYTES) // WORD_BYTES
            chunk = [int(x) & ((1 << 64) - 1) for x in q[at : at + CHUNK_BYTES // WORD_BYTES]]
            chain = chunk[CHUNK_NEXT_OFF // WORD_BYTES] >> (8 * (CHUNK_NEXT_OFF % WORD_BYTES)) & 0xFFFFFFFF
            words += chunk[CHUNK_ENTRIES_OFF // WORD_BYTES :]
        if keys.generation(row) != generation:
            continue  # the row holds another key now: its words are not this key's
        entries = _times(words, last_ns, shift)
        out.append((key, sum(hits for t, hits in entries if hits > 0 and t >= since)))
    return out
