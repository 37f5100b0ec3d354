"""Clocks: callables that return monotonic nanoseconds.

The default is the host's CLOCK_MONOTONIC (:func:`host_clock`) -- one clock for the
whole host, never stepped by NTP, restarted at boot exactly when ``/dev/shm`` is
emptied. A process in a time namespace (a container started with one, a CRIU restore)
reads it shifted by its namespace's offset; shmwin takes that offset off, as the native
core does, so every process of a host stamps a window with the same clock.
:class:`ManualClock` lets tests drive time by hand, within one process or, backed by a
file, across unrelated processes.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable

from .rate import NS_PER_S

Clock = Callable[[], int]

TIMENS_OFFSETS = "/proc/self/timens_offsets"


def read_timens_offset_ns(path: str = TIMENS_OFFSETS) -> int:
    """How far this process's CLOCK_MONOTONIC runs ahead of the host's (its time namespace's
    ``monotonic`` offset), in ns; 0 outside a time namespace or without the file."""
    try:
        with open(path) as f:
            for line in f:
                kind, *value = line.split()
                if kind == "monotonic" and len(value) == 2:
                    return int(value[0]) * NS_PER_S + int(value[1])
    except (OSError, ValueError):
        pass
    return 0


_timens_offset_ns = read_timens_offset_ns()


def _after_fork() -> None:
    global _timens_offset_ns  # a child may be in a new time namespace (unshare -T, then fork)
    _timens_offset_ns = read_timens_offset_ns()


os.register_at_fork(after_in_child=_after_fork)


# The latest reading a clock may give: 2**62 ns (146 years of uptime, or the wall clock's
# year 2116). Above it a window's epoch maths (a reading plus whole periods) could pass
# int64, and a key stamped with it would read as corrupt ever after; the native core
# refuses such a reading the same way, before anything is written.
MAX_NOW_NS = 1 << 62  # the latest reading taken (146 years of uptime); every format must hold it


def checked_clock(clock: Clock) -> Clock:
    """``clock`` for the Python readers: each reading an int in ``0 .. MAX_NOW_NS``, or a
    ``ValueError`` (as the native core's writers say)."""

    def now_ns() -> int:
        value = clock()
        if isinstance(value, float) and not 0 <= value < MAX_NOW_NS:
            raise ValueError(f"the clock returned {value!r} ns, not a time shmwin can store")
        reading = int(value)
        if not 0 <= reading < MAX_NOW_NS:
            raise ValueError(
                f"the clock returned {reading} ns: shmwin takes 0 to 2**62 ns (146 years of uptime)"
            )
        return reading

    return now_ns


def host_monotonic_ns() -> int:
    """CLOCK_MONOTONIC as the host reads it, whatever this process's time namespace."""
    # int(): a time-mocking library may have patched the clock to return floats
    return int(time.monotonic_ns()) - _timens_offset_ns


def host_clock() -> Clock:
    """The default clock: :func:`time.monotonic_ns` itself where no time namespace shifts it
    (the usual case, and the cheapest call), else :func:`host_monotonic_ns`."""
    return time.monotonic_ns if _timens_offset_ns == 0 else host_monotonic_ns

_WORD = struct.Struct("<q")


class ManualClock:
    """A clock that only moves when told to.

    ``ManualClock()`` lives in this process (children forked later see their own
    copy). ``ManualClock(path=p)`` keeps the time in a file that every process
    opening the same path shares, so one test process can move time for all.
    """

    def __init__(self, start_ns: int = 0, *, path: str | os.PathLike[str] | None = None):
        if start_ns < 0:
            raise ValueError("a monotonic clock cannot start before 0")
        self._mm: mmap.mmap | None = None
        self._now_ns = start_ns
        self.sleeps: list[float] = []  # every sleep() asked for, for tests
        if path is not None:
            self._mm = _map_clock_file(os.fspath(path), start_ns)

    def __call__(self) -> int:
        if self._mm is not None:
            return int(_WORD.unpack_from(self._mm, 0)[0])
        return self._now_ns

    def set(self, now_ns: int) -> None:
        """Jump to ``now_ns`` (a monotonic clock may only move forward)."""
        if now_ns < self():
            raise ValueError(f"a monotonic clock cannot go back ({now_ns} < {self()})")
        if self._mm is not None:
            _WORD.pack_into(self._mm, 0, now_ns)
        else:
            self._now_ns = now_ns

    def advance(self, seconds: float = 0, *, ns: int = 0) -> int:
        """Move forward by ``seconds`` plus ``ns``; returns the new time."""
        self.set(self() + round(seconds * NS_PER_S) + ns)
        return self()

    def sleep(self, seconds: float) -> None:
        """What a limiter's ``acquire`` calls instead of ``time.sleep``: time just moves."""
        self.sleeps.append(seconds)
        self.advance(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """``acquire_async``'s sleep: moves time, then yields to the event loop once."""
        self.sleep(seconds)
        await loop_sleep(0)


async def loop_sleep(seconds: float) -> None:
    """``asyncio.sleep``, the default sleep of the ``*_async`` waits. asyncio (with ssl, socket and
    concurrent.futures: 0.04 CPU-s) is imported here, when a wait first runs, not by ``import
    shmwin`` in every process that never awaits; a wait sleeps anyway, so the lookup is free."""
    import asyncio

    await asyncio.sleep(seconds)


def _map_clock_file(path: str, start_ns: int) -> mmap.mmap:
    """Open (creating with ``start_ns`` if new) the 8-byte file behind a shared clock."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, _WORD.pack(start_ns))
    except FileExistsError:
        fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, _WORD.size)
    finally:
        os.close(fd)
