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
from ..backends.shm.roles import SlidingEngine
from ..backends.shm.roles.sliding import STATE_WORDS as STATE_WORDS
from ..backends.shm.roles.sliding import value as value
from ..backends.shm.roles.sliding import weighted as weighted
from ..geometry import Geometry, window_geometry
from ..window import Window
from .limits_counters import UNIT, CounterSegment, to_hits, to_units

ROLE = SlidingEngine.role


class SlidingCounters(CounterSegment):
    """The sliding window counters of one period, for one storage (see the module docstring)."""

    role, engine = ROLE, SlidingEngine
    _engine: SlidingEngine

    def __init__(self, counts: Window, period_ns: int):
        super().__init__(counts, period_ns)
        self._native_hit = self._engine.native_hit  # the core's own: no Python frame between

    @staticmethod
    def created_as(period_ns: int, capacity: int | None) -> Geometry:
        return geometry(period_ns, capacity)

    def hit(self, key: str, limit: int, amount: int | float) -> bool:
        """Count ``amount`` hits if the weighted count, floored to whole hits as limits floors
        it, leaves room for them under ``limit`` (counted in units)."""
        return bool(self._native_hit(key, to_units(limit), to_units(amount), UNIT))

    def window(self, key: str) -> tuple[int | float, int | float, int]:
        """``(previous count, current count, ns into the current window)`` now, in hits."""
        previous, current, elapsed_ns = self._engine.get(key)
        return to_hits(previous), to_hits(current), elapsed_ns

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


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, weighted count in whole hits)`` of each key of a sliding-counter segment,
    lock-free (for the tools)."""
    return SlidingEngine(w).values(now_ns)
