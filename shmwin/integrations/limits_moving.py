"""limits' moving window in shared memory: each key's hit times, exactly, in memory that follows
the hits a key holds.

One segment per (limit L, period P), ``PREFIX.moving.L.P`` (role "moving-log"): a keyed
window whose rows hold, after a key header that keeps an 8-byte keyed digest of the key, two
entries (one word each: the hit's time rounded up to the segment's quantum, and its hits),
the shape of the key's run of entries in time order and its running total, and a chain of
*chunks* of 3 more entries each, taken from the segment's chunk heap as a key's hits need
them and given back from the oldest end once their hits have left (``format.MOVING_STATE``,
``CHUNK``; the native sections are ``core/moving.c``: a call walks only what left since the
last). A key with one or two hits costs its 64-byte row (and its index entry); further hits
held cost a 32-byte chunk per 3 (about 12 bytes a hit).

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

from ..backends.contract import Key
from ..backends.shm.roles import MovingEngine
from ..backends.shm.roles.moving import geometry as geometry
from ..clock import Clock
from ..policy import WINDOW_ON_FULL
from ..window import Window
from .limits_counters import attach_segment

ROLE = MovingEngine.role


class MovingLogs:
    """The moving windows of one (limit, period), for one storage (see the module docstring)."""

    role = ROLE

    def __init__(self, counts: Window):
        self.counts = counts
        ring = counts.geometry.rings[0]
        self.limit, self.period_ns, self.times = ring.limit, ring.bucket_ns, ring.n_buckets
        self._engine = MovingEngine(counts)  # shared memory's, always
        self._native_hit = self._engine.native_hit  # the core's own: no Python frame between
        # what limits' acquire_entry calls straight (StorageSegments.moving_hits): (key, cost >= 1)
        self.native_hit = self._native_hit

    @classmethod
    def open(
        cls, name: str, limit: int, period_ns: int, times: int, clock: Clock, capacity: int | None,
        create: bool, on_full: str = WINDOW_ON_FULL,
    ) -> MovingLogs | None:
        """Create or attach (``create``), or attach only: None if the segment is not there.
        ``on_full``: what the core answers a key that finds the table full (core/moving.c)."""
        if not create:
            w = attach_segment(name, ROLE, clock, on_full)
            return None if w is None else cls(w)
        want = geometry(limit, period_ns, times, capacity)
        return cls(Window.open_geometry(name, want, clock=clock, on_full=on_full))

    def hit(self, key: str, cost: int) -> bool:
        """Count ``cost`` hits now if the last period's hits leave room for them under the limit."""
        return bool(self._native_hit(key, cost))

    def test(self, key: str, cost: int) -> bool:
        """Would ``cost`` hits fit now? Nothing is counted."""
        used, _ = self._engine.get(key)
        return cost <= self.limit and used <= self.limit - cost

    def used_and_reset(self, key: str) -> tuple[int, int]:
        """(hits counted now, ns until the oldest of them is forgotten; 0 if none)."""
        return self._engine.get(key)

    def chunks(self) -> tuple[int, int, int, int]:
        """The chunk heap: (handed out, on the free list, reserved, its size)."""
        return self._engine.chunks()

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


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, hits counted at now_ns)`` of each key of a moving-log segment, read lock-free
    (for the tools; a key shows as its digest): :meth:`MovingEngine.values`."""
    return MovingEngine(w).values(now_ns)
