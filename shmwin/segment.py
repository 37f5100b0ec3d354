"""Named POSIX shared-memory segments: create, attach, close, unlink.

Uses ``posix_ipc`` + ``mmap`` rather than ``multiprocessing.shared_memory``: on
3.10-3.12 the stdlib's resource tracker unlinks a segment when any attaching
process exits (CPython gh-82300). Rules, each learnt the hard way:

* attach with ``size=0`` and check ``fstat`` against the header -- passing a size
  on attach would *shrink* a live segment and the next touch past the end is SIGBUS;
* ``posix_fallocate`` the whole size at creation, so a full ``/dev/shm`` is an
  error now rather than a SIGBUS on some later write;
* create with ``O_EXCL``, initialise, write the magic word *last*; attachers
  wait (bounded) until it appears.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import time
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

import posix_ipc

from .errors import (
    OutOfSpaceError,
    SegmentNotReadyError,
    WindowExistsError,
    WindowNotFoundError,
    WindowPermissionError,
)

T = TypeVar("T")

PREFIX = "shmwin."
SHM_DIR = "/dev/shm"
MAX_NAME_CHARS = 200
_NAME = re.compile(r"^[A-Za-z0-9_.:@+=-]+$")


def namespace() -> str:
    """``SHMWIN_NAMESPACE`` (default empty): hosts simulated on one machine, or tenants,
    each see only their own windows. Stored as ``shmwin.<namespace>~<name>``."""
    ns = os.environ.get("SHMWIN_NAMESPACE", "")
    if ns and not _NAME.match(ns):
        raise ValueError(f"SHMWIN_NAMESPACE={ns!r} may only use letters, digits and _ . : @ + = -")
    return f"{ns}~" if ns else ""


def check_name(name: str) -> str:
    """Validate a window name and return its shm object name (``/shmwin.[<namespace>~]<name>``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"window name must be a non-empty string, not {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"window name is {len(name)} characters; the limit is {MAX_NAME_CHARS}")
    if not _NAME.match(name):
        raise ValueError(
            f"window name {name!r} may only use letters, digits and _ . : @ + = - "
            "(no '/', spaces or control characters)"
        )
    return "/" + PREFIX + namespace() + name


def path_of(name: str) -> str:
    """Where the segment of window ``name`` appears in the filesystem."""
    return SHM_DIR + check_name(name)


def names() -> list[str]:
    """Names of the shmwin windows on this host, sorted."""
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    mine = PREFIX + namespace()
    return sorted(
        e[len(mine) :]
        for e in entries
        if e.startswith(mine) and len(e) > len(mine) and "~" not in e[len(mine) :]
    )


class Segment:
    """A mapped shared-memory segment. ``close()`` is this process; ``unlink()`` is everyone."""

    def __init__(self, name: str, mm: mmap.mmap, fd: int = -1):
        self.name = name
        self.mm = mm
        self.fd = fd  # a descriptor of the segment until release_fd(): keyed windows grow through it

    def release_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def size(self) -> int:
        return len(self.mm)

    @classmethod
    def create(
        cls, name: str, size: int, perm: int, init: Callable[[mmap.mmap], None], reserve: int | None = None
    ) -> Segment:
        """Create exclusively, size it, reserve its first ``reserve`` bytes (all by default; the
        rest stays sparse until reserved by whoever grows into it), run ``init``, which writes
        the magic last."""
        shm_name = check_name(name)
        try:
            shm = posix_ipc.SharedMemory(shm_name, posix_ipc.O_CREX, mode=perm, size=0)
        except posix_ipc.ExistentialError as exc:
            raise WindowExistsError(f"window {name!r} already exists") from exc
        except posix_ipc.PermissionsError as exc:
            raise WindowPermissionError(f"cannot create window {name!r}: {exc}") from exc
        try:
            os.ftruncate(shm.fd, size)
            _reserve(shm.fd, size if reserve is None else min(reserve, size), name)
            mm = mmap.mmap(shm.fd, size)
            init(mm)
            fd = os.dup(shm.fd)
        except BaseException:
            _unlink_quietly(shm_name)
            raise
        finally:
            shm.close_fd()
        return cls(name, mm, fd)

    @classmethod
    def attach(cls, name: str, ready_timeout_s: float, is_ready: Callable[[mmap.mmap], bool]) -> Segment:
        """Map an existing segment once its creator has finished (bounded wait)."""
        shm_name = check_name(name)
        deadline = time.monotonic() + ready_timeout_s
        try:
            shm = posix_ipc.SharedMemory(shm_name, 0, size=0)
        except posix_ipc.ExistentialError as exc:
            raise WindowNotFoundError(f"no window named {name!r} on this host") from exc
        except posix_ipc.PermissionsError as exc:
            raise WindowPermissionError(f"cannot open window {name!r}: {exc}") from exc
        try:
            size = _wait(deadline, lambda: os.fstat(shm.fd).st_size, name, "was never sized")
            mm = mmap.mmap(shm.fd, size)
            fd = os.dup(shm.fd)
        finally:
            shm.close_fd()
        try:
            _wait(deadline, lambda: is_ready(mm), name, "was never marked ready")
        except BaseException:
            mm.close()
            os.close(fd)
            raise
        return cls(name, mm, fd)

    def close(self) -> None:
        self.release_fd()
        if not self.mm.closed:
            self.mm.close()

    def unlink(self) -> bool:
        return unlink(self.name)


def unlink(name: str) -> bool:
    """Remove window ``name`` from the host; True if it existed. Mapped users keep their memory."""
    try:
        posix_ipc.unlink_shared_memory(check_name(name))
    except posix_ipc.ExistentialError:
        return False
    return True


def _reserve(fd: int, size: int, name: str) -> None:
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.ENOMEM):
            free = os.statvfs(SHM_DIR)
            raise OutOfSpaceError(
                exc.errno,
                f"no room in {SHM_DIR} for window {name!r}: it needs {size} bytes, "
                f"{free.f_bavail * free.f_frsize} are free",
            ) from exc
        raise


def _wait(deadline: float, probe: Callable[[], T], name: str, what: str) -> T:
    delay = 0.0005
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise SegmentNotReadyError(
                f"window {name!r} exists but {what}: its creator probably died while "
                f"creating it. Remove it with shmwin.unlink({name!r})"
            )
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _unlink_quietly(shm_name: str) -> None:
    with suppress(posix_ipc.ExistentialError):
        posix_ipc.unlink_shared_memory(shm_name)
