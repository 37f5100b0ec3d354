"""What the shared-memory backends of a Limiter and a TokenBucket share: one keyed ShmWindow of
theirs, opened or attached and checked for its kind, the native core's decisions tally, and
the window's lifecycle. Each subclass binds its core's own hit and check (``ShmLimiter``:
``hit_row`` in ``core/rings.c``; ``ShmTokenBucket``: ``token_take`` in ``core/counters.c``).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ..._core import LimiterCore, TokenBucketCore
from ...errors import GeometryMismatchError
from ...geometry import Geometry
from ..contract import Key, Of, Request
from . import live, native
from .window import ShmOptions, ShmWindow


def open_window(req: Request, accepts: Callable[[Geometry], bool], what: str) -> ShmWindow:
    """Create-or-attach ``req.geometry``, or attach (``None``); a segment whose geometry
    ``accepts`` refuses is a :class:`GeometryMismatchError` naming ``what`` it is not."""
    opts = ShmOptions.of(req)
    if req.geometry is None:
        window = ShmWindow.attach(req.name, opts)
    else:
        window = ShmWindow.open_geometry(req.name, req.geometry, opts)
    g = window.geometry
    if not accepts(g):
        window.close()
        found = f"a {g.kind}" + (f" of role {g.role!r}" if g.role else "")
        raise GeometryMismatchError(f"{req.name!r} is {found}, not {what}")
    return window


def open_changing(req: Request, accepts: Callable[[Geometry], bool], what: str) -> ShmWindow:
    """:func:`open_window`, and an existing segment of other rates changed by the request's
    ``on_change`` (``live.py``); not given (shmwin's own parts: a local share, an adaptive
    limiter), other rates raise as they always did."""
    if req.geometry is None:
        return open_window(req, accepts, what)  # a retired one: its first call follows the name
    opts = ShmOptions.of(req)
    on_change = live.check_on_change(req.option("on_change", "raise"))
    try:
        window = open_window(req, accepts, what)
    except GeometryMismatchError as exc:
        if on_change == "raise":
            raise GeometryMismatchError(f"{exc} (on_change='carry' changes its rates live)") from None
        window = live.reopen(req.name, opts)
        if not accepts(window.geometry):
            window.close()
            raise
    return live.change(window, req.geometry, on_change, opts)


class ShmDecider:
    """A keyed :class:`ShmWindow` whose native core decides hits: its lifecycle and tally.

    Its rates may change live (``live.py``): in place, the core reads them at its next call;
    moved to a new segment, the core's hook (:meth:`_moved`) reopens the name and binds the new
    core here, and each front that bound our methods is told (:meth:`_on_rebind`)."""

    _core_type: type[LimiterCore] | type[TokenBucketCore]  # its core's type (_core.open built it)
    _core: LimiterCore | TokenBucketCore
    _methods: tuple[str, str]  # the core's (hit, check), bound as this backend's hit and check

    def __init__(self, window: ShmWindow, opts: ShmOptions | None = None):
        self._window = window
        self._core = native.core_as(window._core, self._core_type)
        self.name = window.name
        self._opts = opts or ShmOptions()
        self._tally: tuple[Any, bool] = (None, False)
        self._rebinds: list[Callable[[], None]] = []
        self._bind_core()

    def _bind_core(self) -> None:
        hit, check = self._methods
        self.hit = getattr(self._core, hit)  # the native hot path, nothing in between
        self.check = getattr(self._core, check)
        ref = weakref.ref(self)  # the core holds its hook: no cycle through it (nor through the core)
        core_id, name = id(self._core), self.name

        def hook(method: str) -> Any:
            me = ref()
            if me is None:
                raise GeometryMismatchError(f"{name!r}: its segment was replaced and its backend is gone")
            return me._moved(method, core_id)

        self._core.set_on_moved(hook)

    def _moved(self, method: str, core_id: int) -> Any:
        """The hook of a core (``id(core)``; it is alive: its call is running) whose segment was
        replaced: the method to call instead, on the name's segment now (reopened once, then
        every front told)."""
        if core_id == id(self._core):
            self._follow(live.reopen(self.name, self._opts))
        return getattr(self._core, method)

    def _follow(self, window: ShmWindow) -> None:
        """Bind the name's new segment, close the old one, tell the fronts."""
        old, self._window = self._window, window
        self._core = native.core_as(window._core, self._core_type)
        self._bind_core()
        self._set_tally(*self._tally)
        if old is not window:
            old.close()
        for rebind in self._rebinds:
            rebind()

    def _on_rebind(self, rebind: Callable[[], None]) -> None:
        """Call ``rebind()`` once this backend's methods are another core's (a live move)."""
        self._rebinds.append(rebind)

    def _set_rates(self, want: Geometry, on_change: str = live.DEFAULT_ON_CHANGE) -> None:
        """Change every process's rates to ``want``'s (``live.change``); this one follows at once."""
        window = live.change(self._window, want, on_change, self._opts, again=True)
        if window is not self._window:
            self._follow(window)

    def _current(self) -> ShmWindow:
        """The window under the name now: this one, or the one it moved to."""
        if live.moved(self._window):
            self._moved("live", id(self._core))  # follow the name now, as the next call would
        return self._window

    @property
    def url(self) -> str:
        return ""  # shared memory: no URL

    geometry = Of[Geometry]("geometry", "_window", "The segment's geometry.")
    closed = Of[bool]("closed", "_window", "True once this process has closed the segment.")

    @property
    def window(self) -> ShmWindow:
        return self._window

    def _set_tally(self, tally: Any, shadow: bool) -> None:
        """Count each decision in ``tally`` (a decisions :class:`~shmwin.window.Window`, or
        None), and answer every hit True if ``shadow``: both in the native core."""
        self._tally = (tally, shadow)
        self._core.set_tally(None if tally is None else tally._backend._core, shadow)

    def clear(self, key: Key) -> None:
        self._window.clear(key)

    def close(self) -> None:
        self._window.close()

    def unlink(self) -> bool:
        return self._window.unlink()

    def _discard(self) -> None:
        """Close; remove the segment if this open created it (see ShmWindow._discard)."""
        self._window._discard()
