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

import weakref
from collections.abc import Callable
from typing import Any

from ..._core import LimiterCore
from ...errors import GeometryMismatchError
from ...geometry import Geometry, rates_of
from ...rate import Rate
from ..contract import Check, Key, Request
from . import live, native
from .decider import ShmDecider, open_window
from .window import ShmOptions, ShmWindow


def _is_limiter(g: Geometry) -> bool:
    return g.kind == "limiter"


class ShmLimiter(ShmDecider):
    """A limiter-kind :class:`ShmWindow` and its native core's check-and-count.

    Its rates may change live (``live.py``): in place, the core reads them at its next call;
    moved to a new segment, the core's hook (:meth:`_moved`) reopens the name and binds the
    new core here, and each front that bound our methods is told (:meth:`_on_rebind`)."""

    _core_type = LimiterCore
    _core: LimiterCore

    def __init__(self, window: ShmWindow, opts: ShmOptions | None = None):
        super().__init__(window)
        self._opts = opts or ShmOptions()
        self._tally: tuple[Any, bool] = (None, False)
        self._rebinds: list[Callable[[], None]] = []
        self._bind_core()

    def _bind_core(self) -> None:
        self.hit = self._core.hit  # type: ignore[method-assign]  # the native check-and-count
        self.check = self._core.check  # type: ignore[method-assign]
        ref = weakref.ref(self)  # the core holds its hook: no cycle through it
        core = self._core

        def hook(method: str) -> Any:
            me = ref()
            if me is None:
                raise GeometryMismatchError("this limiter's segment was replaced and the limiter is gone")
            return me._moved(method, core)

        self._core.set_on_moved(hook)

    @classmethod
    def open(cls, req: Request) -> ShmLimiter:
        """The registry's entry: create-or-attach ``req.geometry``, or attach (``None``). An
        existing limiter of other rates changes by ``on_change`` (``live.py``); not given (shmwin's
        own parts: a local share, an adaptive limiter), it raises as it always did."""
        opts = ShmOptions.of(req)
        if req.geometry is None:
            # a retired one: its first call follows the name
            return cls(open_window(req, _is_limiter, "a limiter"), opts)
        on_change = live.check_on_change(req.option("on_change", "raise"))
        try:
            window = open_window(req, _is_limiter, "a limiter")
        except GeometryMismatchError as exc:
            if on_change == "raise":
                raise GeometryMismatchError(f"{exc} (on_change='carry' changes its rates live)") from None
            window = live.reopen(req.name, opts)
            if not _is_limiter(window.geometry):
                window.close()
                raise
        return cls(live.change(window, req.geometry, on_change, opts), opts)

    def _moved(self, method: str, core: LimiterCore) -> Any:
        """The hook of a core whose segment was replaced: the method to call instead, on the
        name's segment now (reopened once, then every front told)."""
        if core is self._core:
            old = self._window
            window = live.reopen(self.name, self._opts)
            self._window = window
            self._core = native.core_as(window._core, LimiterCore)
            self._bind_core()
            self._set_tally(*self._tally)
            old.close()
            for rebind in self._rebinds:
                rebind()
        return getattr(self._core, method)

    def _on_rebind(self, rebind: Callable[[], None]) -> None:
        """Call ``rebind()`` once this backend's methods are another core's (a live move)."""
        self._rebinds.append(rebind)

    def _set_tally(self, tally: Any, shadow: bool) -> None:
        self._tally = (tally, shadow)
        super()._set_tally(tally, shadow)

    @property
    def rates(self) -> list[Rate]:
        """The rates in force: the live ones, once changed (the name's new segment, once moved)."""
        if live.moved(self._window):
            self._moved("live", self._core)  # follow the name now, as the next call would
        return rates_of(live.live_geometry(self._window))

    def _set_rates(self, want: Geometry, on_change: str = live.DEFAULT_ON_CHANGE) -> None:
        """Change every process's rates to ``want``'s (a limiter geometry; ``live.change``)."""
        window = live.change(self._window, want, on_change, self._opts)
        if window is not self._window:  # moved: this process follows at once
            self._window = window
            self._core = native.core_as(window._core, LimiterCore)
            self._bind_core()
            self._set_tally(*self._tally)
            for rebind in self._rebinds:
                rebind()

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
