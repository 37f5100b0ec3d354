"""ShmLimiter: a limiter in a shared-memory segment, the default backend of ``Limiter``.

One segment of kind "limiter" holds, per key, one ring per rate. A rate of ``limit`` per
period P gets ``buckets`` buckets of P / buckets, plus one: the ring counts the current
bucket and ``buckets`` whole ones before it, so a hit is forgotten between P and
P + P/buckets after it happened.

Each ring is compact (``layout.py``, "Limiter rings"): a header of (head epoch, running
total, zeroed epoch, tail), then one count per bucket with no epoch of its own (a count's
epoch follows from the head), 4 bytes wide when the limit fits an int32. The running-total step --
advance the head, subtract the buckets that left the window (amortised O(1)), compare every
rate, count in all of them or in none -- is the native core's (``hit_row`` in ``core/rings.c``),
under the key's row lock; ``hit`` and ``check`` are its methods, called with nothing in
between. Memory per key is fixed by ``buckets`` (and, 4 or 8 bytes a count, the limit's size).
"""

from __future__ import annotations

from ..._core import LimiterCore
from ...geometry import Geometry, rates_of
from ...rate import Rate
from ..contract import Check, Key, Request
from . import live
from .decider import ShmDecider, open_changing
from .window import ShmOptions


def _is_limiter(g: Geometry) -> bool:
    return g.kind == "limiter"


class ShmLimiter(ShmDecider):
    """A limiter-kind :class:`ShmWindow` and its native core's check-and-count; its rates may
    change live (``live.py``, :class:`ShmDecider`)."""

    _core_type = LimiterCore
    _core: LimiterCore
    _methods = ("hit", "check")

    @classmethod
    def open(cls, req: Request) -> ShmLimiter:
        """The registry's entry: create-or-attach ``req.geometry``, or attach (``None``); an
        existing limiter of other rates changes by ``on_change`` (``decider.open_changing``)."""
        return cls(open_changing(req, _is_limiter, "a limiter"), ShmOptions.of(req))

    @property
    def rates(self) -> list[Rate]:
        """The rates in force: the live ones, once changed (the name's new segment, once moved)."""
        return rates_of(live.live_geometry(self._current()))

    def hit(self, key: Key, cost: int = 1) -> bool:
        """The instance's ``hit`` is the core's own method; this is its signature."""
        return bool(self._core.hit(key, cost))

    def check(self, key: Key, cost: int, commit: bool, detail: bool = True) -> Check:
        """The instance's ``check`` is the core's own method; this is its signature."""
        return self._core.check(key, cost, commit, detail)

    def refund(self, key: Key, cost: int) -> int:
        return int(self._core.refund(key, cost))

    def charge(self, key: Key, cost: int) -> None:
        self._core.charge(key, cost)

    def __repr__(self) -> str:
        rates = ";".join(str(r) for r in self.rates)
        return f"<shmwin.Limiter {self.name!r} {rates} capacity={self.geometry.capacity}>"
