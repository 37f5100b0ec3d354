"""Role "sliding-counter": each key's row holds a window index and two counts
(``format.SLIDING_STATE``), written by one native section (``core/counters.c``)."""

from __future__ import annotations

from collections.abc import Callable

from ...._core import SlidingCounterCore
from ....geometry import EMPTY_EPOCH
from ...contract import Key
from .base import RoleEngine
from .counters import UNIT

STATE_WORDS = 3  # window, current, previous


class SlidingEngine(RoleEngine):
    role = "sliding-counter"
    _core_type = SlidingCounterCore
    _core: SlidingCounterCore

    @property
    def native_hit(self) -> Callable[..., bool]:
        """limits' hot path, ``native_hit(key, limit_units, units, UNIT)``: the core's own method
        (bind it once: no Python frame between)."""
        return self._core.sliding_hit

    def hit(self, key: str, limit_units: int, units: int) -> bool:
        """Count ``units`` if the weighted count, floored to whole hits, leaves room under the limit."""
        # _core.pyi (helper F's) names no `unit` argument, which the core takes (counters.c)
        return bool(self._core.sliding_hit(key, limit_units, units, UNIT))  # type: ignore[call-arg]

    def get(self, key: str) -> tuple[int, int, int]:
        """``(previous units, current units, ns into the current window)`` now."""
        previous, current, elapsed_ns, _ = self._core.sliding_get(key)
        return int(previous), int(current), int(elapsed_ns)

    def values(self, now_ns: int) -> list[tuple[Key, int]]:
        """``(key, weighted count in whole hits)`` of each key."""
        period_ns = self.window.geometry.bucket_ns
        states = self.key_states(STATE_WORDS)
        return [(key, value(i, cur, prev, now_ns, period_ns) // UNIT) for key, (i, cur, prev) in states]


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
