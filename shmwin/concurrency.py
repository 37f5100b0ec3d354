"""Concurrency: at most ``limit`` holders of each key at once, across processes.

``Concurrency(name, limit)`` creates a keyed shared-memory segment of role "concurrency" (or
attaches to it): each key's row holds its holders -- one entry per process holding slots of
it, with its slot count -- and one native section (``core/concurrency.c``) checks and takes a
slot under the key's row lock. A holder is known by its process's stripe: a robust mutex that
the process's keeper thread holds for as long as it lives, so the moment a holder dies
(SIGKILL too) the kernel marks it owner-dead and its slots count no more: no timeout, no
``/proc``. A handle that closes gives its stripe back, and its slots with it.

Slots belong to the handle (the process's ``Concurrency`` object) that acquired them:
``release`` of a key it holds nothing of raises :class:`NotHeldError`. A forked child starts
with none of its parent's.

A key holding no slot is idle after ``idle`` since its last acquire or release, and its row
may be reused for another key; a key with a live holder is never reused, whatever its age.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from .backends.contract import Key
from .backends.shm.roles import ConcurrencyEngine
from .clock import Clock, host_clock
from .errors import ConcurrencyLimitError, GeometryMismatchError, NotHeldError
from .geometry import (
    ADDRESS_BUDGET_BYTES,
    CONC_HOLDER_BYTES,
    DEFAULT_MAX_KEYS,
    MAX_CONCURRENCY,
    MAX_STRIPES,
    Geometry,
    Ring,
    window_geometry,
)
from .rate import Duration, to_ns
from .window import Window

ROLE = "concurrency"
ON_CHANGE = ("carry", "reset", "raise")  # a Limiter's (shmwin.backends.shm.live); see _other_limit
FIELD = "holders"
DEFAULT_PROCESSES = 128  # processes that may hold slots at once (one stripe each)
NS_PER_S = 1_000_000_000
FIRST_PAUSE_S = 0.001  # a waiting acquire looks again after this, doubling up to MAX_PAUSE_S
MAX_PAUSE_S = 0.05


def geometry(limit: int, processes: int, idle_ns: int, capacity: int | None) -> Geometry:
    """A keyed window of one ring: one bucket of ``idle_ns`` (a key's idle time) whose limit
    is ``limit``; rows of a mark word and ``limit`` holder entries; ``processes`` stripes."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY:
        raise ValueError(f"limit must be an int in 1..{MAX_CONCURRENCY}, not {limit!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_STRIPES:
        raise ValueError(f"processes must be an int in 1..{MAX_STRIPES}, not {processes!r}")
    if capacity is None:  # as many keys as the address budget maps (a key's row is its holders)
        per_key = 128 + CONC_HOLDER_BYTES * limit + 64 + 512
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    g = window_geometry(f"{idle_ns}ns", 1, None, (FIELD,), "int64", None, None, capacity, keyed=True)
    return dataclasses.replace(g, rings=(Ring(idle_ns, 1, limit),), n_stripes=processes, role=ROLE)


def _other_limit(name: str, limit: int, clock: Clock | None) -> GeometryMismatchError | None:
    """The error for a concurrency segment under ``name`` with another limit (None: not that).
    Its limit does not change live yet, whatever ``on_change``: the slots held are their
    processes' entries in that segment's rows, sized for its limit, and cannot move."""
    try:
        with Window.attach(name, clock=clock) as window:
            g = window.geometry
    except Exception:  # gone meanwhile, or not a window: the first error says it
        return None
    if g.role != ROLE or g.rings[0].limit == limit:
        return None
    return GeometryMismatchError(
        f"concurrency {name!r} exists with limit {g.rings[0].limit}, not {limit}: a concurrency limit "
        f"does not change live (the slots held stay in its segment). Open it with limit={g.rings[0].limit}, "
        f"or, once no process holds it, remove it (`shmwin rm {name}`) and open it with the new limit"
    )


class Concurrency:
    """``Concurrency(name, limit)``: at most ``limit`` holders of each key at once, counted
    over live processes (create the segment, or attach if it exists with the same limit).

    ``acquire(key, timeout=None)`` takes a slot (waits; ``timeout=0`` tries once),
    ``release(key)`` gives it back, ``count(key)`` says how many are held now;
    ``with conc.hold(key, timeout=1):`` does both, raising :class:`ConcurrencyLimitError`
    if no slot comes in time.

    ``on_change`` is a Limiter's (``"carry"``, ``"reset"``, ``"raise"``), but a concurrency
    limit does not change live yet: another limit than the segment's raises
    :class:`GeometryMismatchError` saying what to do, whichever is given.
    """

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        processes: int = DEFAULT_PROCESSES,
        idle: Duration = "1s",
        capacity: int | None = None,
        clock: Clock | None = None,
        perm: int | None = None,
        on_change: str = "carry",
    ):
        want = geometry(limit, processes, to_ns(idle, "idle"), capacity)
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {list(ON_CHANGE)}, not {on_change!r}")
        try:
            window = Window.open_geometry(name, want, clock=clock, perm=perm)
        except GeometryMismatchError as exc:
            raise _other_limit(name, limit, clock) or exc from None
        self._bind(window, clock)

    @classmethod
    def attach(cls, name: str, *, clock: Clock | None = None) -> Concurrency:
        """Attach to an existing concurrency segment by name (its limit is read from it)."""
        window = Window.attach(name, clock=clock)
        if window.geometry.role != ROLE:
            role = window.geometry.role
            window.close()
            raise GeometryMismatchError(f"{name!r} is not a concurrency segment (role {role!r})")
        self = cls.__new__(cls)
        self._bind(window, clock)
        return self

    def _bind(self, window: Window, clock: Clock | None) -> None:
        self.window = window
        self.name = window.name
        self.limit = window.geometry.rings[0].limit
        self._engine = ConcurrencyEngine(window)  # shared memory's: its sections
        self._take, self._give = self._engine.take, self._engine.give  # the core's own, for speed
        self._clock: Callable[[], int] = clock or host_clock()
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", asyncio.sleep)

    # -- slots --------------------------------------------------------------------------------

    def try_acquire(self, key: Key) -> bool:
        """Take a slot of ``key`` if one is free now; never waits."""
        taken, _ = self._take(key)
        return bool(taken)

    def acquire(self, key: Key, timeout: float | None = None) -> bool:
        """Take a slot of ``key``, waiting (sleeping, not spinning) until one is free: False
        after ``timeout`` seconds (``0``: try once; ``None``: wait as long as it takes)."""
        tries = self._tries(key, timeout)
        try:
            while True:
                self._sleep(next(tries))
        except StopIteration as done:
            return bool(done.value)

    async def acquire_async(self, key: Key, timeout: float | None = None) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        tries = self._tries(key, timeout)
        try:
            while True:
                await self._async_sleep(next(tries))
        except StopIteration as done:
            return bool(done.value)

    def _tries(self, key: Key, timeout: float | None) -> Generator[float, None, bool]:
        """The acquire loop, once for both: yields each pause (seconds), returns the verdict.
        A slot frees with no notice (a release, a holder's death), so it looks again after a
        pause that doubles, cut at the deadline."""
        if timeout is not None and timeout < 0:
            raise ValueError(f"timeout cannot be negative, not {timeout!r}")
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        pause = FIRST_PAUSE_S
        while True:
            if self.try_acquire(key):
                return True
            if deadline_ns is not None:
                left_s = (deadline_ns - self._clock()) / NS_PER_S
                if left_s <= 0:
                    return False
                yield min(pause, left_s)
            else:
                yield pause
            pause = min(pause * 2, MAX_PAUSE_S)

    def release(self, key: Key) -> None:
        """Give back one of this handle's slots of ``key``; :class:`NotHeldError` if it holds none."""
        if not self._give(key):
            raise NotHeldError(
                f"concurrency {self.name!r}: this process holds no slot of key {key!r} to release"
            )

    def count(self, key: Key) -> int:
        """Slots of ``key`` held now, by live processes (this one included)."""
        return self._engine.count(key)

    def held(self, key: Key) -> int:
        """Slots of ``key`` this handle holds."""
        return self._engine.mine(key)

    @contextmanager
    def hold(self, key: Key, timeout: float | None = None) -> Iterator[Concurrency]:
        """``with conc.hold(key, timeout=...):`` a slot of ``key`` for the block, given back
        after it; :class:`ConcurrencyLimitError` if none was free within ``timeout``."""
        if not self.acquire(key, timeout):
            raise self._full(key, timeout)
        try:
            yield self
        finally:
            self.release(key)

    @asynccontextmanager
    async def hold_async(self, key: Key, timeout: float | None = None) -> AsyncIterator[Concurrency]:
        """:meth:`hold` for asyncio."""
        if not await self.acquire_async(key, timeout):
            raise self._full(key, timeout)
        try:
            yield self
        finally:
            self.release(key)

    def _full(self, key: Key, timeout: float | None) -> ConcurrencyLimitError:
        """What ``hold`` raises when no slot of ``key`` came free within ``timeout``."""
        return ConcurrencyLimitError(
            f"concurrency {self.name!r}: key {key!r} has {self.limit} holders (timeout {timeout}s)"
        )

    def keys(self) -> list[Key]:
        """The keys in the segment: held, or not reused yet (idle or not)."""
        return all_keys(self.window)

    def holders(self) -> dict[Key, int]:
        """``{key: slots held now}`` of every key holding any (read key by key)."""
        out = {}
        for key in self.keys():
            n = self.count(key)
            if n:
                out[key] = n
        return out

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return bool(self.window.closed)

    def close(self) -> None:
        """Stop using the segment: this handle's slots are given back (its stripe is)."""
        self.window.close()

    def unlink(self) -> bool:
        """Remove the segment from the host (idempotent); attached handles keep working."""
        return self.window.unlink()

    def __enter__(self) -> Concurrency:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<shmwin.Concurrency {self.name!r} limit={self.limit}>"


def is_concurrency(window: Any) -> bool:
    return bool(window.geometry.role == ROLE)


def all_keys(window: Any) -> list[Key]:
    """Every key of a concurrency segment's ``window`` (``Window.keys()`` leaves out keys
    unwritten for the idle time; here a key's holders keep it, whatever its age)."""
    return ConcurrencyEngine(window).all_keys()


def holder_counts(window: Any) -> list[tuple[Key, int]]:
    """``(key, slots held now)`` of every key of a concurrency segment's ``window`` (for the
    tools: each read under the key's row lock, nothing written)."""
    return ConcurrencyEngine(window).values(0)  # holders now: no clock, the processes alive


__all__ = [
    "Concurrency", "ConcurrencyLimitError", "NotHeldError", "all_keys", "holder_counts", "is_concurrency",
]  # fmt: skip
