"""Who has a window open: the live processes that map its segment (``ipcs``' nattch).

The source is ``/proc/<pid>/maps`` of every process: a process holds a window while its
segment is mapped, and the kernel lists every mapping with the file's device and inode.
A line counts when its device and inode are those of the segment file *now* and its path
names that file, so a process still mapping an older, unlinked segment of the same name
is not a holder of the new one (its line ends in ``(deleted)`` and has another inode).

What the scan cannot see makes it *incomplete*, never wrong in the other direction:

* a ``/proc/<pid>/maps`` that could not be read (another user's process when not root,
  a non-dumpable process), since any process may have inherited a mapping and then
  changed its uid (gunicorn's ``--user``);
* ``/proc`` mounted with ``hidepid=1|2`` when not root: other users' processes are not
  even listed;
* processes in other PID namespaces sharing this ``/dev/shm`` (containers started with
  ``--ipc=host`` or ``shareable``) are never listed, and cannot be detected from here.

Callers that act on "nobody holds it" (``shmwin gc``, ``shmwin rm``) keep the window
when the answer is incomplete, unless told otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from ..backends.shm.segment import path_of

PROC = "/proc"


@dataclass(frozen=True)
class Attached:
    """The live processes mapping one window, and whether every process could be checked."""

    pids: tuple[int, ...] = ()
    complete: bool = True
    reason: str = ""  # why the scan is incomplete ("" when complete)


def attached(name: str) -> Attached:
    """The pids of live processes that have window ``name`` mapped (this one included).

    A window that does not exist has no holders (and the answer is complete).
    """
    return attached_many([name])[name]


def attached_many(names: Iterable[str]) -> dict[str, Attached]:
    """:func:`attached` for several windows, with one pass over ``/proc``."""
    names = list(names)
    targets: dict[tuple[int, int], tuple[str, bytes]] = {}
    for name in names:
        path = path_of(name)
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        targets[(st.st_dev, st.st_ino)] = (name, os.path.basename(path).encode())
    holders, unreadable = _scan(targets)
    reasons = [r for r in (_hidden_by_mount(), _unreadable_reason(unreadable)) if r]
    reason = "; ".join(reasons)
    return {name: Attached(tuple(sorted(holders.get(name, ()))), not reason, reason) for name in names}


def _scan(targets: dict[tuple[int, int], tuple[str, bytes]]) -> tuple[dict[str, set[int]], int]:
    """One pass over every ``/proc/<pid>/maps``: holders per window name, and how many
    processes' maps could not be read."""
    holders: dict[str, set[int]] = {}
    unreadable = 0
    if not targets:
        return holders, unreadable
    # a maps line: "start-end perms offset MAJOR:MINOR inode   path"; dev printed as %02x:%02x
    tokens = {f" {os.major(dev):02x}:{os.minor(dev):02x} ".encode(): dev for dev, _ in targets}
    try:
        entries = [e.name for e in os.scandir(PROC) if e.name.isdigit()]
    except OSError:
        return holders, 1
    for entry in entries:
        data = _read_maps(entry)
        if data is None:
            unreadable += 1
            continue
        for token, dev in tokens.items():
            for inode, path in _lines_on(data, token):
                target = targets.get((dev, inode))
                if target is not None and (path == target[1] or path.endswith(b"/" + target[1])):
                    holders.setdefault(target[0], set()).add(int(entry))
    return holders, unreadable


def _read_maps(pid: str) -> bytes | None:
    """The maps of ``pid``: b"" if it has exited (or has no memory), None if unreadable."""
    try:
        with open(f"{PROC}/{pid}/maps", "rb") as f:
            return f.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return b""  # exited meanwhile: holds nothing
    except OSError:
        return None  # EACCES (another user's, not dumpable), EPERM, EIO...


def _lines_on(data: bytes, token: bytes) -> Iterable[tuple[int, bytes]]:
    """(inode, path) of every line of ``data`` whose device field is ``token``."""
    start = 0
    while (at := data.find(token, start)) >= 0:
        begin = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        parts = data[begin:end].split(None, 5)
        start = end + 1
        if len(parts) == 6 and parts[3] == token.strip() and parts[4].isdigit():
            yield int(parts[4]), parts[5]


def _unreadable_reason(count: int) -> str:
    if not count:
        return ""
    who = "processes" if count > 1 else "process"
    hint = "" if os.geteuid() == 0 else " (other users': run as root to see them)"
    return f"the memory maps of {count} {who} could not be read{hint}"


def _hidden_by_mount() -> str:
    """Why ``/proc`` may hide processes from this user, or ""."""
    options = proc_mount_options()
    hidepid = options.get("hidepid", "0")
    if hidepid in ("0", "off") or os.geteuid() == 0:
        return ""
    gid = options.get("gid")
    if gid is not None and gid.isdigit() and int(gid) in (os.getegid(), *os.getgroups()):
        return ""
    return f"{PROC} is mounted with hidepid={hidepid}: other users' processes are invisible"


def proc_mount_options(mountinfo: str | None = None) -> dict[str, str]:
    """The super options of the ``/proc`` mount (from ``/proc/self/mountinfo``, or the text given)."""
    if mountinfo is None:
        try:
            with open(f"{PROC}/self/mountinfo") as f:
                mountinfo = f.read()
        except OSError:
            return {}
    found: dict[str, str] = {}
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or fields[4] != PROC:
            continue
        source = tail.split()
        if len(source) >= 3 and source[0] == "proc":
            found = dict(o.partition("=")[::2] for o in source[2].split(","))  # the last mount wins
    return found
