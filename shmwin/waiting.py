"""Waiting for a limit: the acquire loop a :class:`~shmwin.Limiter` and a
:class:`~shmwin.TokenBucket` share.

Both answer ``check(key, cost, count)`` with whether ``cost`` was taken and how long until it
could be (None: never); :class:`Waiting` turns that into ``acquire`` (sleeping, never spinning,
cut at a timeout) and ``acquire_async`` (``asyncio.sleep``: the loop is never blocked), both
driven by one generator of pauses, with the clock's own sleeps when it has them (a
:class:`~shmwin.ManualClock` in tests).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Protocol

from .backends.contract import Key
from .clock import Clock, host_clock
from .duration import NS_PER_S
from .errors import BackendUnavailableError
from .policy import fallback, pause_s


class Checks(Protocol):
    """A backend that answers ``check(key, cost, commit)`` with a tuple: the verdict first."""

    def check(self, key: Key, cost: int, commit: bool) -> tuple[Any, ...]: ...


class Waiting:
    """``acquire`` and ``acquire_async`` over a backend whose ``check(key, cost, True)`` answers
    a tuple holding the verdict first and, at ``_WAIT_AT``, the ns until the cost fits."""

    _WAIT_AT: int  # where check()'s answer says how long to wait
    _backend: Checks
    shadow: bool
    on_error: str

    def hit(self, key: Key, cost: int = 1) -> bool:
        raise NotImplementedError

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
