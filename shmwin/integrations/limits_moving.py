"""limits' moving window in shared memory: each key's hit times, exactly, in memory that follows
the hits a key holds.

One segment per (limit L, period P), ``PREFIX.moving.L.P`` (role "moving-log"): a keyed
window whose rows hold, after the key header, two entries ``(time ns, hits)`` and the head of
a chain of *chunks* of 15 more entries each, taken from the segment's chunk heap as a key's
hits need them and given back once they have all left (``layout_words.MOVING_STATE``,
``CHUNK``; the native sections are ``core/moving.c``). A key with one hit costs its 96-byte
row (and its index entry); each further hit held costs 16 bytes, a chunk at a time.

As limits' memory storage: a hit counts while ``t >= now - P`` (it is forgotten exactly one
period after it), and a hit of ``cost`` is admitted when the last period's hits leave room
for it under L, counted in the same native section, so concurrent processes never admit
past the limit together. A key keeps at most ``min(L, times)`` entries (``?times=``, default
1024): a limit at or under it is exact; past it, the two oldest entries merge into the
newer one's time (their hits are forgotten later, never earlier: strict). So does a key
that cannot get a chunk (/dev/shm full).
"""

from __future__ import annotations

from typing import Any

from ..backends.contract import Key
from ..backends.shm.layout import state_value
from ..clock import Clock
from ..errors import CorruptSegmentError, GeometryMismatchError, WindowNotFoundError
from ..geometry import ADDRESS_BUDGET_BYTES, DEFAULT_MAX_KEYS, Geometry, Ring
from ..layout_words import (
    CHUNK_BYTES,
    CHUNK_ENTRIES,
    CHUNK_ENTRIES_OFF,
    CHUNK_NEXT,
    CHUNKS_TOP_OFF,
    MOVING_INLINE,
    WORD_BYTES,
)
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
        """Empty the segment; the number of keys that held hits."""
        keys = self.counts.keys()
        held = sum(1 for key in keys if self.used_and_reset(str(key))[0] > 0)
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
    entries = max(1, min(limit, times))
    if capacity is None:
        per_key = 96 + 64 + 512 + chunks_per_key(entries) * CHUNK_BYTES
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    ring = Ring(period_ns, entries, limit, log=True)
    return Geometry((ring,), ("hits",), "int64", "locked", 0, capacity, "window", ROLE)


STATE_WORDS = 1 + 2 * MOVING_INLINE  # chain, then the inline entries (t, hits)


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, hits counted at now_ns)`` of each key of a moving-log segment, read lock-free
    (for the tools): the row's entries, then its chain's, each link bounds-checked (a chain
    that moves or is junk meanwhile is read up to there: a tool's reading, never a crash)."""
    backend: Any = w._backend  # shared memory's, always: its words
    q, lay = backend._q, backend._lay
    ring = w.geometry.rings[0]
    since = now_ns - ring.bucket_ns
    top_word = int(q[CHUNKS_TOP_OFF // WORD_BYTES])
    try:
        top = state_value(top_word, CHUNKS_TOP_OFF, backend.meta.hash_key, lay.n_chunks)
    except CorruptSegmentError:
        top = 0
    longest = chunks_per_key(ring.n_buckets)
    out = []
    for key, (chain, *inline) in backend._key_states(STATE_WORDS):
        entries = list(zip(inline[0::2], inline[1::2], strict=True))
        for _ in range(longest):
            if not 0 < chain <= top:
                break
            at = (lay.chunks_off + (chain - 1) * CHUNK_BYTES) // WORD_BYTES
            words = [int(x) for x in q[at : at + CHUNK_BYTES // WORD_BYTES]]
            chain = words[CHUNK_NEXT]
            body = words[CHUNK_ENTRIES_OFF // WORD_BYTES :]
            entries += zip(body[0::2], body[1::2], strict=True)
        out.append((key, sum(hits for t, hits in entries if hits > 0 and t >= since)))
    return out
