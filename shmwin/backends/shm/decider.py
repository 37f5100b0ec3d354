"""What the shared-memory backends of a Limiter and a TokenBucket share: one keyed ShmWindow of
theirs, opened or attached and checked for its kind, the native core's decisions tally, and
the window's lifecycle. Each subclass binds its core's own hit and check (``ShmLimiter``:
``hit_row`` in ``core/rings.c``; ``ShmTokenBucket``: ``token_take`` in ``core/counters.c``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._core import LimiterCore, TokenBucketCore
from ...errors import GeometryMismatchError
from ...geometry import Geometry
from ..contract import Key, Request
from . import native
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


class ShmDecider:
    """A keyed :class:`ShmWindow` whose native core decides hits: its lifecycle and tally."""

    _core_type: type[LimiterCore] | type[TokenBucketCore]  # its core's type (_core.open built it)
    _core: LimiterCore | TokenBucketCore

    def __init__(self, window: ShmWindow):
        self._window = window
        self._core = native.core_as(window._core, self._core_type)
        self.name = window.name

    @property
    def url(self) -> str:
        return ""  # shared memory: no URL

    @property
    def geometry(self) -> Geometry:
        return self._window.geometry

    @property
    def closed(self) -> bool:
        return self._window.closed

    @property
    def window(self) -> ShmWindow:
        return self._window

    def _set_tally(self, tally: Any, shadow: bool) -> None:
        """Count each decision in ``tally`` (a decisions :class:`~shmwin.window.Window`, or
        None), and answer every hit True if ``shadow``: both in the native core."""
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
