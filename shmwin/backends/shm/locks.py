"""The segmented lock table: process-shared *robust* pthread mutexes in the segment.

Why robust mutexes: when a holder is SIGKILLed, a posix_ipc semaphore or a
multiprocessing.Lock stays held forever. A robust mutex is released by the kernel,
and the next locker gets ``EOWNERDEAD`` at once; it then *repairs* what the dead
holder may have left half-written (``core/locks.c``, ``repair()``) before marking the
mutex consistent.

Taking and releasing these locks happens only inside the native core, so that no
Python code -- and so no Python exception -- ever runs while one is held. This module
initialises the table and checks it on attach.
"""

from __future__ import annotations

import functools
import mmap

from ... import _core
from ...errors import CorruptSegmentError
from .layout import LOCK_BYTES


def init_stripes(mm: mmap.mmap, offset: int, count: int) -> None:
    """A new stripe table: every entry free, every liveness mutex robust and unlocked."""
    _core.init_stripes(mm, offset, count)


def init_locks(mm: mmap.mmap, offset: int, count: int) -> None:
    """Initialise ``count`` robust process-shared mutexes (creator only, before ready)."""
    _core.init_locks(mm, offset, count)


@functools.lru_cache(maxsize=1)
def _fixed_bytes() -> tuple[tuple[int, int], ...]:
    """(offset, value) of each byte that is non-zero in every fresh mutex: its kind."""
    fresh = bytearray(LOCK_BYTES)
    _core.init_locks(fresh, 0, 1)
    return tuple((i, b) for i, b in enumerate(fresh[: _core.MUTEX_BYTES]) if b)


def check_lock_table(mm: mmap.mmap, offset: int, count: int) -> None:
    """Every lock must still be a robust process-shared mutex: junk there is corruption."""
    fixed = _fixed_bytes()
    for n in range(count):
        start = offset + n * LOCK_BYTES
        if any(mm[start + i] != b for i, b in fixed):
            raise CorruptSegmentError(f"lock {n} of the segment's lock table is corrupt")
