"""Every error shmwin raises.

Each one derives from :class:`ShmwinError` *and* from the builtin a caller would
naturally catch, so ``except FileNotFoundError`` works as well as
``except shmwin.ShmwinError``.
"""

from __future__ import annotations


class ShmwinError(Exception):
    """Base class of every shmwin error."""


class WindowNotFoundError(ShmwinError, FileNotFoundError):
    """No window of that name exists on this host."""


class WindowExistsError(ShmwinError, FileExistsError):
    """A window of that name exists already (exclusive create)."""


class GeometryMismatchError(ShmwinError, ValueError):
    """The window exists with a geometry other than the one asked for."""


class WindowMovedError(ShmwinError):
    """The segment was replaced under its name (a limiter's rates changed periods): open it
    again. A limiter's own methods do so themselves; this reaches only other callers."""


class SegmentError(ShmwinError):
    """A shared-memory segment that cannot be used as a window."""


class CorruptSegmentError(SegmentError):
    """The segment's bytes are not a valid shmwin window (junk, truncated, overwritten)."""


class IncompatibleVersionError(SegmentError):
    """The segment was written by a shmwin with another binary format version."""


class SegmentNotReadyError(SegmentError, TimeoutError):
    """The segment exists but its creator never finished initialising it."""


class ForeignFileError(SegmentError):
    """A symlink, directory, FIFO or device sits at the segment's path: never followed or opened."""


class OutOfSpaceError(ShmwinError, OSError):
    """``/dev/shm`` has no room: for a new segment, or for the rows or the larger index a
    growing key table reserves (``posix_fallocate``) for a new key. Nothing is written then,
    and known keys go on counting: never a SIGBUS later."""


class TotalOverflowError(ShmwinError, OverflowError):
    """An int64 window's sum (over stripes, keys or buckets) is past int64: shmwin raises
    rather than return a wrapped or saturated number. Readers and tools report it per window."""


class WindowPermissionError(ShmwinError, PermissionError):
    """The segment exists but this process may not open it."""


class UntrustedSegmentError(WindowPermissionError):
    """The segment is owned by another user, or group/others may write it, and the caller
    did not widen trust to that (``trust_uids=``, ``on_behalf_of``, ``perm=``)."""


class UnknownFieldError(ShmwinError, KeyError):
    """The field name is not one of the window's fields."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class LockTimeoutError(ShmwinError, TimeoutError):
    """A segment lock stayed held by a live process for longer than ``lock_timeout``."""


class WindowClosedError(ShmwinError, ValueError):
    """The window was closed in this process."""


class KeyTableFullError(ShmwinError):
    """A keyed segment has no free entry for a new key: every entry it may use holds a live key."""


class BackendUnavailableError(ShmwinError, ConnectionError):
    """A remote backend (Redis) did not answer in time; the client reconnects when it returns."""


class NotSupportedError(ShmwinError, NotImplementedError):
    """This backend cannot do what was asked: an operation or an argument only another backend has."""


class ConcurrencyLimitError(ShmwinError, TimeoutError):
    """``Concurrency.hold()`` found no free slot of its key within its timeout."""


class NotHeldError(ShmwinError, ValueError, RuntimeError):
    """``Concurrency.release()`` of a key this process (this handle) holds no slot of."""


class SeriesTableFullError(KeyTableFullError):
    """A metrics segment (role "series") has no room for a new series, or every process slot is
    held by a live process: its capacity is fixed at creation (``shp.multiprocess(max_series=)``)."""


class SeriesIdentityError(ShmwinError, ValueError):
    """A metric's series cannot be stored: its identity (name, labels, help) is over the limit a
    directory entry holds, or is not text."""


class MetricMismatchError(ShmwinError, ValueError):
    """A metric name already used in the app's metrics segment with another type, gauge mode or
    label names: one name, one meaning, in every process."""
