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

Live limits (docs/operating.md): opening with another limit than the segment's, or
:meth:`Concurrency.set_limit`, changes it for every process at its next call, by ``on_change``:
``"carry"`` (the default) in place -- each key's row has an entry per process stripe, room for
every holder whatever the limit, so the slots held stay held and count against the new limit;
``"reset"``: the name gets a new, empty segment (the slots held are forgotten: their holders'
releases are plain no-ops in the old one); ``"raise"``: :class:`GeometryMismatchError`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from .backends.contract import Key
from .backends.shm import live
from .backends.shm.roles import ConcurrencyEngine
from .backends.shm.window import PERM, ShmOptions, ShmWindow
from .clock import Clock, host_clock
from .errors import ConcurrencyLimitError, GeometryMismatchError, NotHeldError, WindowMovedError
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
ON_CHANGE = ("carry", "reset", "raise")  # a Limiter's (shmwin.backends.shm.live)
FIELD = "holders"
DEFAULT_PROCESSES = 128  # processes that may hold slots at once (one stripe each)
NS_PER_S = 1_000_000_000
FIRST_PAUSE_S = 0.001  # a waiting acquire looks again after this, doubling up to MAX_PAUSE_S
MAX_PAUSE_S = 0.05


def geometry(limit: int, processes: int, idle_ns: int, capacity: int | None) -> Geometry:
    """A keyed window of one ring: one bucket of ``idle_ns`` (a key's idle time) whose limit
    is ``limit``; ``processes`` stripes, and rows of a top word and one holder entry per
    stripe (room for every holder, whatever the limit: it changes live in place)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY:
        raise ValueError(f"limit must be an int in 1..{MAX_CONCURRENCY}, not {limit!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_STRIPES:
        raise ValueError(f"processes must be an int in 1..{MAX_STRIPES}, not {processes!r}")
    if capacity is None:  # as many keys as the address budget maps (a key's row is its holders)
        per_key = 128 + CONC_HOLDER_BYTES * processes + 64 + 512  # not the limit's: it changes
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    g = window_geometry(f"{idle_ns}ns", 1, None, (FIELD,), "int64", None, None, capacity, keyed=True)
    return dataclasses.replace(g, rings=(Ring(idle_ns, 1, limit),), n_stripes=processes, role=ROLE)


def _same_but_limit(have: Geometry, want: Geometry) -> bool:
    """Is ``have`` ``want`` but for the limit (a concurrency's, whose limit changes live)?"""
    if have.role != ROLE or len(have.rings) != 1:
        return False
    rings = (dataclasses.replace(want.rings[0], limit=have.rings[0].limit),)
    return dataclasses.replace(want, rings=rings) == have


def _limit_error(name: str, have: int, want: int) -> GeometryMismatchError:
    """``on_change="raise"``'s error: the limit in force, and what to do."""
    return GeometryMismatchError(
        f"concurrency {name!r} exists with limit {have}, not {want} (on_change='raise'). Open it with "
        f"limit={have}, change it live (on_change='carry', `shmwin set {name} {want}`), or, once no process "
        f"holds it, remove it (`shmwin rm {name}`) and open it with the new limit"
    )


class Concurrency:
    """``Concurrency(name, limit)``: at most ``limit`` holders of each key at once, counted
    over live processes (create the segment, or attach if it exists with the same limit).

    ``acquire(key, timeout=None)`` takes a slot (waits; ``timeout=0`` tries once),
    ``release(key)`` gives it back, ``count(key)`` says how many are held now;
    ``with conc.hold(key, timeout=1):`` does both, raising :class:`ConcurrencyLimitError`
    if no slot comes in time.

    Another limit than the segment's changes it for every process at its next call, by
    ``on_change``: ``"carry"`` (in place: slots held stay held and count against the new
    limit), ``"reset"`` (a new, empty segment: slots held are forgotten) or ``"raise"``
    (:class:`GeometryMismatchError`). :meth:`set_limit` does the same without opening.
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
        except GeometryMismatchError:  # made with another limit? then it changes, by on_change
            window = Window.attach(name, clock=clock, perm=perm)
            if not _same_but_limit(window.geometry, want):
                window.close()
                raise
        self._opts = ShmOptions(clock=clock, perm=PERM if perm is None else perm)
        self._bind(window, clock)
        if self.limit != limit:  # made with another, or changed live since: the newest open wins
            try:
                self._change(limit, on_change)
            except BaseException:
                self.close()
                raise

    @classmethod
    def attach(cls, name: str, *, clock: Clock | None = None) -> Concurrency:
        """Attach to an existing concurrency segment by name (its limit is read from it)."""
        window = Window.attach(name, clock=clock)
        if window.geometry.role != ROLE:
            role = window.geometry.role
            window.close()
            raise GeometryMismatchError(f"{name!r} is not a concurrency segment (role {role!r})")
        self = cls.__new__(cls)
        self._opts = ShmOptions(clock=clock)
        self._bind(window, clock)
        return self

    def _bind(self, window: Window, clock: Clock | None) -> None:
        self.window = window
        self.name = window.name
        self._before: list[Window] = getattr(self, "_before", [])  # replaced segments still holding ours
        self._engine = ConcurrencyEngine(window)  # shared memory's: its sections
        self._take, self._give = self._engine.take, self._engine.give  # the core's own, for speed
        self._clock: Callable[[], int] = clock or host_clock()
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", asyncio.sleep)

    # -- slots --------------------------------------------------------------------------------

    def try_acquire(self, key: Key) -> bool:
        """Take a slot of ``key`` if one is free now; never waits."""
        try:
            taken, _ = self._take(key)
        except WindowMovedError:  # reset under its name: take it in the name's segment now
            self._follow()
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
        """Give back one of this handle's slots of ``key``; :class:`NotHeldError` if it holds none
        (a slot a reset forgot is given back in the segment it was taken in, counting nowhere)."""
        if not self._give(key):
            raise self._not_held(key)

    def _release_after_reset(self, key: Key) -> None:
        """``release`` once this handle followed a reset (bound over it by :meth:`_follow`): a
        slot the reset forgot goes first. Which of its threads holds which slot is not known,
        so a forgotten one given back first keeps a counted one held until the last release:
        never a holder inside that the name's segment does not count."""
        if not any(ConcurrencyEngine(w).give(key) for w in self._before) and not self._give(key):
            raise self._not_held(key)

    def _not_held(self, key: Key) -> NotHeldError:
        return NotHeldError(f"concurrency {self.name!r}: this process holds no slot of key {key!r} to release")  # noqa: E501

    def count(self, key: Key) -> int:
        """Slots of ``key`` held now, by live processes (this one included)."""
        return int(self._following(lambda: self._engine.count(key)))

    def held(self, key: Key) -> int:
        """Slots of ``key`` this handle holds (in the name's segment: not those a reset forgot)."""
        return int(self._following(lambda: self._engine.mine(key)))

    # -- live limits ------------------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """The limit in force: the segment's, as the last change left it (any process's)."""
        self._follow_if_moved()
        return int(self._engine.limit())

    def set_limit(self, limit: int, *, on_change: str = "carry") -> None:
        """Change the limit for every process, at each one's next call: ``"carry"`` (in place,
        the slots held count against it) or ``"reset"`` (a new, empty segment)."""
        if on_change not in ("carry", "reset"):
            raise ValueError(f"on_change must be 'carry' or 'reset', not {on_change!r}")
        geometry(limit, 1, 1, 1)  # checks the limit as an open would
        self._change(limit, on_change)

    def _change(self, limit: int, on_change: str) -> None:
        """The segment's limit made ``limit`` (this handle follows at once), by ``on_change``."""
        if on_change == "raise":
            raise _limit_error(self.name, self.limit, limit)
        self._following(lambda: self._engine.set_limit(limit))  # in place: every process's next call
        if on_change == "reset":  # then a new segment under the name, empty, of that limit
            g = self.window.geometry
            want = dataclasses.replace(g, rings=(dataclasses.replace(g.rings[0], limit=limit),))
            mover = ShmWindow.attach(self.name, self._opts)  # move() closes it (ours stays, for releases)
            try:
                opened = live.move(mover, want, carry=False, opts=self._opts)
            except BaseException:
                mover.close()
                raise
            self._follow(Window._over(opened, self._opts.clock))

    def _following(self, call: Callable[[], Any]) -> Any:
        """``call()``, once again in the name's segment if this one was replaced (a reset)."""
        try:
            return call()
        except WindowMovedError:
            self._follow()
            return call()

    def _follow_if_moved(self) -> None:
        """Follow a reset now (the reads that meet no row lock: the limit, the keys)."""
        if self._engine.moved():
            self._follow()

    def _follow(self, window: Window | None = None) -> None:
        """Bind the name's segment now (``window``, or reopened): the old one is kept for the
        releases of the slots this handle took there (until :meth:`close`)."""
        old = self.window
        if window is None:
            window = Window._over(live.reopen(self.name, self._opts), self._opts.clock)
        if not old.closed:
            self._before.append(old)
            self.release = self._release_after_reset  # type: ignore[method-assign]
        self._bind(window, self._opts.clock)

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
        self._follow_if_moved()
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
        for old in self._before:
            old.close()
        self._before.clear()
        self.window.close()

    def unlink(self) -> bool:
        """Remove the segment from the host (idempotent); attached handles keep working."""
        return self.window.unlink()

    def __enter__(self) -> Concurrency:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<shmwin.Concurrency {self.name!r} limit={'?' if self.closed else self.limit}>"


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
