"""Limiter: a strict, per-key rate limit over one or more rates, shared by every process.

One segment of kind "limiter" holds, per key, one ring per rate. A rate of
``limit`` per period P gets ``buckets`` buckets of P / buckets, plus one: the
ring counts the current bucket and ``buckets`` whole ones before it, so a hit
is forgotten between P and P + P/buckets after it happened. Hence the guarantee:

    **never more than ``limit`` hits in any period P**, across all processes;
    a request may be refused up to P/buckets before a perfect sliding log
    would have let it through.

Each ring's header slot keeps ``(head epoch, running total)``; a hit advances
the head, subtracting the buckets that left the window (amortised O(1)), then
compares every rate and counts in all of them or in none -- all under the key's
row lock. Memory per key is fixed by ``buckets``, not by the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from . import backends
from .clock import Clock
from .duration import NS_PER_S
from .errors import GeometryMismatchError
from .geometry import DEFAULT_BUCKETS, limiter_geometry
from .keys import Key
from .native import ON_FULL
from .rate import LimitStats, Rate, parse_many
from .window import Window


class Limiter:
    """``Limiter("login", "5/minute")``: create the limiter, or attach if it exists with
    the same rates. ``hit(key)`` is True and counted if every rate allows it, else
    False and nothing counted.

    Its key table grows as keys come, and memory follows the keys in use (idle keys are
    reclaimed). ``capacity=N`` caps it at N keys; ``on_full`` then says what ``hit`` does
    for a new key when N keys are live: "raise" :class:`KeyTableFullError`, "allow"
    (uncounted) or "deny".
    """

    def __new__(cls, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        if backends.is_shared_memory(backend):
            return super().__new__(cls)
        assert backend is not None
        return backends.factory(backend, "limiter")(*args, backend=backend, **kwargs)

    def __init__(
        self,
        name: str,
        rates: str | Rate | list[str | Rate] | tuple[str | Rate, ...],
        *,
        capacity: int | None = None,
        buckets: int = DEFAULT_BUCKETS,
        on_full: str = "raise",
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
        backend: str | None = None,
        on_error: str = "raise",
    ):
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, not {on_full!r}")
        self.rates = parse_many(rates)
        self.on_full = on_full
        want = limiter_geometry(self.rates, buckets, capacity)
        self.window = Window.open_geometry(
            name, want, clock=clock, perm=perm, lock_timeout=lock_timeout, ready_timeout=ready_timeout,
            on_full=on_full,
        )  # fmt: skip
        self._bind(clock)

    @classmethod
    def attach(
        cls, name: str, *, on_full: str = "raise", clock: Clock | None = None, backend: str | None = None
    ) -> Limiter:
        """Attach to an existing limiter; its rates are read from the segment."""
        if not backends.is_shared_memory(backend):
            assert backend is not None
            return backends.factory(backend, "attach_limiter")(name, backend=backend, clock=clock)  # type: ignore[no-any-return]
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, not {on_full!r}")
        window = Window.attach(name, clock=clock)
        if window.geometry.kind != "limiter":
            window.close()
            raise GeometryMismatchError(f"{name!r} is a window, not a limiter")
        window.close()
        self = object.__new__(cls)
        self.rates = [Rate(r.limit, r.bucket_ns * (r.n_buckets - 1)) for r in window.geometry.rings]
        self.on_full = on_full
        self.window = Window.open_geometry(name, window.geometry, clock=clock, on_full=on_full)
        self._bind(clock)
        return self

    def _bind(self, clock: Clock | None) -> None:
        self.name = self.window.name
        self._clock = self.window._clock
        self._core = self.window._core
        self.hit = self._core.hit  # type: ignore[method-assign]  # the native check-and-count
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", asyncio.sleep)

    # -- the checks -------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them; else count nothing.

        One native call: the rates are checked and counted under the key's lock, with
        no Python code in between. The instance's ``hit`` is the core's own method.
        """
        return bool(self._core.hit(key, cost))

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing."""
        return bool(self._core.check(key, cost, False, False)[0])

    def stats(self, key: Key) -> LimitStats:
        """Where ``key`` stands against its tightest rate (least remaining)."""
        return min(self.stats_all(key), key=lambda s: (s.remaining, -s.reset_after))

    def stats_all(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate, shortest period first (O(1): running totals)."""
        _, used, reset_ns, _ = self._core.check(key, 0, False)
        return [
            LimitStats(rate, rate.limit, u, max(rate.limit - u, 0), r / NS_PER_S)
            for rate, u, r in zip(self.rates, used, reset_ns, strict=True)
        ]

    def clear(self, key: Key) -> None:
        """Forget every hit of ``key``."""
        self.window.clear(key)

    def acquire(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """Wait (sleeping, not spinning) until ``cost`` hits are allowed and count them.

        False after ``timeout`` seconds, or at once if ``cost`` exceeds a limit.
        """
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        while True:
            allowed, _, _, wait_ns = self._core.check(key, cost, True)
            if allowed:
                return True
            pause = self._pause_s(wait_ns, deadline_ns)
            if pause is None:
                return False
            self._sleep(pause)

    async def acquire_async(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        while True:
            allowed, _, _, wait_ns = self._core.check(key, cost, True)
            if allowed:
                return True
            pause = self._pause_s(wait_ns, deadline_ns)
            if pause is None:
                return False
            await self._async_sleep(pause)

    def _pause_s(self, wait_ns: int | None, deadline_ns: int | None) -> float | None:
        """Seconds to sleep before trying again, or None to give up."""
        if wait_ns is None:
            return None
        if deadline_ns is not None:
            left_ns = deadline_ns - self._clock()
            if left_ns <= 0:
                return None
            wait_ns = min(wait_ns, left_ns)
        return max(wait_ns, 1_000_000) / NS_PER_S

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        self.window.close()

    def unlink(self) -> bool:
        return self.window.unlink()

    def __enter__(self) -> Limiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        rates = ";".join(str(r) for r in self.rates)
        return f"<shmwin.Limiter {self.name!r} {rates} capacity={self.window.capacity}>"


__all__ = ["DEFAULT_BUCKETS", "ON_FULL", "LimitStats", "Limiter"]
