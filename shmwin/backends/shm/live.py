"""Live limits on shared memory: a limiter's rates changed while every process uses it.

A limiter opened with other rates than its segment holds (or ``shmwin set``) changes the
segment's rates for every process, by ``on_change``:

- ``"carry"`` (the default). The same periods and buckets, other limits: in place. The new
  limits go into the header's live words and its generation word moves on (``core/live.c``);
  every process's next call reads them (one load per call), whatever rates its own code
  passed. The counts stay as they are. Other periods, buckets, or a limit past what a
  compact ring's counts hold: the name gets a new segment (:func:`move`), seeded with each
  key's hits -- the most any old rate of the key holds, counted as made at the change (or,
  when the mover's clock is not the users', at the key's newest write: ``_StampClock``), so
  they weigh on every new rate for a whole new period. Hits the old segment had already
  forgotten (older than its longest period) are not seen. Every key's hits are carried, or
  the move fails (rolled back, the old segment live): the new segment holds at least the old
  one's capacity.
- ``"reset"``: a new segment, empty.
- ``"raise"``: :class:`~shmwin.errors.GeometryMismatchError`, as before live limits.

A move: under an exclusive ``flock`` of the old segment's file (movers take turns; a mover
that dies lets go), the new segment is made under a passing name, the old one *retired* (its
generation word's LIVE_MOVED bit: from then on no call counts there), each key's counts read
under its row lock and carried, and the new file renamed over the name. A process still
mapping the old segment meets the bit at its next call; its limiter's hook reopens the name
(:func:`reopen`, waiting while a mover works, taking over from one that died) and makes the
call there. The newest rates win: the last open with other rates, or ``shmwin set``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ..._core import ConcurrencyCore, LimiterCore, TokenBucketCore
from ...clock import host_clock
from ...errors import GeometryMismatchError, KeyTableFullError, SegmentNotReadyError, WindowMovedError
from ...geometry import Geometry, Ring
from ..contract import Key
from . import native, segment
from .format import COUNT32_MAX, LIVE_MOVED
from .window import ShmOptions, ShmWindow

ON_CHANGE = ("carry", "reset", "raise")
DEFAULT_ON_CHANGE = "carry"
POLL_S = 0.002  # a reopen's wait for a mover's lock, between tries


def _core_of(window: ShmWindow) -> Any:
    """A limiter's, a token bucket's or a concurrency's core (the roles whose limits change live)."""
    if isinstance(window._core, (TokenBucketCore, ConcurrencyCore)):
        return window._core
    return native.core_as(window._core, LimiterCore)


def check_on_change(on_change: str) -> str:
    if on_change not in ON_CHANGE:
        raise ValueError(f"on_change must be one of {list(ON_CHANGE)}, not {on_change!r}")
    return on_change


def generation(window: ShmWindow) -> tuple[int, int, tuple[int, ...]]:
    """(live generation word, when its limits last changed (wall ns, 0: never), limits in force)."""
    gen, changed_ns, limits = _core_of(window).live()
    return int(gen), int(changed_ns), tuple(limits)


def moved(window: ShmWindow) -> bool:
    try:
        return bool(generation(window)[0] & LIVE_MOVED)
    except WindowMovedError:  # retired between the core's two loads of the word
        return True


def live_geometry(window: ShmWindow) -> Geometry:
    """The window's geometry with the limits in force (the header's live words, once changed)."""
    g = window.geometry
    limits = generation(window)[2]
    rings = tuple(dataclasses.replace(r, limit=n) for r, n in zip(g.rings, limits, strict=True))
    return dataclasses.replace(g, rings=rings)


def fits_in_place(have: Geometry, want: Geometry) -> bool:
    """Can ``want`` be ``have`` with other limits written in place? Everything but the limits
    alike, and each compact ring's counts as wide as the new limit needs."""
    if have.kind != "limiter" or len(have.rings) != len(want.rings):
        return False  # a token bucket's rate or burst: always a move
    if dataclasses.replace(want, rings=have.rings) != have:
        return False
    return all(_ring_fits(h, w) for h, w in zip(have.rings, want.rings, strict=True))


def _ring_fits(have: Ring, want: Ring) -> bool:
    if dataclasses.replace(want, limit=have.limit) != have:
        return False
    narrow = not have.log and have.limit <= COUNT32_MAX  # 4-byte counts (format.ring_count_bytes)
    return not (narrow and want.limit > COUNT32_MAX)


def change(
    window: ShmWindow, want: Geometry, on_change: str, opts: ShmOptions, *, again: bool = False
) -> ShmWindow:
    """The name's segment holding ``want``'s rates, by ``on_change`` (the module docstring):
    ``window`` itself (same rates, or changed in place), or the name's new segment (``window``
    is then closed). ``again``: a reset asked for (``set_rates``, ``shmwin set --reset``) is
    made even when the rates are already ``want``'s (an open with them leaves the counts)."""
    check_on_change(on_change)
    again = again and on_change == "reset"
    want = at_least(want, window.geometry)
    while True:
        if moved(window):  # a stale mapping: the newest rates are the name's segment's
            window.close()
            window = reopen(window.name, opts)
            want = at_least(want, window.geometry)
        have = live_geometry(window)
        if have == want and not again:
            return window
        if on_change == "raise":
            window.close()
            raise GeometryMismatchError(
                f"window {window.name!r} exists with geometry [{have}], not the requested [{want}] "
                "(on_change='carry' changes its rates live)"
            )
        if on_change == "carry" and fits_in_place(window.geometry, want):
            limits = tuple(r.limit for r in want.rings)
            try:
                _core_of(window).set_limits((limits, time.time_ns()))
                return window
            except Exception:
                if not moved(window):
                    raise
        window, again = move(window, want, carry=on_change == "carry", opts=opts), False


def move(
    old: ShmWindow,
    want: Geometry,
    *,
    carry: bool,
    opts: ShmOptions,
    first: Callable[[], object] | None = None,
) -> ShmWindow:
    """Give the name a new segment of ``want`` (seeded with ``old``'s counts if ``carry``) and
    close ``old``: the name's segment after (another mover's, if one came first). ``first`` runs
    holding the mover's lock, once the new segment is made, just before the old one is retired (a
    concurrency reset's limit in place: a mover killed after it is taken over with it, and an
    opener reads it under the lock's shared side, :func:`no_mover`)."""
    name, path = old.name, old._seg.path
    fd = _open_lockable(path, os.O_RDWR) if _same_file(path, old) else -1
    try:
        locked = fd >= 0 and _lock(fd, opts.ready_timeout)
        if fd >= 0 and not locked and _same_file(path, old):
            old.close()
            waited = f"another process has been replacing it for over {opts.ready_timeout} s"
            raise SegmentNotReadyError(f"window {name!r}: {waited}; try again")
        if not locked or os.fstat(fd).st_ino != old._ino or not _same_file(path, old):
            old.close()
            return reopen(name, opts)  # moved by another process meanwhile
        perm = stat.S_IMODE(os.fstat(fd).st_mode)  # the new segment is trusted as the old one was
        _replace(old, want, carry, dataclasses.replace(opts, perm=perm), first)
    finally:
        if fd >= 0:
            _close_lockable(fd)  # lets go of the flock
    old.close()
    return reopen(name, opts)


def _replace(
    old: ShmWindow, want: Geometry, carry: bool, opts: ShmOptions, first: Callable[[], object] | None = None
) -> None:
    """Holding the old file's lock: make, seed and rename the new segment over the name. All or
    nothing: a carry that cannot store every key's hits (a full key table, a full /dev/shm) or
    any exception rolls back -- the new segment goes and the old one is live again, as it was
    (a kill is a dead mover's: the next call takes over, :func:`reopen`). The carry runs on the
    segment's own clock (:class:`_StampClock`), whatever clock the mover runs."""
    segment.unlink_dead_passing(old._seg.path, old.name)  # a dead mover's (not a live one's of a name alike)
    passing = f"{_passing_prefix(old.name)}{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
    want = at_least(want, old.geometry)
    mover_ns = int((opts.clock or host_clock())())
    stamps = _StampClock(mover_ns, old.geometry.span_ns, _tokens_since(old, want, opts))
    reader = ShmWindow.attach(old.name, dataclasses.replace(opts, clock=stamps))
    try:
        if reader._ino != old._ino:
            raise SegmentNotReadyError(f"window {old.name!r} was replaced under a mover's lock")
        new = ShmWindow.create(passing, want, dataclasses.replace(opts, on_full="raise", clock=stamps))
        _seed(reader, new, want, carry, stamps, first)
    finally:
        reader.close()


def _seed(
    old: ShmWindow,
    new: ShmWindow,
    want: Geometry,
    carry: bool,
    stamps: _StampClock,
    first: Callable[[], object] | None = None,
) -> None:
    """_replace's all or nothing, ``old`` being the mover's own core of the old segment."""
    retired = True  # retire() may raise after its store
    try:
        if first is not None:
            first()  # (its caller undoes it if the move fails: move()'s doc)
        _core_of(old).retire()  # no call counts in the old segment from here (but this core's reads)
        if carry and want.kind == "limiter":
            _carry(old, new, stamps)
        elif carry and want.role == "token-bucket":
            _carry_tokens(old, new, stamps)  # a concurrency moves only to reset: nothing carried
        if new.full_count():
            raise KeyTableFullError(f"window {old.name!r}: its new segment could not hold every key's hits")
        # when it changed, for shmwin show (a token bucket's limits as they are: only the time)
        _core_of(new).set_limits((tuple(r.limit for r in want.rings), time.time_ns()))
        os.rename(new._seg.path, old._seg.path)
    except BaseException:
        new.close()
        with suppress(FileNotFoundError):
            os.unlink(new._seg.path)
        if retired:
            _core_of(old).unretire()  # roll back: the old segment counts again
        raise
    new.close()


def _tokens_since(old: ShmWindow, want: Geometry, opts: ShmOptions) -> int | None:
    """A token bucket's carry: from when on the mover's clock is its users' (:class:`_StampClock`):
    always, when the mover runs a clock it was given (a handle's own: ``set_rate``, an open
    with other rates); else (the host clock: ``shmwin set``) from the old segment's creation on
    the host's clock -- a key's users on the host clock wrote it then or later, a
    ``ManualClock``'s are seen before. None: not a token bucket."""
    if want.role != "token-bucket":
        return None
    return -(1 << 63) if opts.clock is not None else int(old.meta.created_mono_ns)


class _StampClock:
    """The mover's clock while it carries, per key: the mover's own now, if the key was written
    within the old segment's longest period before it (the same clock as its users, as far as
    anyone can tell: the hits are counted as recent as they could be); else the key's newest
    write (its row's last_ns, on the clock its users run -- a ManualClock, another time
    namespace -- which ``shmwin set`` on the host clock cannot know). Either way, a key's
    counts read then are the most it still held, and charged then they weigh on every new rate
    in every interval that holds one of the real hits (each was made at or before it, and every
    later call is later).

    A token bucket's row stamp is not its newest write but its tat less the burst's time (the
    key is idle once its bucket is full again), so a key used once more after a pause reads,
    at that stamp, as an empty bucket: its whole burst would be carried as used, and the new
    bucket emptied for a burst at the new rate (9 of 1000 admitted at 3/second burst 1000, in
    the red team's run). Its keys are read at the mover's now whenever the mover's clock is
    its users' (``tokens_since_ns``: from when on a stamp shows it, ``_tokens_since``): at the
    mover's now the tokens used are what they are."""

    def __init__(self, mover_ns: int, span_ns: int, tokens_since_ns: int | None = None) -> None:
        self.mover_ns, self.span_ns, self.tokens_since_ns = mover_ns, span_ns, tokens_since_ns
        self.now_ns = mover_ns

    def __call__(self) -> int:
        return self.now_ns

    def keys(self, window: ShmWindow) -> Iterator[Key]:
        """``window``'s written keys, each with this clock set to its time."""
        assert window._keys is not None  # a limiter's or a token bucket's: keyed
        for _, key, last_ns in window._keys.entries():  # 0 too: a clock may start there
            recent = last_ns <= self.mover_ns <= last_ns + self.span_ns
            if not recent and self.tokens_since_ns is not None:  # last_ns + span_ns: the key's tat
                recent = last_ns <= self.mover_ns and last_ns + self.span_ns >= self.tokens_since_ns
            self.now_ns = self.mover_ns if recent else last_ns
            yield key


def at_least(want: Geometry, have: Geometry) -> Geometry:
    """``want`` with room for every key ``have`` holds: the larger of the two capacities (an
    opener's smaller capacity never drops keys, nor their carried hits)."""
    if not want.keyed or want.capacity >= have.capacity:
        return want
    return dataclasses.replace(want, capacity=have.capacity)


def _carry(old: ShmWindow, new: ShmWindow, stamps: _StampClock) -> None:
    """Each key's hits as the most any old rate holds, counted in the new segment at the key's
    newest write (:class:`_StampClock`)."""
    for key in stamps.keys(old):
        used = _core_of(old).check(key, 0, False, False)[1]  # under the key's row lock
        held = max(used, default=0)
        if held > 0:
            _core_of(new).charge(key, held)


def _carry_tokens(old: ShmWindow, new: ShmWindow, stamps: _StampClock) -> None:
    """A token bucket's keys: the tokens each has used (the old burst less what it holds) taken
    from its new bucket at the key's newest write, up to the new burst (bucket4j's "as is")."""
    old_burst, new_burst = old.geometry.rings[0].n_buckets, new.geometry.rings[0].n_buckets
    for key in stamps.keys(old):
        used = min(old_burst - _core_of(old).token_check(key, 0, False)[1], new_burst)
        if used > 0:
            _core_of(new).token_check(key, used, True)


def reopen(name: str, opts: ShmOptions) -> ShmWindow:
    """The name's segment, once not retired: waits (up to ``opts.ready_timeout``) while a mover
    works, and finishes the move of one that died (its own rates, carried)."""
    deadline = time.monotonic() + opts.ready_timeout
    while True:
        window = ShmWindow.attach(name, opts)
        if not moved(window):
            return window
        fd = -1
        with suppress(FileNotFoundError):
            fd = _open_lockable(window._seg.path, os.O_RDWR)
        try:
            if fd >= 0 and _lock(fd, 0) and _same_file(window._seg.path, window):
                # its mover died (or gave up): what it made goes (_replace), and the move is done here
                kept = dataclasses.replace(opts, perm=stat.S_IMODE(os.fstat(fd).st_mode))
                _replace(window, live_geometry(window), True, kept)
        finally:
            if fd >= 0:
                _close_lockable(fd)
        window.close()
        if time.monotonic() > deadline:
            raise SegmentNotReadyError(f"window {name!r} is being replaced (new rates): not ready in time")
        time.sleep(POLL_S)


def _passing_prefix(name: str) -> str:
    """The passing names of a move of ``name``'s segment: PREFIX<pid>-<n>."""
    return f"{name[:150]}.moving-"


@contextmanager
def no_mover(window: ShmWindow, timeout_s: float) -> Iterator[None]:
    """Hold a shared flock of ``window``'s file (waited for up to ``timeout_s``, else
    SegmentNotReadyError): meanwhile no mover of it works -- each holds it exclusively from before
    it changes anything until the name is its new segment. Nothing to hold if the file is gone."""
    try:
        fd = _open_lockable(window._seg.path, os.O_RDONLY)
    except FileNotFoundError:
        yield
        return
    try:
        if not _lock(fd, timeout_s, fcntl.LOCK_SH):
            raise SegmentNotReadyError(f"window {window.name!r} is being replaced: not ready in time")
        yield
    finally:
        _close_lockable(fd)


_LOCKABLE_FDS: set[int] = set()  # this process's fds of a segment file it flocks (a mover, an opener)


def _open_lockable(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW)
    _LOCKABLE_FDS.add(fd)
    return fd


def _close_lockable(fd: int) -> None:
    _LOCKABLE_FDS.discard(fd)
    os.close(fd)


def _close_lockables_in_child() -> None:
    """A flock belongs to the open file, which a forked child shares: a child forked while a
    thread of its parent held one would hold it for its whole life (every reset of the name then
    waiting it out). The child closes its copies; the parent's thread lets go as it would."""
    for fd in list(_LOCKABLE_FDS):
        with suppress(OSError):
            os.close(fd)
    _LOCKABLE_FDS.clear()


os.register_at_fork(after_in_child=_close_lockables_in_child)


def _lock(fd: int, timeout_s: float, mode: int = fcntl.LOCK_EX) -> bool:
    """A flock of ``fd`` (exclusive, or ``mode``), waited for up to ``timeout_s``: whether held."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)


def _same_file(path: str, window: ShmWindow) -> bool:
    """Is the file under ``path`` still the one ``window`` maps?"""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == window._ino
    except FileNotFoundError:
        return False


__all__ = ["DEFAULT_ON_CHANGE", "LIVE_MOVED", "ON_CHANGE", "change", "check_on_change", "generation",
           "live_geometry", "move", "moved", "no_mover", "reopen"]  # fmt: skip
