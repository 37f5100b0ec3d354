"""limits' sliding window counter in shared memory, by limits' own algorithm.

Windows are aligned on ``now // P``; each key keeps the count of its current window and of
the one before (``format.SLIDING_STATE``: a window index and two counts, 24 bytes after
the key header), in one segment per period P, ``PREFIX.sliding.P`` (role "sliding-counter").
A hit is admitted when limits' weighted count -- the previous window's count weighed by the
part of it still inside the last period, plus the current count -- leaves room for its cost,
and counted in the same native section (``core/counters.c``), so concurrent processes never
admit past the limit together (limits' memory storage checks, counts, then takes the count
back when another thread won the race).

This is an approximation by design, limits' own: right after a window turns, the previous
window's hits are assumed to have been spread evenly over it. The exact count of the last
period is limits' moving window strategy, which shm:// keeps as hit times (exactly).
"""

from __future__ import annotations

import dataclasses

from ..backends.contract import Key
from ..geometry import Geometry, window_geometry
from ..ring import EMPTY_EPOCH
from ..window import Window
from .limits_counters import UNIT, CounterSegment, to_hits, to_units

ROLE = "sliding-counter"
STATE_WORDS = 3  # window, current, previous


class SlidingCounters(CounterSegment):
    """The sliding window counters of one period, for one storage (see the module docstring)."""

    role = ROLE

    @staticmethod
    def created_as(period_ns: int, capacity: int | None) -> Geometry:
        return geometry(period_ns, capacity)

    def hit(self, key: str, limit: int, amount: int | float) -> bool:
        """Count ``amount`` hits if the weighted count, floored to whole hits as limits floors
        it, leaves room for them under ``limit`` (counted in units)."""
        return bool(self._core.sliding_hit(key, to_units(limit), to_units(amount), UNIT))

    def window(self, key: str) -> tuple[int | float, int | float, int]:
        """``(previous count, current count, ns into the current window)`` now, in hits."""
        previous, current, elapsed_ns, _ = self._core.sliding_get(key)
        return to_hits(int(previous)), to_hits(int(current)), int(elapsed_ns)

    def clear(self, key: str) -> None:
        self.counts.clear(key)

    def reset(self) -> int:
        """Empty the segment; the number of keys that held counts."""
        keys = self.counts.keys()
        held = sum(1 for key in keys if any(self.window(str(key))[:2]))
        self.counts.reset()
        return held

    def close(self) -> None:
        self.counts.close()


def geometry(period_ns: int, capacity: int | None) -> Geometry:
    """A keyed window of two buckets of the period (the row's room for the state, and its idle
    time: a key's counts matter up to two periods after its newest write); its role tells the
    tools what it holds."""
    g = window_geometry(f"{2 * period_ns}ns", 2, None, ("hits",), "int64", None, None, capacity, keyed=True)
    return dataclasses.replace(g, role=ROLE)


def weighted(previous: int, current: int, elapsed_ns: int, period_ns: int) -> int:
    """limits' weighted count, floored, in integers as the core computes it."""
    return previous * (period_ns - elapsed_ns) // period_ns + current


def value(window: int, current: int, previous: int, now_ns: int, period_ns: int) -> int:
    """A key's weighted count at ``now_ns`` from its state words (``core/counters.c``'s
    sliding_read: a state one window ahead counts at its start; junk counts 0)."""
    w, elapsed = divmod(now_ns, period_ns)
    if window == EMPTY_EPOCH or window < 0 or current < 0 or previous < 0:
        return 0
    if window == w + 1:
        w, elapsed = window, 0
    if window == w:
        return weighted(previous, current, elapsed, period_ns)
    return weighted(current, 0, elapsed, period_ns) if window == w - 1 else 0


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, weighted count in whole hits)`` of each key of a sliding-counter segment,
    lock-free (for the tools)."""
    period_ns = w.geometry.bucket_ns
    states = w._backend._key_states(STATE_WORDS)  # type: ignore[attr-defined]
    return [(key, value(index, cur, prev, now_ns, period_ns) // UNIT) for key, (index, cur, prev) in states]
