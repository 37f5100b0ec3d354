"""Named POSIX shared-memory segments: create, attach, close, unlink -- and whom to trust.

A segment is the file ``/dev/shm/shmwin.[<namespace>~]<name>``, opened with ``os.open``
exactly as glibc's ``shm_open`` does (``O_NOFOLLOW | O_CLOEXEC`` under ``/dev/shm``), so
that every flag and errno is ours to see. ``posix_ipc`` and ``multiprocessing.shared_memory``
are not used: the stdlib's resource tracker unlinks a segment when any attaching process
exits on 3.10-3.12 (CPython gh-82300). Rules, each learnt the hard way:

* attach never sizes: it reads ``fstat`` and checks it against the header -- a size passed on
  attach would *shrink* a live segment and the next touch past the end is SIGBUS;
* ``posix_fallocate`` the whole size at creation, so a full ``/dev/shm`` is an error now
  rather than a SIGBUS on some later write;
* create the file unnamed (``O_TMPFILE``), hand it to its owner (``fchown``, ``fchmod``),
  size it, initialise it, write the magic word *last*, and only then give it its name
  (``linkat``: fails if the name was taken meanwhile): a creator killed anywhere leaves
  nothing, and no one ever sees it half-built. Where the kernel has no ``O_TMPFILE``, the
  name is made first with ``O_EXCL`` and attachers wait (bounded) for the magic;
* never follow a link, never open a FIFO or a device in its place.

**Trust.** Whoever can write a segment can reset its counts, and can crash its users (a
robust mutex keeps pointers that the locking process follows). So a segment is one user's:
mode ``0o600`` by default, and :meth:`Segment.attach` refuses one owned by another uid
(root's excepted: root can write anybody's memory anyway) or writable by group or others,
unless the caller widens trust knowingly -- ``trust_uids=`` / :func:`on_behalf_of` for an
owner, ``perm=`` for the mode bits. Both refusals are :class:`UntrustedSegmentError`, a
``PermissionError``.

A window is one segment: ``/dev/shm/shmwin.[<namespace>~]<name>``.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import TypeVar

from ...errors import (
    ForeignFileError,
    OutOfSpaceError,
    SegmentNotReadyError,
    UntrustedSegmentError,
    WindowExistsError,
    WindowNotFoundError,
    WindowPermissionError,
)
from ..contract import MAX_NAME_CHARS as MAX_NAME_CHARS
from ..contract import NAME_SPELLING as _NAME
from ..contract import check_spelling
from ..contract import namespace as namespace

T = TypeVar("T")

PREFIX = "shmwin."
SHM_DIR = "/dev/shm"
DEFAULT_PERM = 0o600
_FILE_NAME_BYTES = 255  # NAME_MAX: a segment's whole file name, prefix and namespace included
_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # NONBLOCK: a FIFO never blocks us
_CREATE = _OPEN | os.O_CREAT | os.O_EXCL

# (uid, gid) that segments created in this context are given to, and whose segments are trusted
_acting_for: ContextVar[tuple[int | None, int | None]] = ContextVar("shmwin_acting_for", default=(None, None))


def check_name(name: str) -> str:
    """Validate a window name and return its shm object name (``/shmwin.[<namespace>~]<name>``)."""
    spelled = check_spelling(name)  # the name's errors first, then the namespace's
    entry = PREFIX + namespace() + spelled
    if len(entry.encode()) > _FILE_NAME_BYTES:  # a name within MAX_NAME_CHARS, a long namespace
        raise ValueError(
            f"window name {name!r} is too long in SHMWIN_NAMESPACE={namespace()[:-1]!r}: its segment "
            f"{entry[:40]}... would be {len(entry.encode())} bytes, and a file name holds {_FILE_NAME_BYTES}"
        )
    return "/" + entry


def path_of(name: str) -> str:
    """Where the segment of window ``name`` appears in the filesystem."""
    return SHM_DIR + check_name(name)


# names(): the last listing, kept while /dev/shm's modification time says nothing was created
# or removed since: (directory device, inode, mtime ns, namespace), when it was listed (wall
# ns), the names. A directory's mtime comes from a coarse clock (a jiffy, 1-10 ms), so a
# listing made less than SETTLED_NS after the last change is not kept: a change in the same
# tick would leave the mtime as it was.
_listed: tuple[tuple[int, int, int, str], int, tuple[str, ...]] | None = None
SETTLED_NS = 50_000_000


def names() -> list[str]:
    """Names of the shmwin windows on this host (in this namespace), sorted."""
    return list(listed_names())


def listed_names() -> tuple[str, ...]:
    """:func:`names`, as a tuple that stays the same object while /dev/shm does not change: one
    stat() instead of a listing per call (limits' ``get`` of a key of another shape looks in
    every segment of its storage at every call)."""
    global _listed
    try:
        st = os.stat(SHM_DIR)
    except FileNotFoundError:
        return ()
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, namespace())
    kept = _listed
    if kept is not None and kept[0] == key and kept[1] - st.st_mtime_ns >= SETTLED_NS:
        return kept[2]
    listed_ns = time.time_ns()
    found = tuple(sorted(_entries()))
    _listed = (key, listed_ns, found)
    return found


def _entries() -> Iterator[str]:
    """The window name of every entry of this namespace in ``/dev/shm`` (a name no window
    can have, e.g. with a ``#``, is not one of ours)."""
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return
    mine = PREFIX + namespace()
    for entry in entries:
        rest = entry[len(mine) :]
        if entry.startswith(mine) and rest and "~" not in rest and _NAME.fullmatch(rest):
            yield rest


@contextmanager
def on_behalf_of(uid: int | None, gid: int | None = None) -> Iterator[None]:
    """Within the block, segments this thread creates are owned by ``uid``:``gid`` and
    segments owned by ``uid`` are trusted on attach. For a root supervisor that prepares
    windows for workers running as another user (gunicorn's ``--user``/``--group``).
    Only root may give a file away; ``None`` keeps this process's id."""
    for what, value in (("uid", uid), ("gid", gid)):
        _check_id(what, value)
    token = _acting_for.set((uid, gid))
    try:
        yield
    finally:
        _acting_for.reset(token)


class Segment:
    """A mapped shared-memory segment. ``close()`` is this process; ``unlink()`` is everyone."""

    def __init__(self, name: str, mm: mmap.mmap, fd: int = -1, *, path: str | None = None, made: int = 0):
        self.name = name
        self.mm = mm
        self.fd = fd  # a descriptor of the segment until release_fd(): keyed windows grow through it
        # where it was opened (SHMWIN_NAMESPACE then): unlink() removes that one, whatever the
        # namespace is at the call
        self.path = path_of(name) if path is None else path
        self.made = made  # the inode this call created (0: attached): see remove_made()

    def release_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @property
    def size(self) -> int:
        return len(self.mm)

    @classmethod
    def create(
        cls,
        name: str,
        size: int,
        perm: int,
        init: Callable[[mmap.mmap], None],
        *,
        uid: int | None = None,
        gid: int | None = None,
        reserve: int | None = None,
    ) -> Segment:
        """Create exclusively with mode exactly ``perm`` (whatever the umask), owned by
        ``uid``:``gid`` if given (default: :func:`on_behalf_of`'s, else this process's),
        size it, reserve its first ``reserve`` bytes (all by default; the rest stays sparse
        until whoever grows into it reserves it), run ``init``; ``init`` writes the magic last."""
        _check_perm(perm)
        default_uid, default_gid = _acting_for.get()
        uid = default_uid if uid is None else uid
        gid = default_gid if gid is None else gid
        _check_id("uid", uid)
        _check_id("gid", gid)
        path = path_of(name)
        if _lstat(path) is not None:  # an open of an existing window makes nothing
            _refuse_foreign(path, name)
            raise WindowExistsError(f"window {name!r} already exists")
        unnamed = _open_unnamed(name)
        try:
            fd = os.open(path, _CREATE, DEFAULT_PERM) if unnamed is None else unnamed[0]
        except FileExistsError as exc:
            _refuse_foreign(path, name)
            raise WindowExistsError(f"window {name!r} already exists") from exc
        except PermissionError as exc:
            raise WindowPermissionError(f"cannot create window {name!r}: {exc.strerror}") from exc
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise _no_inode(name) from exc
            raise
        mm = None
        named = unnamed is None
        try:
            _give(fd, uid, gid, name)  # while empty: an attacher waits for the size, then the magic
            os.fchmod(fd, perm)
            os.ftruncate(fd, size)
            _reserve(fd, size if reserve is None else min(reserve, size), name)
            mm = mmap.mmap(fd, size)
            init(mm)
            made = os.fstat(fd).st_ino
            if unnamed is not None:
                _name_it(fd, unnamed[1], path, name)
                named = True
                mm = _mapped_by_name(mm, path, made)
            kept = os.dup(fd)
        except BaseException:
            if mm is not None:
                mm.close()
            if named:
                with suppress(FileNotFoundError):
                    os.unlink(path)
            raise
        finally:
            os.close(fd)
            if unnamed is not None:
                os.close(unnamed[1])
        return cls(name, mm, kept, path=path, made=made)

    @classmethod
    def attach(
        cls,
        name: str,
        ready_timeout_s: float,
        is_ready: Callable[[mmap.mmap], bool],
        *,
        perm: int = DEFAULT_PERM,
        trust_uids: Iterable[int] = (),
    ) -> Segment:
        """Map an existing segment once its creator has finished (bounded wait), if trusted:
        owned by this user, root, a uid in ``trust_uids`` or :func:`on_behalf_of`'s, and
        writable by group or others only as far as ``perm`` allows."""
        _check_perm(perm)
        trust = tuple(trust_uids)
        for uid in trust:
            _check_id("trust_uids item", uid)
        trusted = {os.geteuid(), 0, *trust}
        acting_uid = _acting_for.get()[0]
        if acting_uid is not None:
            trusted.add(acting_uid)
        path = path_of(name)
        deadline = time.monotonic() + ready_timeout_s
        fd = _open_existing(path, name, deadline)
        try:
            first = os.fstat(fd)
            if not stat.S_ISREG(first.st_mode):
                raise ForeignFileError(_not_a_segment(path, first.st_mode))
            if first.st_size:  # sized: its owner and mode are final, refuse before waiting
                _check_trust(first, name, trusted, perm)
            size = _wait(deadline, lambda: os.fstat(fd).st_size, name, "was never sized")
            mm = mmap.mmap(fd, size)
            try:
                _wait(deadline, lambda: is_ready(mm), name, "was never marked ready")
                _check_trust(os.fstat(fd), name, trusted, perm)  # given away before it was sized
                kept = os.dup(fd)  # keyed windows grow through it (see Segment.fd)
            except BaseException:
                mm.close()
                raise
        finally:
            os.close(fd)
        return cls(name, mm, kept, path=path)

    def close(self) -> None:
        self.release_fd()
        if not self.mm.closed:
            self.mm.close()

    def unlink(self) -> bool:
        """Remove the window from the host (everyone's: see :func:`unlink`), in the namespace it
        was opened in."""
        return _unlink_at(self.path, self.name)

    def remove_made(self) -> bool:
        """Remove the segment if this call created it and its name still holds it (not one made
        since by another process): for a constructor of several segments that failed after
        this one. Its decisions window, if any, is not this call's to remove."""
        if not self.made:
            return False
        with suppress(FileNotFoundError):
            if os.stat(self.path, follow_symlinks=False).st_ino == self.made:
                return _unlink_path(self.path, self.name)
        return False


def unlink(name: str) -> bool:
    """Remove window ``name`` from the host; True if it existed. Processes that have it
    mapped keep their memory. A limiter's decisions window (``NAME.decisions``, see
    :mod:`shmwin.front`) goes with it, and so do the passing segments of a live move whose mover
    died (``NAME.moving-PID-N``, see :mod:`.live`)."""
    return _unlink_at(path_of(name), name)


def unlink_dead_passing(path: str, name: str) -> None:
    """Remove the ``NAME.moving-PID-N`` segments beside ``path`` whose PID is gone: a live mover
    makes one under the name's lock and renames it over the name, so one left behind is a dead
    mover's."""
    stem = path[: len(path) - len(name)]  # the directory, the prefix and the namespace
    head, directory = f"{stem}{name[:150]}.moving-", os.path.dirname(path)  # live._passing_prefix
    with suppress(OSError):
        for entry in os.listdir(directory):
            full = f"{directory}/{entry}"
            pid, dash, n = full[len(head):].partition("-") if full.startswith(head) else ("", "", "")
            if pid.isdigit() and dash and n.isdigit() and not _alive(int(pid)):
                _unlink_path(full, full[len(stem):])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: alive
    return True


def _unlink_at(path: str, name: str) -> bool:
    """:func:`unlink` of the segment at ``path`` (window ``name``: for messages), and its
    decisions window beside it."""
    found = _unlink_path(path, name)
    decisions = name + ".decisions"
    if found and len(decisions) <= MAX_NAME_CHARS:
        _unlink_path(path + ".decisions", decisions)
    unlink_dead_passing(path, name)
    return found


def unlink_prefix(prefix: str) -> list[str]:
    """Remove every window named ``prefix`` or ``prefix.<anything>``, and return their
    names. The segments of a ``shm://myapp`` limits storage (Flask-Limiter, slowapi) are
    ``myapp.<strategy>.<limit>.<seconds>``: ``unlink_prefix("myapp")`` removes them all, and
    not those of ``myapp2``. For a server's shutdown hook."""
    check_name(prefix)
    mine = SHM_DIR + "/" + PREFIX + namespace()
    removed: set[str] = set()
    for window in list(_entries()):
        if (window == prefix or window.startswith(prefix + ".")) and _unlink_path(mine + window, window):
            removed.add(window)
    return sorted(removed)


# -- helpers ------------------------------------------------------------------------------------



def _check_perm(perm: int) -> None:
    if not isinstance(perm, int) or isinstance(perm, bool) or perm & ~0o777 or perm & 0o600 != 0o600:
        raise ValueError(f"perm must be a mode within 0o777 that lets the owner read and write, not {perm!r}")


def _check_id(what: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"{what} must be None or an int >= 0, not {value!r}")


def _open_existing(path: str, name: str, deadline: float) -> int:
    """An fd on the segment. EACCES on an empty file is a creator still handing it to its
    owner (``on_behalf_of``): wait for that as for the size, within the same deadline."""
    delay = 0.0005
    while True:
        try:
            return os.open(path, _OPEN)
        except FileNotFoundError as exc:
            raise WindowNotFoundError(f"no window named {name!r} on this host") from exc
        except PermissionError as exc:
            st = _lstat(path)
            if st is not None and st.st_size == 0 and time.monotonic() < deadline:
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
                continue
            raise WindowPermissionError(
                f"cannot open window {name!r}: {exc.strerror} ({_owned_by(st)}, mode "
                f"{oct(stat.S_IMODE(st.st_mode)) if st else '?'}); run as its owner, or have it "
                "created for this user (on_behalf_of in a root supervisor, or perm=)"
            ) from exc
        except OSError:
            _refuse_foreign(path, name)
            raise


def _check_trust(st: os.stat_result, name: str, trusted: set[int], perm: int) -> None:
    if st.st_uid not in trusted:
        raise UntrustedSegmentError(
            f"window {name!r} is {_owned_by(st)}, not by this user (uid {os.geteuid()}): whoever "
            "owns it can reset or crash its users, and another user may have created it to take "
            f"this one over. Remove it (shmwin rm {name}), or trust that user explicitly "
            f"(trust_uids=[{st.st_uid}], or shmwin.backends.shm.segment.on_behalf_of({st.st_uid}))"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022 & ~perm:
        raise UntrustedSegmentError(
            f"window {name!r} has mode {oct(mode)}: {'group' if mode & 0o020 else 'others'} may "
            "write it, and whoever can write it can reset or crash its users. Pass "
            f"perm={oct(mode | DEFAULT_PERM)} to accept that knowingly, or chmod it"
        )


def _refuse_foreign(path: str, name: str) -> None:
    """Raise ForeignFileError if something other than a regular file sits at ``path``."""
    st = _lstat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ForeignFileError(_not_a_segment(path, st.st_mode))


def _not_a_segment(path: str, mode: int) -> str:
    kinds = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO",
             stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}  # fmt: skip
    kind = kinds.get(stat.S_IFMT(mode), "not a regular file")
    return (
        f"{path} is {kind}, not a shared-memory segment: shmwin never follows links or opens "
        "special files there (someone may be trying to redirect this window). Remove it"
    )


def _owned_by(st: os.stat_result | None) -> str:
    return "owned by uid ?" if st is None else f"owned by uid {st.st_uid}"


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path, follow_symlinks=False)
    except OSError:
        return None


def _give(fd: int, uid: int | None, gid: int | None, name: str) -> None:
    if uid is None and gid is None:
        return
    try:
        os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
    except PermissionError as exc:
        raise WindowPermissionError(
            f"cannot create window {name!r} for uid {uid}, gid {gid}: {exc.strerror} "
            "(only root may give a file to another user)"
        ) from exc


def _unlink_path(path: str, name: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    except PermissionError as exc:
        raise WindowPermissionError(f"cannot remove window {name!r}: {exc.strerror}") from exc
    except IsADirectoryError as exc:
        raise ForeignFileError(_not_a_segment(path, stat.S_IFDIR)) from exc
    if ".fixed." in name:  # a limits storage's fixed-window segment: its readers list again
        _forget_board(name)
    return True


def board_path(prefix: str) -> str:
    """The board of limits storage ``prefix`` (boards.py): a ``#`` no window name has."""
    return f"{SHM_DIR}/{PREFIX}{namespace()}{prefix}#segments"


def _forget_board(segment_name: str) -> None:
    """One of a limits storage's fixed-window segments was removed: the board goes, then a new
    value in it (boards.py). In that order: a reader that reads the new value finds the board
    gone when it checks its path, and one that opened it before sees the value move."""
    prefix = segment_name.rpartition(".fixed.")[0]
    try:
        fd = os.open(board_path(prefix), _OPEN)
    except OSError:  # none (or not ours to write): nobody reads it
        return
    try:
        if os.stat(board_path(prefix), follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
            os.unlink(board_path(prefix))  # not a board made since by a lister (boards.py)
        os.pwrite(fd, os.urandom(8), 0)
    except OSError:
        pass
    finally:
        os.close(fd)


def _no_inode(name: str) -> OutOfSpaceError:
    free = os.statvfs(SHM_DIR)
    return OutOfSpaceError(
        errno.ENOSPC,
        f"no room in {SHM_DIR} for window {name!r}: no free inode (all {free.f_files} in use). "
        "Remove unused windows (shmwin gc; a removed window's inode is freed once no process "
        "maps it) or give /dev/shm more inodes (nr_inodes=)",
    )


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


def _open_unnamed(name: str) -> tuple[int, int] | None:
    """A new file in /dev/shm with no name yet (``O_TMPFILE``) and a descriptor of this
    process's ``/proc/self/fd`` to name it through, or None where the kernel, the filesystem or
    a missing /proc gives none (then the name is made first, as before). A creator names its
    segment only once it is whole (:func:`_name_it`), so a creator killed anywhere leaves
    nothing behind -- not a half-built segment that every later open would wait on, then refuse
    (SegmentNotReadyError until someone ran ``shmwin rm``)."""
    try:
        fds = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.open(SHM_DIR, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, DEFAULT_PERM), fds
    except (AttributeError, OSError) as exc:
        os.close(fds)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise _no_inode(name) from exc
        return None


def _name_it(fd: int, fds: int, path: str, name: str) -> None:
    """Give the unnamed file ``fd`` its name ``path``, atomically: linkat through
    ``/proc/self/fd`` (``fds``; os.link follows that link only given a directory descriptor:
    plain link() would link the symlink itself). A name taken meanwhile is
    :class:`WindowExistsError`, as for an ``O_EXCL`` create."""
    try:
        os.link(str(fd), path, src_dir_fd=fds, follow_symlinks=True)
    except FileExistsError as exc:
        _refuse_foreign(path, name)
        raise WindowExistsError(f"window {name!r} already exists") from exc
    except PermissionError as exc:
        raise WindowPermissionError(f"cannot create window {name!r}: {exc.strerror}") from exc


def _mapped_by_name(mm: mmap.mmap, path: str, ino: int) -> mmap.mmap:
    """``mm`` mapped again through the segment's name: a mapping made before the name shows in
    /proc/PID/maps as ``/dev/shm/#INO (deleted)`` for life, and ``shmwin rm`` finds the
    processes that still hold a segment by its path there. ``mm`` itself if the name no longer
    holds inode ``ino`` (removed and made again already: this process keeps its own)."""
    try:
        fd = os.open(path, _OPEN)
    except OSError:
        return mm
    try:
        if os.fstat(fd).st_ino != ino:
            return mm
        again = mmap.mmap(fd, len(mm))
    finally:
        os.close(fd)
    try:
        mm.close()
    except BufferError:  # the initialiser kept a view of it: keep that mapping, not the new one
        again.close()
        return mm
    return again


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
