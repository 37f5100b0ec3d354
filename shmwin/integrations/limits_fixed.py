"""limits' fixed window in shared memory: a key's window starts at its first hit.

limits' storages (memory, Redis, memcached) start a key's window at the first hit and end
it one period later, exactly; the next hit after that starts the next window. Here the same
holds across processes with one segment per period P, ``PREFIX.fixed.P`` (role
"fixed-window"), and one native section per call (``core/counters.c``): each key's row
holds its window's start and its count (``format.FIXED_STATE``: 16 bytes after the key
header), changed together under the row's lock, so every process agrees on both.

As limits' memory storage: ``incr`` returns the count after it, starting a window at now
when the key has none live (or one whose count is 0); a window is live while
``now < start + P``; ``get`` and ``get_expiry`` read the live window (0, and now, if none).
"""

from __future__ import annotations

import dataclasses

from ..backends.contract import Key
from ..backends.shm.roles import FixedEngine
from ..backends.shm.roles.fixed import STATE_WORDS as STATE_WORDS
from ..backends.shm.roles.fixed import value as value
from ..geometry import Geometry, window_geometry
from ..window import Window
from .limits_counters import CounterSegment, to_hits, to_units

ROLE = FixedEngine.role


class FixedWindows(CounterSegment):
    """The fixed windows of one period, for one storage (see the module docstring)."""

    role, engine = ROLE, FixedEngine
    _engine: FixedEngine

    @staticmethod
    def created_as(period_ns: int, capacity: int | None) -> Geometry:
        return geometry(period_ns, capacity)

    def incr(self, key: str, amount: int | float) -> int | float:
        """Count ``amount`` hits; the key's count after it, in hits (counted in units)."""
        return to_hits(self._engine.incr(key, to_units(amount)))

    def get(self, key: str) -> int | float:
        live = self._engine.get(key)
        return 0 if live is None else to_hits(live[0])

    @property
    def fixed_engine(self) -> FixedEngine:
        """Its engine: a storage sums a key limits did not build over its segments' (boards.ForeignSum)."""
        return self._engine

    @property
    def hash_key_named(self) -> tuple[str, bytes]:
        """(its name, its SipHash key): a storage's new fixed window takes one of its others' (boards.py)."""
        return self.counts.name, self.counts.meta.hash_key

    def end_ns(self, key: str) -> int | None:
        """When ``key``'s live window ends, or None if it has none."""
        live = self._engine.get(key)
        return None if live is None else live[1]

    def clear(self, key: str) -> None:
        """Forget the key's window: its next hit starts a new one."""
        self.counts.clear(key)

    def reset(self) -> int:
        """Empty the segment; the number of keys whose live window held hits."""
        keys = self.counts.keys()
        live = sum(1 for key in keys if self.get(str(key)))
        self.counts.reset()
        return live

    def close(self) -> None:
        self.counts.close()


def geometry(period_ns: int, capacity: int | None) -> Geometry:
    """A keyed window of one bucket of the period (the row's room for the state, and its idle
    time: a key's row is kept a period past its newest write), ``capacity`` keys at most or
    a table that grows with the keys in use (None); its role tells the tools what it holds."""
    g = window_geometry(f"{period_ns}ns", 1, None, ("hits",), "int64", None, None, capacity, keyed=True)
    return dataclasses.replace(g, role=ROLE)


def values(w: Window, now_ns: int) -> list[tuple[Key, int | float]]:
    """``(key, count in hits)`` of each key of a fixed-window segment, read lock-free (for the tools)."""
    return FixedEngine(w).values(now_ns)
