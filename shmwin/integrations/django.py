"""A Django cache backend for counters in shared memory: :class:`ShmwinCounterCache`.

Django's seam is its cache backend (``CACHES``). django-ratelimit counts a request with
``cache.add(key, 1, period)`` (start the window's count) and, when the key was there,
``cache.incr(key)``: exact only on a cache whose ``add`` is an atomic set-if-absent with a
timeout and whose ``incr`` is atomic -- memcached and Redis, not Django's file, database or
local-memory caches (a file cache admitted 1,717-3,732 of 1,000). Here both are decided in C
under the key's row lock (role "counter-cache", ``core/cache.c``), in shared memory: every
process of the host that names the same ``LOCATION`` shares the counters, with no server.

What it keeps: int counters (64-bit), each with a timeout. What it refuses:

- ``set``/``add`` of anything but an int (a ``TypeError``): it is not a cache of objects;
- a timeout longer than ``OPTIONS["MAX_TIMEOUT"]`` (seconds, default 25 hours; a ``ValueError``).
  ``timeout=None`` ("never expire") keeps the value that long;
- ``incr`` past int64 (an ``OverflowError``, nothing counted).

A full key table (``OPTIONS["CAPACITY"]`` live keys, or a full ``/dev/shm``) stores nothing:
``add`` answers False and ``incr`` raises ``ValueError`` as for a missing key (django-ratelimit
then limits, or admits with ``RATELIMIT_FAIL_OPEN``), ``set`` raises ``KeyTableFullError``.
"""

from __future__ import annotations

import math
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache  # type: ignore[import-untyped]

from ..backends.shm.roles.cache import CounterCacheEngine, geometry
from ..errors import KeyTableFullError
from ..rate import NS_PER_S
from ..window import Window

DEFAULT_LOCATION = "django-counters"
# 25 hours: a day's rate and django-ratelimit's 5 s of slack fit (a key's row is reused a
# second after its value expired, whatever this bound).
DEFAULT_MAX_TIMEOUT_S = 90_000


class ShmwinCounterCache(BaseCache):  # type: ignore[misc]  # Django ships no types
    """``CACHES = {"default": {"BACKEND": "shmwin.integrations.django.ShmwinCounterCache",
    "LOCATION": "myapp-counters"}}``: the segment ``LOCATION`` (made if missing), shared by
    every process of the host. ``OPTIONS``: ``MAX_TIMEOUT`` (s), ``CAPACITY`` (keys, default:
    grows), ``ON_FULL`` ("deny", or "raise": ``KeyTableFullError``/``OutOfSpaceError``)."""

    def __init__(self, location: str, params: dict[str, Any]):
        super().__init__(params)
        options = dict(params.get("OPTIONS") or {})
        unknown = sorted(set(options) - {"MAX_TIMEOUT", "CAPACITY", "ON_FULL"})
        if unknown:
            raise ValueError(
                f"ShmwinCounterCache OPTIONS takes MAX_TIMEOUT, CAPACITY, ON_FULL; not {unknown}"
            )
        longest_s = options.get("MAX_TIMEOUT", DEFAULT_MAX_TIMEOUT_S)
        longest_ns = seconds_to_ns(longest_s, "OPTIONS['MAX_TIMEOUT']")
        on_full = options.get("ON_FULL", "deny")
        if on_full not in ("deny", "raise"):
            raise ValueError(f"OPTIONS['ON_FULL'] is 'deny' or 'raise', not {on_full!r}")
        self.location = location or DEFAULT_LOCATION
        want = geometry(longest_ns, options.get("CAPACITY"))
        self._window = Window.open_geometry(self.location, want, on_full=on_full)
        self._counters = CounterCacheEngine(self._window)
        self._longest_ns = self._counters.longest_ns

    # -- Django's cache API, for int counters ---------------------------------------------------

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        """Set ``value`` if ``key`` holds none live: whether it did (one native section)."""
        made, ttl_ns = self._key(key, version), self._ttl_ns(timeout)
        return self._counters.add(made, self._int(value), ttl_ns)

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        made, ttl_ns = self._key(key, version), self._ttl_ns(timeout)
        if not self._counters.set(made, self._int(value), ttl_ns):
            raise KeyTableFullError(
                f"counter cache {self.location!r}: no row for a new key (its table is full)"
            )

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        value = self._counters.get(self._key(key, version))
        return default if value is None else value

    def incr(self, key: Any, delta: int = 1, version: int | None = None) -> int:
        """Add ``delta`` to the live value; ``ValueError`` if there is none (Django's contract)."""
        made = self._key(key, version)
        value = self._counters.incr(made, self._int(delta))
        if value is None:
            raise ValueError(f"Key '{made}' not found")
        return value

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        return self._counters.touch(self._key(key, version), self._ttl_ns(timeout))

    def delete(self, key: Any, version: int | None = None) -> bool:
        return self._counters.delete(self._key(key, version))

    def has_key(self, key: Any, version: int | None = None) -> bool:
        return self._counters.get(self._key(key, version)) is not None

    def get_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        found = ((key, self._counters.get(self._key(key, version))) for key in keys)
        return {key: value for key, value in found if value is not None}

    def clear(self) -> None:
        """Forget every key of the segment (every process's)."""
        self._window.reset()

    def close(self, **kwargs: Any) -> None:
        """Django calls it after each request: the mapping is kept (it costs nothing held)."""

    def unlink(self) -> bool:
        """Remove the segment for every process (tests, tear-down): True if it was there."""
        self._window.close()
        return self._window.unlink()

    # -- helpers -----------------------------------------------------------------------------

    def _key(self, key: Any, version: int | None) -> str:
        return str(self.make_and_validate_key(key, version=version))

    @staticmethod
    def _int(value: Any) -> int:
        if type(value) is not int:
            raise TypeError(
                f"ShmwinCounterCache keeps int counters, not {type(value).__name__} ({value!r}): "
                "use another cache for objects"
            )
        return value

    def _ttl_ns(self, timeout: Any) -> int | None:
        """Django's timeout (s; DEFAULT_TIMEOUT: the cache's; None: never, here the longest kept)
        as ns for the core: 0 for a timeout <= 0 (expired at once, as Django's caches do)."""
        if timeout is DEFAULT_TIMEOUT:
            timeout = self.default_timeout
        if timeout is None:
            return None
        ttl_ns = max(0, seconds_to_ns(timeout, "timeout", at_least=None))
        if ttl_ns > self._longest_ns:
            raise ValueError(
                f"timeout {timeout!r} s is longer than counter cache {self.location!r} keeps "
                f"({self._longest_ns / NS_PER_S:g} s): raise OPTIONS['MAX_TIMEOUT']"
            )
        return ttl_ns


def seconds_to_ns(seconds: Any, what: str, at_least: int | None = 1) -> int:
    """A number of seconds as whole ns (a clear error for anything else)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not math.isfinite(seconds):
        raise TypeError(f"{what} is a finite number of seconds, not {seconds!r}")
    ns = round(seconds * NS_PER_S)
    if at_least is not None and ns < at_least:
        raise ValueError(f"{what} must be positive, not {seconds!r}")
    return ns


__all__ = ["ShmwinCounterCache"]
