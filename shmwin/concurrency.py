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
``"carry"`` (the default) in place -- the slots held stay held and count against the new
limit (each key's row has ``holders`` entries, one per process holding it: a limit raised past
them stays strict, a process finding no free entry is refused);
``"reset"``: the name gets a new, empty segment (the slots held are forgotten: their holders'
releases are plain no-ops in the old one); ``"raise"``: :class:`GeometryMismatchError`.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from .backends.contract import Closing, Key
from .backends.shm import live
from .backends.shm.roles import ConcurrencyEngine
from .backends.shm.roles.concurrency import ROLE, geometry, holders_of, reset_geometry, same_but_limit
from .backends.shm.window import PERM, ShmOptions, ShmWindow
from .clock import Clock, host_clock, loop_sleep
from .errors import (
    ConcurrencyLimitError,
    GeometryMismatchError,
    NotHeldError,
    WindowClosedError,
    WindowMovedError,
)
from .geometry import Geometry
from .rate import Duration, to_ns
from .window import Window

ON_CHANGE = ("carry", "reset", "raise")  # a Limiter's (shmwin.backends.shm.live)
DEFAULT_PROCESSES = 128  # processes that may hold slots at once (one stripe each)
NS_PER_S = 1_000_000_000
FIRST_PAUSE_S = 0.001  # a waiting acquire looks again after this, doubling up to MAX_PAUSE_S
MAX_PAUSE_S = 0.05


_HANDLES: weakref.WeakSet[Concurrency] = weakref.WeakSet()  # their locks, new in a forked child


def _after_fork_in_child() -> None:
    """A handle's lock may have been held by another thread at the fork: the child's is new."""
    for handle in list(_HANDLES):
        handle._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class _Segment:
    """One segment this handle has bound: its window, its engine's hot pair, and this handle's
    slots in it (a reset's old segment stays mapped only while it holds some).

    No lock on the hot path (a lock costs more than the take): ``slots`` has one item per slot
    held or being taken (list append and pop are atomic under the GIL). A take reserves its
    item first, then looks at ``retired``; a follow sets ``retired`` first, then looks at the
    items: either the take sees the follow (and goes to the new segment) or the follow sees the
    take (and keeps the old segment for its release)."""

    __slots__ = ("engine", "give", "retired", "slots", "take", "window")

    def __init__(self, window: Window):
        self.window = window
        self.engine = ConcurrencyEngine(window)  # shared memory's: its sections
        self.take, self.give = self.engine.take, self.engine.give  # the core's own, for speed
        self.slots: list[None] = []
        self.retired = False

    def drop(self) -> None:
        """One of this handle's slots here given back."""
        try:  # noqa: SIM105 -- contextlib.suppress costs 300 ns on the hot path
            self.slots.pop()
        except IndexError:  # a forked child's inherited items: none to drop
            pass


def _shape(g: Geometry) -> str:
    """What a concurrency's opener chooses but its limit: as its keyword arguments read."""
    idle_ns = g.rings[0].span_ns
    return f"processes={g.n_stripes}, idle={idle_ns}ns, capacity={g.capacity}, holders={holders_of(g)}"


def _shape_error(name: str, have: Geometry, want: Geometry) -> GeometryMismatchError:
    """Another shape than the segment's (a window's message would show two alike: it leaves
    out the processes): what differs, and what to do."""
    return GeometryMismatchError(
        f"concurrency {name!r} exists with {_shape(have)}, not {_shape(want)}: only its limit changes live. "
        f"Open it with those, or, once no process holds it, remove it (`shmwin rm {name}`)"
    )


def _limit_error(name: str, have: int, want: int) -> GeometryMismatchError:
    """``on_change="raise"``'s error: the limit in force, and what to do."""
    return GeometryMismatchError(
        f"concurrency {name!r} exists with limit {have}, not {want} (on_change='raise'). Open it with "
        f"limit={have}, change it live (on_change='carry', `shmwin set {name} {want}`), or, once no process "
        f"holds it, remove it (`shmwin rm {name}`) and open it with the new limit"
    )


class Concurrency(Closing):
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
        holders: int | None = None,
    ):
        want = geometry(limit, processes, to_ns(idle, "idle"), capacity, holders)
        if on_change not in ON_CHANGE:
            raise ValueError(f"on_change must be one of {list(ON_CHANGE)}, not {on_change!r}")
        try:
            window = Window.open_geometry(name, want, clock=clock, perm=perm)
        except GeometryMismatchError:  # made with another limit? then it changes, by on_change
            window = Window.attach(name, clock=clock, perm=perm)
            if not same_but_limit(window.geometry, want, holders is not None):
                have = window.geometry
                window.close()
                if have.role != ROLE:
                    raise
                raise _shape_error(name, have, want) from None
        self._opts = ShmOptions(clock=clock, perm=PERM if perm is None else perm)
        self._bind(window, clock)
        if self._settled_limit() != limit:  # made with another, or changed live since: the newest open wins
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
        self.name = window.name
        # one lock per handle: its threads' takes, gives and follows of a reset in turn, so that a
        # reset is followed once (the others see the new binding) and every slot is counted in
        # the segment it was taken in (released there, whichever thread gives it back)
        self._lock = threading.Lock()
        self._pid = os.getpid()
        _HANDLES.add(self)
        self._before: list[_Segment] = []  # replaced segments this handle still holds slots in, oldest first
        self._use(_Segment(window))
        self._clock: Callable[[], int] = clock or host_clock()
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", loop_sleep)

    def _use(self, seg: _Segment) -> None:
        """Make ``seg`` the name's segment for this handle (the lock held, or at the bind)."""
        self._seg = seg
        self.window, self._engine = seg.window, seg.engine

    # -- slots --------------------------------------------------------------------------------

    def try_acquire(self, key: Key) -> bool:
        """Take a slot of ``key`` if one is free now; never waits."""
        return self._take_in(key) is not None

    def _take_in(self, key: Key) -> _Segment | None:
        """Take a slot of ``key`` in the name's segment (following a reset): the segment it was
        taken in (its release goes there), or None. Its item in ``slots`` goes first (_Segment)."""
        while True:
            seg = self._seg
            slots = seg.slots
            slots.append(None)
            if seg.retired:  # followed meanwhile (or a follow cut short: finish it): the name's segment
                seg.drop()
                if self._seg is seg:
                    with self._lock:
                        self._follow_locked(seg)
                continue
            try:
                taken, _ = seg.take(key)
            except WindowMovedError:  # reset under its name: follow (once, whichever thread), again
                seg.drop()
                with self._lock:
                    self._follow_locked(seg)
                continue
            except BaseException:
                seg.drop()
                raise
            if not taken:
                seg.drop()
                return None
            return seg

    def acquire(self, key: Key, timeout: float | None = None) -> bool:
        """Take a slot of ``key``, waiting (sleeping, not spinning) until one is free: False
        after ``timeout`` seconds (``0``: try once; ``None``: wait as long as it takes)."""
        return self._acquire_in(key, timeout) is not None

    def _acquire_in(self, key: Key, timeout: float | None) -> _Segment | None:
        """:meth:`acquire`, answering the segment the slot was taken in (or None)."""
        if timeout == 0:  # the hot path: one try, no wait loop
            return self._take_in(key)
        tries = self._tries(key, timeout)
        try:
            while True:
                self._sleep(next(tries))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def acquire_async(self, key: Key, timeout: float | None = None) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        return await self._acquire_in_async(key, timeout) is not None

    async def _acquire_in_async(self, key: Key, timeout: float | None) -> _Segment | None:
        tries = self._tries(key, timeout)
        try:
            while True:
                await self._async_sleep(next(tries))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def _tries(self, key: Key, timeout: float | None) -> Generator[float, None, _Segment | None]:
        """The acquire loop, once for both: yields each pause (seconds), returns the verdict.
        A slot frees with no notice (a release, a holder's death), so it looks again after a
        pause that doubles, cut at the deadline."""
        if timeout is not None and not timeout >= 0:  # NaN too
            raise ValueError(f"timeout must be seconds, not negative nor NaN, or None, not {timeout!r}")
        forever = timeout is None or timeout == float("inf")
        deadline_ns = None if forever else self._clock() + round(timeout * NS_PER_S)  # type: ignore[operator]
        pause = FIRST_PAUSE_S
        while True:
            seg = self._take_in(key)
            if seg is not None:
                return seg
            if deadline_ns is not None:
                left_s = (deadline_ns - self._clock()) / NS_PER_S
                if left_s <= 0:
                    return None
                yield min(pause, left_s)
            else:
                yield pause
            pause = min(pause * 2, MAX_PAUSE_S)

    def release(self, key: Key) -> None:
        """Give back one of this handle's slots of ``key``; :class:`NotHeldError` if it holds none.

        A slot a reset forgot is given back in the segment it was taken in, counting nowhere:
        the oldest segment holding one of ``key`` first, so that a release never frees a slot
        taken after a reset while a slot taken before it is still held (``hold()`` gives back
        in the very segment it took in)."""
        seg = self._seg  # before _before: a follow appends the old one there before it binds the new
        if not self._before and not seg.retired:  # the hot path: every slot of ours is in seg
            try:
                if seg.give(key):
                    seg.drop()
                    return
            except WindowClosedError:  # closed by a follow meanwhile: the slow path says
                pass
        with self._lock:
            for seg in [*self._before, self._seg]:
                if self._give_in(seg, key):
                    return
        if self.closed:
            raise WindowClosedError(f"concurrency {self.name!r} is closed: its slots were given back then")
        raise NotHeldError(f"concurrency {self.name!r}: this process holds no slot of key {key!r} to release")

    def _give_in(self, seg: _Segment, key: Key) -> bool:
        """Give back one of this handle's slots of ``key`` in ``seg`` (the lock held): whether it
        held one; a replaced segment holding no more of ours is closed (unmapped) at once."""
        if seg.window.closed or not seg.give(key):
            return False
        seg.drop()
        if seg is not self._seg and not seg.slots and seg in self._before:
            self._before.remove(seg)
            seg.window.close()
        return True

    def _release_in(self, seg: _Segment, key: Key) -> None:
        """``hold()``'s release: in the segment its slot was taken in."""
        with self._lock:
            if self._give_in(seg, key):
                return
        self.release(key)  # not there (a close in between): as a bare release would

    def count(self, key: Key) -> int:
        """Slots of ``key`` held now, by live processes (this one included)."""
        return int(self._following(lambda seg: seg.engine.count(key)))

    def held(self, key: Key) -> int:
        """Slots of ``key`` this handle holds (in the name's segment: not those a reset forgot)."""
        return int(self._following(lambda seg: seg.engine.mine(key)))

    # -- live limits ------------------------------------------------------------------------------

    @property
    def limit(self) -> int:
        """The limit in force: the segment's, as the last change left it (any process's)."""
        return int(self._following(lambda seg: seg.engine.limit(), unless_moved=True))

    def set_limit(self, limit: int, *, on_change: str = "carry") -> None:
        """Change the limit for every process, at each one's next call: ``"carry"`` (in place,
        the slots held count against it) or ``"reset"`` (a new, empty segment)."""
        if on_change not in ("carry", "reset"):
            raise ValueError(f"on_change must be 'carry' or 'reset', not {on_change!r}")
        geometry(limit, 1, 1, 1)  # checks the limit as an open would
        self._follow_if_moved()  # a reset asked for replaces the name's segment as it is now
        self._change(limit, on_change)

    def _change(self, limit: int, on_change: str) -> None:
        """The segment's limit made ``limit`` (this handle follows at once), by ``on_change``."""
        if on_change == "raise":
            raise _limit_error(self.name, self.limit, limit)
        if on_change == "carry":
            self._following(lambda seg: seg.engine.set_limit(limit))  # in place: every process's next call
            return
        # reset: holding the mover's lock, a new segment under the name, empty, of that limit, made
        # under a passing name; then the limit in place (a mover killed after it is taken over with
        # it; killed between it and the retire, the change is a carry: stricter, never looser) and
        # the old segment retired; all or nothing: a move that fails (a full /dev/shm) leaves the
        # old segment and its limit as they were (an opener reads the limit under the lock's shared
        # side: _settled_limit). The segment reset is the one this handle found with the other
        # limit (``seen``): when another process replaced it first (a deploy's workers opening at
        # once), that was the reset -- a second would forget the slots taken in the first one's
        # segment -- and ours goes in place there.
        seen = self._seg
        before = self.limit
        want = reset_geometry(self.window.geometry, limit)
        mover = ShmWindow.attach(self.name, self._opts)  # move() closes it (ours stays, for releases)
        if self._seg is seen and seen.engine.maps_same_file(mover):
            wrote: list[int] = []  # the limit written in place (the move's last step before the retire)

            def in_place() -> None:
                wrote.append(seen.engine.set_limit(limit))

            try:
                opened = live.move(mover, want, carry=False, opts=self._opts, first=in_place)
            except BaseException:
                mover.close()
                if wrote and not seen.engine.moved():
                    seen.engine.set_limit(before)
                raise
            with self._lock:
                self._follow_locked(seen, Window._over(opened, self._opts.clock))
        else:
            mover.close()
        self._follow_if_moved()
        if self.limit != limit:  # another process's reset came first (its limit): ours in place
            self._following(lambda seg: seg.engine.set_limit(limit))

    def _settled_limit(self) -> int:
        """The limit in force, read while no reset of the name's segment is under way: a reset
        writes its limit in place, then replaces the segment, holding the file's lock, and an
        opener that read the new limit meanwhile would take its slots in a segment about to be
        forgotten (a deploy's workers opening at once with ``on_change="reset"``)."""
        while True:
            seg = self._seg
            with seg.engine.no_mover(self._opts.ready_timeout):
                limit = None if seg.engine.moved() else int(seg.engine.limit())
            if limit is not None:
                return limit
            self._follow_if_moved()  # the lock let go first: a dead mover is taken over there

    def _following(self, call: Callable[[_Segment], Any], unless_moved: bool = False) -> Any:
        """``call(seg)`` on the name's segment, again in the new one while it was replaced (a
        reset: a row lock's call says so, ``unless_moved`` looks first for the reads that take
        none) or closed by another thread's follow meanwhile; a follow cut short (a fork, an
        exception: ``seg.retired`` but still bound) is finished here."""
        while True:
            seg = self._seg
            try:
                if seg.retired or (unless_moved and seg.engine.moved()):
                    raise WindowMovedError(f"concurrency {self.name!r} was replaced")
                return call(seg)
            except (WindowMovedError, WindowClosedError):
                if seg.window.closed and self._seg is seg:  # in this order: a follow binds, then closes
                    raise  # this handle was closed
                if self._seg is seg:
                    with self._lock:
                        self._follow_locked(seg)  # (else another thread followed meanwhile: again)

    def _follow_if_moved(self) -> None:
        """Follow a reset now."""
        self._following(lambda seg: None, unless_moved=True)

    def _follow_locked(self, seen: _Segment, window: Window | None = None) -> None:
        """Bind the name's segment (``window``, or reopened), the lock held, if this handle is
        still bound to ``seen`` (the one its caller found replaced): another thread that met the
        reset first followed it already. The old segment is kept, for the releases of the slots
        this handle took there, while it holds any; else closed at once (unmapped)."""
        if self._seg is not seen:
            if window is not None:
                window.close()  # ours came second: the name's segment is bound already
            return
        if window is None:
            window = Window._over(live.reopen(self.name, self._opts), self._opts.clock)
        seen.retired = True  # before its items are looked at (_Segment)
        if self._pid != os.getpid():  # a forked child holds none of its parent's slots
            self._pid = os.getpid()
            for old in self._before:
                old.window.close()
            self._before.clear()
            seen.slots.clear()
        for old in [o for o in self._before if not o.slots]:  # given back on the hot path meanwhile
            self._before.remove(old)
            old.window.close()
        kept = bool(seen.slots) and not seen.window.closed
        if kept:
            self._before.append(seen)  # before the new one is bound: release's hot path reads them so
        self._use(_Segment(window))
        if not kept:  # after the new one is bound: a segment bound and closed is a closed handle's
            seen.window.close()

    @contextmanager
    def hold(self, key: Key, timeout: float | None = None) -> Iterator[Concurrency]:
        """``with conc.hold(key, timeout=...):`` a slot of ``key`` for the block, given back
        after it; :class:`ConcurrencyLimitError` if none was free within ``timeout``."""
        with self._holding(self._acquire_in(key, timeout), key, timeout):
            yield self

    @asynccontextmanager
    async def hold_async(self, key: Key, timeout: float | None = None) -> AsyncIterator[Concurrency]:
        """:meth:`hold` for asyncio."""
        with self._holding(await self._acquire_in_async(key, timeout), key, timeout):
            yield self

    @contextmanager
    def _holding(self, seg: _Segment | None, key: Key, timeout: float | None) -> Iterator[None]:
        """The block of ``hold``/``hold_async`` around the slot ``seg`` took: given back after it,
        whatever it raised; a ConcurrencyLimitError if no slot came free within ``timeout``."""
        if seg is None:
            raise ConcurrencyLimitError(
                f"concurrency {self.name!r}: key {key!r} has {self.limit} holders (timeout {timeout}s)"
            )
        try:
            yield
        finally:
            self._release_in(seg, key)

    def keys(self) -> list[Key]:
        """The keys in the segment: held, or not reused yet (idle or not)."""
        return list(self._following(lambda seg: all_keys(seg.window), unless_moved=True))

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
        with self._lock:
            for old in self._before:
                old.window.close()
            self._before.clear()
            self.window.close()

    def unlink(self) -> bool:
        """Remove the segment from the host (idempotent); attached handles keep working."""
        return self.window.unlink()

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
