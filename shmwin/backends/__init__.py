"""Backends, chosen by URL: shared memory (the default, no server) or Redis (several hosts).

A plain registry: scheme -> (window factory, limiter factory, window attach, limiter attach).
``Window(..., backend="redis://host:6379/0")`` and ``Limiter(..., backend=...)`` look
the scheme up here; ``backend=None`` or ``"shm://"`` keeps the shared-memory classes.

``shmwin.backends.redis`` is the Redis implementation; this module never imports it
until a ``redis://``, ``rediss://`` or ``unix://`` URL is opened.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

Factory = Callable[..., Any]

_REGISTRY: dict[str, dict[str, Factory]] = {}


def register(scheme: str, **factories: Factory) -> None:
    """Make ``scheme://`` URLs open windows and limiters with these factories."""
    _REGISTRY[scheme] = factories


def _redis_factories() -> dict[str, Factory]:
    from . import redis  # imported only once a redis URL is used

    return {
        "window": redis.RedisWindow,
        "limiter": redis.RedisLimiter,
        "attach_window": redis.RedisWindow.attach,
        "attach_limiter": redis.RedisLimiter.attach,
    }


def is_shared_memory(backend: str | None) -> bool:
    return backend is None or urllib.parse.urlsplit(backend).scheme in ("", "shm")


def factory(backend: str, what: str) -> Factory:
    """The ``what`` ("window", "limiter", "attach_window", "attach_limiter") for a URL."""
    scheme = urllib.parse.urlsplit(backend).scheme
    if scheme in ("redis", "rediss", "unix") and scheme not in _REGISTRY:
        register(scheme, **_redis_factories())
    if scheme not in _REGISTRY:
        known = ", ".join(sorted({"shm", "redis", "rediss", *_REGISTRY}))
        raise ValueError(f"unknown backend {backend!r}: expected one of {known}")
    return _REGISTRY[scheme][what]
