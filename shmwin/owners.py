"""Who writes a stripe, and whether they are still alive.

An owner is a *thread* (Linux thread ids share the pid space), identified by
``(tid, start_ticks)`` so that a recycled tid is not mistaken for the old owner.
Liveness comes from ``/proc/<tid>/stat``: missing, a zombie, or a different
start time all mean dead. A pid is never passed to ``kill()``: junk in a
corrupted table could otherwise signal a process group.
"""

from __future__ import annotations

import os
import threading

_PROC = "/proc"


def _stat_fields(tid: int) -> list[str] | None:
    """Fields 3.. of /proc/<tid>/stat (after the parenthesised command name)."""
    if tid <= 0:
        return None
    try:
        with open(f"{_PROC}/{tid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    except PermissionError:  # exists, just not ours to read
        return []
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def start_ticks(tid: int) -> int:
    """When thread ``tid`` started, in clock ticks since boot (0 if unknown)."""
    fields = _stat_fields(tid)
    return int(fields[19]) if fields and len(fields) > 19 else 0


def tid_alive(tid: int, started: int = 0) -> bool:
    """Is thread ``tid`` running (and, if ``started`` is given, the same thread)?"""
    fields = _stat_fields(tid)
    if fields is None:
        return False
    if not fields:
        return True
    if fields[0] in ("Z", "X", "x"):
        return False
    return not started or (len(fields) > 19 and int(fields[19]) == started)


def pid_alive(pid: int) -> bool:
    return tid_alive(pid)


def current_thread() -> tuple[int, int, int]:
    """``(tid, start_ticks, pid)`` of the calling thread."""
    tid = threading.get_native_id()
    return tid, start_ticks(tid), os.getpid()
