"""Backends, chosen by URL: shared memory (the default, no server) or Redis (several hosts).

A plain registry: scheme -> :class:`Scheme` (how it opens a window and a limiter, and
which options it honours). ``shm`` is an ordinary entry; ``redis``, ``rediss`` and
``unix`` are registered the first time such a URL is opened, so ``import shmwin`` never
loads the Redis backend. The contract is :mod:`shmwin.backends.contract`.

    open("window", "api", geometry, backend="redis://10.0.0.5:6379/0", timeout=0.2)
    open("limiter", "login", geometry, backend=None, lock_timeout=5)

Options only some backends honour (``perm``, ``lock_timeout``, ``ready_timeout``, ``mode``,
``stripes`` for shared memory; ``timeout`` for Redis) are passed only when given (None
means "not given"); one a backend does not honour is a
:class:`~shmwin.errors.NotSupportedError` naming it, before anything is opened.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..clock import Clock
from ..errors import NotSupportedError
from ..geometry import Geometry
from ..policy import DEFAULT_ON_FULL, WINDOW_ON_FULL
from .contract import LimiterBackend, Request, TokenBucketBackend, WindowBackend
from .shm import SHM_OPTIONS, ShmLimiter, ShmTokenBucket, ShmWindow


@dataclass(frozen=True)
class Scheme:
    """How one URL scheme opens windows and limiters, and the options it honours."""

    window: Callable[[Request], WindowBackend]
    limiter: Callable[[Request], LimiterBackend]
    options: frozenset[str]
    token_bucket: Callable[[Request], TokenBucketBackend] | None = None  # None: this backend has none

    def opener(self, kind: str) -> Callable[[Request], Any] | None:
        """What opens a ``kind`` (backends.KINDS) here; None if this backend has no such kind."""
        return {"window": self.window, "limiter": self.limiter, "token-bucket": self.token_bucket}[kind]


_SCHEMES: dict[str, Scheme] = {}


def register(scheme: str, entry: Scheme) -> None:
    """Make ``scheme://`` URLs open windows and limiters with ``entry``."""
    _SCHEMES[scheme] = entry


_SHM = Scheme(
    window=ShmWindow.open, limiter=ShmLimiter.open, options=SHM_OPTIONS, token_bucket=ShmTokenBucket.open
)
register("shm", _SHM)


def _redis() -> Scheme:
    from . import redis  # imported only once a redis URL is used

    return Scheme(
        window=redis.RedisWindow.open, limiter=redis.RedisLimiter.open, options=redis.OPTIONS,
        token_bucket=redis.RedisTokenBucket.open,
    )  # fmt: skip


def _twotier() -> Scheme:
    from . import redis, twotier  # imported only once a shm+redis URL is used

    def no_window(req: Request) -> WindowBackend:
        raise NotSupportedError("the two-tier backend (shm+redis://) keeps limiters only: a Window is redis://'s")

    def token_bucket(req: Request) -> Any:
        """A token bucket takes every token from Redis itself, with no lease: tokens leased at t0
        and spent up to D later would let a host pass ``burst`` in an interval (strict only with
        a burst cut by D / T tokens). Its answers are redis://'s, under the same name."""
        options = {k: v for k, v in req.options.items() if k in redis.OPTIONS}
        direct = dataclasses.replace(req, url=req.url.removeprefix("shm+"), options=options)
        return redis.RedisTokenBucket.open(direct)

    return Scheme(window=no_window, limiter=twotier.TwoTierLimiter.open, options=SHM_OPTIONS | redis.OPTIONS,
                  token_bucket=token_bucket)  # fmt: skip


# redis.client.SCHEMES, spelled here so that no redis module is imported before a URL needs it
# (Valkey's schemes are aliases, and limits' +unix ones; +sentinel asks sentinels for the master)
_REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel",
                  "rediss+sentinel", "valkey", "valkeys", "valkey+cluster", "valkeys+cluster",
                  "valkey+sentinel", "valkeys+sentinel", "redis+unix", "valkey+unix")  # fmt: skip
REDIS_SCHEMES = _REDIS_SCHEMES  # the plain Redis-side schemes, for the fronts (live rates)
_LAZY: dict[str, Callable[[], Scheme]] = {
    **{scheme: _redis for scheme in _REDIS_SCHEMES},
    **{"shm+" + scheme: _twotier for scheme in _REDIS_SCHEMES},
}


def scheme_of(url: str | None) -> str:
    """The scheme of a backend URL: ``None``, ``""`` and ``"shm://"`` are shared memory."""
    if url is None:
        return "shm"
    if not isinstance(url, str):
        raise ValueError(f"backend must be a URL such as 'redis://host:6379/0', not {url!r}")
    return urllib.parse.urlsplit(url).scheme or "shm"


def lookup(url: str | None) -> Scheme:
    """The registry entry for ``url``; a ValueError naming the known schemes if none."""
    scheme = scheme_of(url)
    if scheme not in _SCHEMES and scheme in _LAZY:
        register(scheme, _LAZY[scheme]())
    if scheme not in _SCHEMES:
        known = ", ".join(sorted({*_SCHEMES, *_LAZY}))
        raise ValueError(f"unknown backend {url!r}: expected one of {known}")
    return _SCHEMES[scheme]


KINDS = ("window", "limiter", "token-bucket")  # what open() opens: a Scheme's entry for each


def open(
    kind: str,
    name: str,
    geometry: Geometry | None,
    *,
    backend: str | None = None,
    exclusive: bool = False,
    clock: Clock | None = None,
    on_full: str | None = None,
    on_error: str = "raise",
    **options: Any,
) -> Any:
    """Open a ``kind`` (one of :data:`KINDS`) on ``backend``: create or attach (``geometry=None``
    attaches, ``exclusive`` only creates). ``on_full`` defaults to the kind's own (a window
    drops a write, a limiter refuses). A backend without that kind, or an option it does not
    honour, is a NotSupportedError before anything is opened."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    entry = lookup(backend)
    on_full = on_full or (WINDOW_ON_FULL if kind == "window" else DEFAULT_ON_FULL)
    request = _request(entry, name, geometry, backend, exclusive, clock, on_full, on_error, options)
    opener = entry.opener(kind)
    if opener is None:
        raise NotSupportedError(f"the {scheme_of(backend)} backend has no {kind.replace('-', ' ')}")
    return opener(request)


def discard(opened: Any) -> None:
    """Close a backend just opened, and remove what that very open created if the backend can
    (shared memory: the segment it made, if still the one under its name): a constructor that
    fails after it leaves nothing half-built (docs/errors.md)."""
    getattr(opened, "_discard", opened.close)()


def _request(
    entry: Scheme,
    name: str,
    geometry: Geometry | None,
    url: str | None,
    exclusive: bool,
    clock: Clock | None,
    on_full: str,
    on_error: str,
    options: dict[str, Any],
) -> Request:
    given = {k: v for k, v in options.items() if v is not None}
    refused = sorted(set(given) - entry.options)
    if refused:
        args = ", ".join(f"{k}={given[k]!r}" for k in refused)
        raise NotSupportedError(f"the {scheme_of(url)} backend cannot honour {args}")
    return Request(name, geometry, url or "", exclusive, clock, on_full, on_error, given)


__all__ = [
    "KINDS",
    "LimiterBackend",
    "Request",
    "Scheme",
    "TokenBucketBackend",
    "WindowBackend",
    "discard",
    "lookup",
    "open",
    "register",
    "scheme_of",
]
