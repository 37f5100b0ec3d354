"""Role "fixed-window": each key's row holds its window's start and its count (``format.FIXED_STATE``),
changed together by one native section (``core/counters.c``)."""

from __future__ import annotations

from ...._core import FixedWindowCore
from ....geometry import EMPTY_EPOCH
from ...contract import Key
from .base import RoleEngine
from .counters import to_hits

STATE_WORDS = 2  # start, count


class FixedEngine(RoleEngine):
    role = "fixed-window"
    _core_type = FixedWindowCore
    _core: FixedWindowCore

    def incr(self, key: str, units: int) -> int:
        """Count ``units``; the key's count after it, in units."""
        count, _ = self._core.fixed_incr(key, units)
        return int(count)

    def get(self, key: str) -> tuple[int, int] | None:
        """``(count in units, end ns)`` of the key's live window, or None if it has none."""
        live = self._core.fixed_get(key)
        return None if live is None else (int(live[0]), int(live[1]))

    def values(self, now_ns: int) -> list[tuple[Key, int | float]]:
        """``(key, count in hits)`` of each key: its live window's, else 0."""
        period_ns = self.window.geometry.bucket_ns
        states = self.key_states(STATE_WORDS)
        return [(key, to_hits(value(start, count, now_ns, period_ns))) for key, (start, count) in states]


def value(start: int, count: int, now_ns: int, period_ns: int) -> int:
    """A key's count at ``now_ns``: its window's while live, else 0 (junk counts 0)."""
    live = start != EMPTY_EPOCH and start >= 0 and now_ns < start + period_ns
    return max(count, 0) if live else 0
