"""What a :class:`~shmwin.Limiter` and a :class:`~shmwin.TokenBucket` share: one front base.

:class:`Front` holds a backend and answers what both fronts answer alike -- the fallback and
shadow forms of ``hit``, ``test``, ``decisions``, ``full_count``, the read-only ``window``, the
lifecycle -- and the wait for a limit. Each front says only what differs: how it opens, what
``check`` answers (``_WAIT_AT``, :meth:`Front._verdict`) and its stats.

Waiting: both backends answer ``check(key, cost, count)`` with whether ``cost`` was taken and
how long until it could be (None: never); :class:`Front` turns that into ``acquire``
(sleeping, never spinning, cut at a timeout) and ``acquire_async`` (``asyncio.sleep``: the loop
is never blocked), both driven by one generator of pauses, with the clock's own sleeps when it
has them (a :class:`~shmwin.ManualClock` in tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from contextlib import suppress
from typing import Any, Protocol, TypeVar

from . import decisions as _decisions
from .backends.contract import Key
from .clock import Clock, host_clock
from .decisions import Decisions
from .duration import NS_PER_S
from .errors import BackendUnavailableError, NotSupportedError
from .policy import fallback, pause_s
from .window import Window


class Checks(Protocol):
    """A backend that answers ``check(key, cost, commit)`` with a tuple: the verdict first."""

    def check(self, key: Key, cost: int, commit: bool) -> tuple[Any, ...]: ...


F = TypeVar("F", bound="Front")


class Front:
    """A limiter's or a token bucket's front over its backend (see the module docstring):
    ``acquire`` and ``acquire_async`` over a backend whose ``check(key, cost, True)`` answers a
    tuple holding the verdict first and, at ``_WAIT_AT``, the ns until the cost fits."""

    _WAIT_AT: int  # where check()'s answer says how long to wait
    _backend: Any  # a LimiterBackend or a TokenBucketBackend: both keep Checks
    name: str
    shadow: bool
    on_full: str
    on_error: str

    def hit(self, key: Key, cost: int = 1) -> bool:
        raise NotImplementedError

    def _bind_front(self, opened: Any, clock: Clock | None, on_full: str, on_error: str) -> None:
        """What both fronts hold once opened; the hot path is the backend's own method (the
        native check-and-count, or take, on shared memory)."""
        self._backend = opened
        self.name = opened.name
        self.on_full, self.on_error = on_full, on_error
        self._take_clock(clock)
        self._window: Window | None = None
        self.shadow = False
        self._decisions: Window | None = None
        self.hit = opened.hit if on_error == "raise" else self._hit_or_fallback  # type: ignore[method-assign]

    def _hit_or_fallback(self, key: Key, cost: int = 1) -> bool:
        try:
            return bool(self._backend.hit(key, cost)) or self.shadow
        except BackendUnavailableError:
            return fallback(self.on_error) or self.shadow

    def _hit_shadow(self, key: Key, cost: int = 1) -> bool:
        """Shadow mode on a backend that keeps no decisions: count what enforcement would, and
        answer True -- also while the backend is away, whatever ``on_error`` says."""
        with suppress(BackendUnavailableError):
            self._backend.hit(key, cost)
        return True

    def _verdict(self, key: Key, cost: int) -> bool:
        """Would ``cost`` pass now? The backend's check, counting nothing."""
        raise NotImplementedError

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing. (In shadow mode: True.)"""
        try:
            return self._verdict(key, cost) or self.shadow
        except BackendUnavailableError:
            if self.shadow:
                return True
            if self.on_error == "raise":
                raise
            return fallback(self.on_error)

    def decisions(self) -> Decisions:
        """``Decisions(admitted, rejected, near_limit)`` over the longest period, counted by
        every process's ``hit``: what enforcement did, or in shadow mode would have done.
        :class:`NotSupportedError` if it keeps none (``decisions=False``, Redis)."""
        return _decisions.read(self._decisions, self.name)

    @property
    def window(self) -> Window:
        """The rows as a read-only :class:`Window` (shared memory)."""
        if self._window is None:
            self._window = Window._over(self._backend.window, self._clock_arg)
        return self._window

    def full_count(self) -> int:
        """Requests that met a full key table, whatever ``on_full`` answered (see
        :meth:`Window.full_count`); 0 on Redis, which has no key table to fill."""
        try:
            return self.window.full_count()
        except NotSupportedError:
            return 0

    def clear(self, key: Key) -> None:
        """Forget ``key``: its hits (a limiter), or a full bucket again (a token bucket)."""
        self._backend.clear(key)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The backend's URL ("" for shared memory)."""
        return str(self._backend.url)

    @property
    def closed(self) -> bool:
        return bool(self._backend.closed)

    def close(self) -> None:
        self._backend.close()
        if self._decisions is not None:
            self._decisions.close()

    def unlink(self) -> bool:
        """Remove it (and its decisions window) for every process: True if it was there."""
        if self._decisions is not None:
            self._decisions.unlink()
        return bool(self._backend.unlink())

    def __enter__(self: F) -> F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._backend)

    # -- waiting ------------------------------------------------------------------------------

    def _take_clock(self, clock: Clock | None) -> None:
        """The clock the limit is read with, and its sleeps (the host's when it has none)."""
        self._clock_arg = clock
        self._clock: Callable[[], int] = clock or host_clock()
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", asyncio.sleep)

    def acquire(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """Wait (sleeping, not spinning) until ``cost`` is allowed and count it.

        False after ``timeout`` seconds, or at once if ``cost`` can never be allowed (it exceeds
        a limit; a token bucket refuses a cost above its burst with ValueError). In shadow mode
        it never waits: a ``hit``, and True."""
        if self.shadow:
            return self.hit(key, cost)
        tries = self._tries(key, timeout, cost)
        try:
            while True:
                self._sleep(next(tries))
        except StopIteration as done:
            return bool(done.value)

    async def acquire_async(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        if self.shadow:
            return self.hit(key, cost)
        tries = self._tries(key, timeout, cost)
        try:
            while True:
                await self._async_sleep(next(tries))
        except StopIteration as done:
            return bool(done.value)

    def _tries(self, key: Key, timeout: float | None, cost: int) -> Generator[float, None, bool]:
        """The acquire loop, once for both: yields each pause (seconds), returns the verdict.
        (The cost is checked by the backend's ``check``: policy.cost_of, or the core's copy.)"""
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        while True:
            try:
                answer = self._backend.check(key, cost, True)
            except BackendUnavailableError:
                if self.on_error == "raise":
                    raise
                return fallback(self.on_error)
            if answer[0]:
                return True
            pause = pause_s(answer[self._WAIT_AT], deadline_ns, self._clock())
            if pause is None:
                return False
            yield pause
