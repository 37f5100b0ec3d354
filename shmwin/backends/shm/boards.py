"""A limits storage's board: one 8-byte word in ``/dev/shm/shmwin.[<namespace>~]<prefix>#segments``
that changes whenever a process creates one of the storage's fixed-window segments.

limits' ``get`` of a key its strategies did not build ("user:42") sums every fixed-window
segment of the storage, and must see one another process created a moment ago. Listing
``/dev/shm``, or even one stat() of it, costs several times ``memory://``'s whole ``get``
(about 1 us for a stat on a VM). A process keeps the board mapped instead and reads its word
(a memory load): while it holds the value read before the storage's last listing, no segment
was created since, and the segments found then are still all there are.

Writers: a process that creates a fixed-window segment writes a fresh random value after the
segment exists (so a reader that read the word before listing either listed the segment or
sees a new value). Removing one of the storage's fixed-window segments removes the board,
then writes a new value into it (segment._forget_board, at every unlink): a reader holding it
sees the value move and lists again. A lister reads the value, then checks that its mapping
is still the file at the path (:meth:`Board.is_current`): one that read the remover's value
finds the board gone, and makes a new one (the next lister makes the board again: the fast
path comes back at once). A board removed by hand (no value written) is noticed within a
second: FixedSum.get lists again once a second (fixedsum.c RECHECK_NS). The page is
allocated before it is mapped (posix_fallocate): a full /dev/shm is no board (every get
lists), never a SIGBUS. The name has a ``#``: no window's name, so ``shmwin.names()`` and the
tools never list it.
"""

from __future__ import annotations

import mmap
import os
import random
from collections.abc import Callable, Iterable, Sequence

from ..._core import FixedSum, StorageGet
from ...errors import ShmwinError
from .roles.fixed import FixedEngine
from .segment import board_path

# StorageGet: ShmStorage.get
__all__ = ["Board", "ForeignSum", "StorageGet", "path_of", "shared_hash_key", "touch"]

_WORD_BYTES = 8
_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_FIXED = ".fixed."


path_of = board_path


class Board:
    """A storage's board, mapped: :meth:`value` is a load, :meth:`touch` a store."""

    def __init__(self, mapped: mmap.mmap, path: str, inode: int):
        self._mapped = mapped
        self._word = memoryview(mapped).cast("q")
        self.path, self.inode = path, inode

    @classmethod
    def open(cls, prefix: str, *, create: bool) -> Board | None:
        """The board of ``prefix`` (made if ``create``); None if there is none or it cannot be
        opened (another user's, /dev/shm full): callers then list /dev/shm as before."""
        path = path_of(prefix)
        try:
            fd = os.open(path, _FLAGS | (os.O_CREAT if create else 0), 0o600)
        except OSError:
            return None
        try:
            # the page itself, before mapping: a store into a page tmpfs cannot find (/dev/shm
            # full) is a SIGBUS; posix_fallocate says ENOSPC instead (and sizes a new file: zeros,
            # a value like any other). A no-op on a board already made.
            os.posix_fallocate(fd, 0, _WORD_BYTES)
            return cls(mmap.mmap(fd, _WORD_BYTES), path, os.fstat(fd).st_ino)
        except OSError:
            return None
        finally:
            os.close(fd)

    def value(self) -> int:
        return self._word[0]

    def is_current(self) -> bool:
        """Whether this mapping is still the board at its path (not removed since, by a remover
        of a segment or by hand): one stat()."""
        try:
            return os.stat(self.path, follow_symlinks=False).st_ino == self.inode
        except OSError:
            return False

    @property
    def mapped(self) -> mmap.mmap:
        """The word's mapping (FixedSum reads the word from it: one load in C)."""
        return self._mapped

    def touch(self) -> None:
        """A value no reader holds (random 63 bits: one aligned 8-byte store, never torn)."""
        self._word[0] = random.getrandbits(63)


def touch(prefix: str) -> None:
    """A fixed-window segment of ``prefix`` was just created (called after it exists)."""
    board = Board.open(prefix, create=True)
    if board is not None:
        board.touch()


def shared_hash_key(windows: Callable[[], Iterable[tuple[str, bytes]]]) -> bytes | None:
    """The SipHash key a storage's new fixed-window segment is made with, from its fixed windows'
    (name, hash key) listed: the one of least name (None: none yet, a random key). Its readers
    then hash a key once a call, not once a segment (FixedSum groups its cores by key). Every
    creator picks the same, whichever process it is; two first creators at once may pick two
    (each hashed once), and a segment made by an older shmwin keeps its own. The key stays
    where it was, in the segments' headers (mode 0600). A segment that cannot be read leaves
    the new one a key of its own: a cost only, never an error of the incr that creates it."""
    try:
        return min(windows(), default=(None, None))[1]
    except (ShmwinError, OSError):
        return None


class ForeignSum:
    """limits' ``get`` of a key its strategies did not build, summed over a storage's fixed
    windows in one native call (core/fixedsum.c). :attr:`get` is the native method itself:
    ``get(key)`` -> the key's count in hits, or None when the board no longer holds the value
    :meth:`found` was given (or the key has a "/": maybe limits' own), and the storage lists
    again, then calls :meth:`found` and :attr:`sum`."""

    def __init__(self) -> None:
        self._native = FixedSum()
        self.native = self._native  # ShmStorage.get's (core/fixedsum.c StorageGet)
        self.get: Callable[[str | bytes], int | float | None] = self._native.get
        self.sum: Callable[[str], int | float] = self._native.sum
        self.holds: Callable[[], bool] = self._native.holds  # the last listing still holds
        self.forget()

    def found(
        self,
        board: Board | None,
        seen: int | None,
        engines: Sequence[FixedEngine],
        clock: Callable[[], int] | None,
    ) -> None:
        """What a listing found: the board (None: none, every get looks again), its value read
        before the listing, the fixed windows' engines, and the clock (None: limits' wall
        clock, ``time.time()`` looked up at each call, as the storage reads it)."""
        mapped, value = (None, 0) if board is None or seen is None else (board.mapped, seen)
        self._native.set(mapped, value, tuple(e._core for e in engines), clock)

    def forget(self) -> None:
        """No board, no segment: every get looks again (a closed storage's cores let go)."""
        self._native.set(None, 0, (), None)
