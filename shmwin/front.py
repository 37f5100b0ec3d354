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

Decisions. A limiter's decisions: how many hits it admitted, refused, and admitted near the limit.

Every :class:`~shmwin.limiter.Limiter` and :class:`~shmwin.limiter.TokenBucket` on shared
memory keeps, beside its segment ``NAME``, a
small striped window ``NAME.decisions`` (role "decisions") of three fields over its longest
period: ``admitted``, ``rejected`` and ``near_limit`` -- an admitted hit that left at most a
fifth of some rate's limit (envoyproxy/ratelimit's ``near_limit``, at 80 %). The native core
counts each ``hit()`` there after the key's lock is given back, in the calling process's own
row of that window (no lock, no shared cache line), so the counts are every process's and
cost a few ns. ``acquire()`` counts its admission; a try that must wait is not a decision.

In shadow mode (``Limiter(..., shadow=True)``, nginx's ``limit_req_dry_run``) ``hit()``
always answers True, while what it counts is what enforcement would do: a hit over the limit
is a rejection and is not counted against the key.

The window is made with the limiter (``decisions=False``: not at all), and a process that
attaches the limiter counts into it if it exists; the tools (``shmwin ls/show``, the
Prometheus export) read it as any window of role "decisions".
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable, Callable, Generator
from contextlib import suppress
from typing import Any, NamedTuple, Protocol

from . import backends
from .backends.contract import MAX_NAME_CHARS, Closing, Key, Of
from .clock import Clock, host_clock, loop_sleep
from .errors import BackendUnavailableError, GeometryMismatchError, NotSupportedError, WindowNotFoundError
from .policy import fallback, pause_s
from .rate import NS_PER_S, format_ns
from .window import Window

# -- decisions: the window every front on shared memory counts its hits in ---------------------

SUFFIX = ".decisions"  # the window's name, after the limiter's
FIELDS = ("admitted", "rejected", "near_limit")  # the core's TALLY_* order (methods.c)
BUCKETS = 20  # counts forgotten between P and P + P/20 after they happened
NEAR_LIMIT_SHARE = 0.2  # admitted with at most this share of a limit left


class Decisions(NamedTuple):
    """Hits over the limiter's longest period, every process's: ``admitted`` (``near_limit``
    of them with at most a fifth of some limit left after) and ``rejected``."""

    admitted: int
    rejected: int
    near_limit: int


def decisions_name(limiter: str) -> str | None:
    """The decisions window's name, or None if the limiter's name leaves no room for it."""
    name = limiter + SUFFIX
    return name if len(name) <= MAX_NAME_CHARS else None


def open_decisions(limiter: str, longest_period_ns: int, *, create: bool, clock: Clock | None = None,
                   perm: int | None = None) -> Window | None:  # fmt: skip
    """The limiter's decisions window: created (``create``) or attached; None if it has none."""
    name = decisions_name(limiter)
    if name is None:
        return None
    if create:
        buckets = BUCKETS if longest_period_ns % BUCKETS == 0 else 1
        span = format_ns(longest_period_ns)  # the shortest exact spelling
        try:
            return Window._for_role("decisions", name, span, buckets, FIELDS, clock=clock, perm=perm)
        except GeometryMismatchError:
            pass  # the limiter's periods changed live: its decisions go on over the first longest one
    try:
        window = Window.attach(name, clock=clock)
    except WindowNotFoundError:
        return None
    if window.geometry.role != "decisions":
        window.close()
        return None
    return window


def read_decisions(window: Window | None, limiter: str) -> Decisions:
    """The counts in ``window`` now (the whole span: the limiter's longest period)."""
    if window is None:
        raise NotSupportedError(
            f"limiter {limiter!r} keeps no decisions (made with decisions=False, on a backend "
            "that has none, or a name too long for its decisions window)"
        )
    totals = window.totals()
    return Decisions(*(int(totals[f]) for f in FIELDS))



class Checks(Protocol):
    """A backend that answers ``check(key, cost, commit)`` with a tuple: the verdict first."""

    def check(self, key: Key, cost: int, commit: bool) -> tuple[Any, ...]: ...


class Front(Closing):
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
        self._local: Any = None  # on_error="local": the host's share that answers while the backend is away
        on_rebind = getattr(opened, "_on_rebind", None)
        if on_rebind is not None:  # its segment may move (live limits): follow it
            on_rebind(_rebinder(weakref.ref(self)))

    def _rebound(self) -> None:
        """The backend's methods are another segment's now (live limits moved it)."""
        self._window = None
        if self.on_error == "raise":
            self.hit = self._backend.hit  # type: ignore[method-assign]

    def _bind_decisions(
        self, shadow: bool, *, create: bool, longest_ns: int, perm: int | None = None
    ) -> None:
        """This front's shadow mode and decisions window: the
        shared-memory core does both natively (``_set_tally``); another backend keeps no decisions,
        and its shadow mode is the front's ``_hit_shadow``."""
        self.shadow = bool(shadow)
        self._decisions = None
        set_tally = getattr(self._backend, "_set_tally", None)
        if set_tally is None:
            if self.shadow:
                self.hit = self._hit_shadow  # type: ignore[method-assign]
                if self._local is not None:  # on_error="local": the share keeps its hands off hit
                    self._local.unbind()
            return
        try:
            self._decisions = open_decisions(self.name, longest_ns, create=create, clock=self._clock_arg,
                                           perm=perm)  # fmt: skip
            set_tally(self._decisions, self.shadow)
        except BaseException:  # all or none: what this constructor created goes (a full /dev/shm)
            if self._decisions is not None:
                self._decisions._discard()
            backends.discard(self._backend)
            raise

    def _hit_or_fallback(self, key: Key, cost: int = 1) -> bool:
        try:
            return bool(self._backend.hit(key, cost)) or self.shadow
        except BackendUnavailableError:
            return fallback(self.on_error) or self.shadow

    def _hit_shadow(self, key: Key, cost: int = 1) -> bool:
        """Shadow mode on a backend that keeps no decisions: count what enforcement would, and
        answer True -- also while the backend is away, whatever ``on_error`` says (with
        ``on_error="local"``, what the host's share would do: no round trip per hit then)."""
        if self._local is not None:
            self._local.hit(key, cost)
            return True
        with suppress(BackendUnavailableError):
            self._backend.hit(key, cost)
        return True

    def _verdict(self, key: Key, cost: int) -> bool:
        """Would ``cost`` pass now? The backend's check, counting nothing."""
        raise NotImplementedError

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing. (In shadow mode: True.)"""
        if self._local is not None:
            return bool(self._local.test(key, cost)) or self.shadow
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
        return read_decisions(self._decisions, self.name)

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

    url = Of[str]("url", "_backend", 'The backend\'s URL ("" for shared memory).')
    closed = Of[bool]("closed", "_backend", "True once this process has closed it.")

    def close(self) -> None:
        self._backend.close()
        if self._decisions is not None:
            self._decisions.close()
        if self._local is not None:
            self._local.close()

    def unlink(self) -> bool:
        """Remove it (and its decisions window, and this host's local share) for every process:
        True if it was there."""
        if self._decisions is not None:
            self._decisions.unlink()
        if self._local is not None:
            self._local.unlink()
        return bool(self._backend.unlink())

    def __repr__(self) -> str:
        return repr(self._backend)

    # -- waiting ------------------------------------------------------------------------------

    def _take_clock(self, clock: Clock | None) -> None:
        """The clock the limit is read with, and its sleeps (the host's when it has none)."""
        self._clock_arg = clock
        self._clock: Callable[[], int] = clock or host_clock()
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", loop_sleep)

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
            try:  # with on_error="local", the share's check while the backend is away
                answer = (self._backend if self._local is None else self._local).check(key, cost, True)
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


def _rebinder(ref: weakref.ReferenceType[Front]) -> Callable[[], None]:
    """A front's :meth:`Front._rebound`, held weakly (the backend holds it: no cycle)."""

    def rebind() -> None:
        front = ref()
        if front is not None:
            front._rebound()

    return rebind
