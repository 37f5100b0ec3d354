"""Which process writes a stripe, and whether it is still alive.

A stripe belongs to a process (``shmwin/backends/shm/core/``: every write is one native call under the
GIL, so threads of a process never interleave inside a stripe), identified by
``(pid, start_ticks)`` so that a recycled pid is not mistaken for the old owner.
Liveness comes from ``/proc/<pid>/stat``: missing, a zombie, or a different start
time all mean dead. A pid is never passed to ``kill()``: junk in a corrupted table
could otherwise signal a process group.
"""

from __future__ import annotations

import os

_PROC = "/proc"
_me: tuple[int, int] | None = None


def _stat_fields(pid: int) -> list[str] | None:
    """Fields 3.. of /proc/<pid>/stat (after the parenthesised command name)."""
    if pid <= 0:
        return None
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except PermissionError:  # exists, just not ours to read
        return []
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def start_ticks(pid: int) -> int:
    """When process ``pid`` started, in clock ticks since boot (0 if unknown)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def pid_alive(pid: int, started: int = 0) -> bool:
    """Is process ``pid`` running (and, if ``started`` is given, the same process)?"""
    fields = _stat_fields(pid)
    if fields is None:
        return False
    if not fields:
        return True
    if fields[0] in ("Z", "X", "x"):
        return False
    return not started or (len(fields) > 19 and int(fields[19]) == started)


def current_process() -> tuple[int, int]:
    """``(pid, start_ticks)`` of this process (cached; a forked child looks again)."""
    global _me
    if _me is None:
        pid = os.getpid()
        _me = (pid, start_ticks(pid))
    return _me


def _forget() -> None:
    global _me
    _me = None


os.register_at_fork(after_in_child=_forget)
