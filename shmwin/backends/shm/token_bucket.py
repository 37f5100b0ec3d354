"""ShmTokenBucket: a token bucket in a shared-memory segment, the default backend of ``TokenBucket``.

One keyed segment of role "token-bucket" (``geometry.token_geometry``) holds, per key, one word:
the GCRA's theoretical arrival time (``format.TOKEN_STATE``). Taking tokens is one native
section under the key's row lock (``token_take`` in ``core/counters.c``); ``hit`` and ``check``
are the core's own methods, called with nothing in between.
"""

from __future__ import annotations

from ..._core import TokenBucketCore
from ...geometry import TOKEN_ROLE, token_rate_of
from ...rate import Rate
from ..contract import Key, Request, TokenCheck
from .decider import ShmDecider, open_changing
from .window import ShmOptions

# allowed, whole tokens left, wait_ns (None: never), ns until full


class ShmTokenBucket(ShmDecider):
    """A token-bucket-role :class:`ShmWindow` and its native core's take."""

    _core_type = TokenBucketCore
    _core: TokenBucketCore
    _methods = ("token_hit", "token_check")  # the native take

    @classmethod
    def open(cls, req: Request) -> ShmTokenBucket:
        """Create-or-attach ``req.geometry``, or attach (``None``): a segment of another kind
        or role is a :class:`GeometryMismatchError`; one of another rate or burst changes by
        ``on_change`` (``live.py``: always a move, the tokens each key has used carried)."""
        accepts = lambda g: g.role == TOKEN_ROLE and g.kind == "window" and len(g.rings) == 1  # noqa: E731
        return cls(open_changing(req, accepts, "a token bucket"), ShmOptions.of(req))

    @property
    def rate(self) -> Rate:
        return token_rate_of(self._current().geometry)[0]

    @property
    def burst(self) -> int:
        return token_rate_of(self._current().geometry)[1]

    def hit(self, key: Key, cost: int = 1) -> bool:
        """The instance's ``hit`` is the core's own method; this is its signature."""
        return bool(self._core.token_hit(key, cost))

    def check(self, key: Key, cost: int, commit: bool) -> TokenCheck:
        """The instance's ``check`` is the core's own method; this is its signature."""
        return self._core.token_check(key, cost, commit)

    def __repr__(self) -> str:
        capacity = self.geometry.capacity
        return f"<shmwin.TokenBucket {self.name!r} {self.rate} burst={self.burst} capacity={capacity}>"
