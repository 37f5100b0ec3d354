"""ShmTokenBucket: a token bucket in a shared-memory segment, the default backend of ``TokenBucket``.

One keyed segment of role "token-bucket" (``geometry.token_geometry``) holds, per key, one word:
the GCRA's theoretical arrival time (``layout_words.TOKEN_STATE``). Taking tokens is one native
section under the key's row lock (``token_take`` in ``core/counters.c``); ``hit`` and ``check``
are the core's own methods, called with nothing in between.
"""

from __future__ import annotations

from typing import Any

from ...errors import GeometryMismatchError
from ...geometry import TOKEN_ROLE, Geometry, token_rate_of
from ...rate import Rate
from ..contract import Key, Request
from .window import LOCK_TIMEOUT_S, PERM, READY_TIMEOUT_S, ShmWindow

# allowed, whole tokens left, wait_ns (None: never), ns until full
TokenCheck = tuple[bool, int, int | None, int]


class ShmTokenBucket:
    """A token-bucket-role :class:`ShmWindow` and its native core's take."""

    def __init__(self, window: ShmWindow):
        self._window = window
        self._core = window._core
        self.name = window.name
        self.hit = self._core.token_hit  # type: ignore[method-assign]  # the native take
        self.check = self._core.token_check  # type: ignore[method-assign]

    @classmethod
    def open(cls, req: Request) -> ShmTokenBucket:
        """Create-or-attach ``req.geometry``, or attach (``None``): a segment of another kind
        or role is a :class:`GeometryMismatchError`."""
        lock_timeout = req.option("lock_timeout", LOCK_TIMEOUT_S)
        ready_timeout = req.option("ready_timeout", READY_TIMEOUT_S)
        perm = req.option("perm", PERM)
        if req.geometry is None:
            window = ShmWindow.attach(
                req.name, clock=req.clock, lock_timeout=lock_timeout, ready_timeout=ready_timeout,
                on_full=req.on_full, perm=perm,
            )  # fmt: skip
        else:
            window = ShmWindow.open_geometry(
                req.name, req.geometry, clock=req.clock, perm=perm,
                lock_timeout=lock_timeout, ready_timeout=ready_timeout, on_full=req.on_full,
            )  # fmt: skip
        g = window.geometry
        if g.role != TOKEN_ROLE or g.kind != "window" or len(g.rings) != 1:
            window.close()
            what = f"a {g.kind}" + (f" of role {g.role!r}" if g.role else "")
            raise GeometryMismatchError(f"{req.name!r} is {what}, not a token bucket")
        return cls(window)

    @property
    def url(self) -> str:
        return ""  # shared memory: no URL

    @property
    def geometry(self) -> Geometry:
        return self._window.geometry

    @property
    def rate(self) -> Rate:
        return token_rate_of(self._window.geometry)[0]

    @property
    def burst(self) -> int:
        return token_rate_of(self._window.geometry)[1]

    @property
    def closed(self) -> bool:
        return self._window.closed

    @property
    def window(self) -> ShmWindow:
        return self._window

    def hit(self, key: Key, cost: int = 1) -> bool:
        """The instance's ``hit`` is the core's own method; this is its signature."""
        return bool(self._core.token_hit(key, cost))

    def check(self, key: Key, cost: int, commit: bool) -> TokenCheck:
        """The instance's ``check`` is the core's own method; this is its signature."""
        return self._core.token_check(key, cost, commit)

    def _set_tally(self, tally: Any, shadow: bool) -> None:
        """Count each take's decision in ``tally`` (a decisions Window, or None), and answer
        every hit True if ``shadow``: both in the native core."""
        self._core.set_tally(None if tally is None else tally._backend._core, shadow)

    def clear(self, key: Key) -> None:
        self._window.clear(key)

    def close(self) -> None:
        self._window.close()

    def unlink(self) -> bool:
        return self._window.unlink()

    def __repr__(self) -> str:
        capacity = self.geometry.capacity
        return f"<shmwin.TokenBucket {self.name!r} {self.rate} burst={self.burst} capacity={capacity}>"
