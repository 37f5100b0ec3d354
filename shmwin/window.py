"""Window: a named sliding time-window counter shared by every process on the host.

Data flow of one ``add()``: ask the clock for now, ask ``ring`` for the epoch and
slot, then write the slot of *this thread's* row (striped mode, no lock) or of
the shared row 0 under its robust mutex (locked mode, and the fallback when
every stripe is taken). Reads sum every row in numpy, skipping stale slots.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import numpy as np
import numpy.typing as npt

from . import layout, owners, ring
from .clock import Clock
from .duration import NS_PER_S, Duration, to_ns
from .errors import (
    GeometryMismatchError,
    ShmwinError,
    UnknownFieldError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
)
from .layout import Geometry, Layout, Meta
from .locks import LockTable, init_locks, trylock, unlock
from .segment import Segment
from .segment import unlink as _unlink_name

Number = int | float

_W = layout.WORD_BYTES
_ENTRY_WORDS = layout.STRIPE_ENTRY_BYTES // _W
_CLAIM_RETRY_NS = NS_PER_S  # how often a stripe-less thread looks for a free stripe again


class _ClosedTLS:
    """Stands in for the per-thread state after close(): the hot path then raises."""

    @property
    def base(self) -> int:
        raise WindowClosedError("window is closed")


class Window:
    """A sliding window of ``buckets`` time buckets over ``span``, in shared memory.

    ``Window(name, ...)`` creates the window or attaches to it if it exists with
    the same geometry; ``Window.create`` insists on creating, ``Window.attach``
    reads the geometry from the segment. ``close()`` detaches this process;
    ``unlink()`` removes the window for everyone. Both are idempotent.
    """

    def __init__(
        self,
        name: str,
        span: Duration = 60,
        buckets: int = 60,
        fields: tuple[str, ...] | list[str] = ("count",),
        *,
        dtype: str = "int64",
        mode: str = "striped",
        stripes: int = 64,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
    ):
        want = _geometry(span, buckets, fields, dtype, mode, stripes)
        for _ in range(10):  # create, or attach; a racing unlink sends us round again
            try:
                seg = Segment.create(name, Layout.plan(want).total_bytes, perm, _initialiser(want))
                self._bind(seg, clock, lock_timeout)
                return
            except WindowExistsError:
                pass
            try:
                seg = Segment.attach(name, ready_timeout, _ready)
            except WindowNotFoundError:
                continue
            self._bind(seg, clock, lock_timeout)
            if self._g != want:
                have = self._g
                self.close()
                raise GeometryMismatchError(
                    f"window {name!r} exists with geometry [{have}], not the requested [{want}]"
                )
            return
        raise ShmwinError(f"window {name!r} kept appearing and disappearing; gave up")

    @classmethod
    def create(
        cls,
        name: str,
        span: Duration = 60,
        buckets: int = 60,
        fields: tuple[str, ...] | list[str] = ("count",),
        *,
        dtype: str = "int64",
        mode: str = "striped",
        stripes: int = 64,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
    ) -> Window:
        """Create a new window; :class:`WindowExistsError` if the name is taken."""
        want = _geometry(span, buckets, fields, dtype, mode, stripes)
        seg = Segment.create(name, Layout.plan(want).total_bytes, perm, _initialiser(want))
        self = cls.__new__(cls)
        self._bind(seg, clock, lock_timeout)
        return self

    @classmethod
    def attach(
        cls,
        name: str,
        *,
        clock: Clock | None = None,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
    ) -> Window:
        """Attach to an existing window, geometry read from the segment."""
        seg = Segment.attach(name, ready_timeout, _ready)
        self = cls.__new__(cls)
        self._bind(seg, clock, lock_timeout)
        return self

    # -- setup ------------------------------------------------------------------

    def _bind(self, seg: Segment, clock: Clock | None, lock_timeout: float) -> None:
        """Validate the mapped segment and build this process's views of it."""
        self._seg = seg
        self._closed = True  # until fully bound, close() must not touch views
        try:
            g, lay, meta = layout.unpack_header(seg.mm[: layout.HEADER_BYTES], seg.size)
            self._locks = LockTable(seg.mm, lay.locks_off, g.n_locks, layout.LOCK_BYTES, lock_timeout)
        except BaseException:
            seg.close()
            raise
        self._g, self._lay, self.meta = g, lay, meta
        self.name = seg.name
        self._clock: Callable[[], int] = clock or time.monotonic_ns
        self._bucket_ns = g.bucket_ns
        self._n_buckets = g.n_buckets
        self._slot_words = lay.slot_words
        self._field_word = {f: i + 1 for i, f in enumerate(g.fields)}
        self._first_field = g.fields[0]
        self._q = memoryview(seg.mm).cast("q")
        self._v: Any = self._q if g.dtype == "int64" else memoryview(seg.mm).cast("d")
        self._zeros = memoryview(bytearray(_W * len(g.fields))).cast("q")
        self._shared_base = lay.rows_off // _W
        self._epochs, self._values = _numpy_views(seg.mm, g, lay)
        self._striped = g.mode == "striped"
        self._row_lock = self._locks.handles[layout.LOCK_SHARED_ROW]
        if not self._striped:
            self.add = self._add_locked  # type: ignore[method-assign]  # skips the stripe lookup
        self._reset_process_state()
        self._closed = False
        _live_windows.add(self)

    def _reset_process_state(self) -> None:
        """Per-process state: none of it survives a fork (the child claims its own rows)."""
        self._tls = threading.local()
        self._my_rows: list[tuple[int, int]] = []  # (row, owner tid)
        self._rows_lock = threading.Lock()

    # -- properties ---------------------------------------------------------------

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def fields(self) -> tuple[str, ...]:
        return self._g.fields

    @property
    def span(self) -> float:
        """Span in seconds."""
        return self._g.span_ns / NS_PER_S

    @property
    def span_ns(self) -> int:
        return self._g.span_ns

    @property
    def bucket_ns(self) -> int:
        return self._g.bucket_ns

    @property
    def buckets(self) -> int:
        return self._g.n_buckets

    @property
    def dtype(self) -> str:
        return self._g.dtype

    @property
    def mode(self) -> str:
        return self._g.mode

    @property
    def stripes(self) -> int:
        return self._g.n_stripes

    @property
    def nbytes(self) -> int:
        """Size of the shared segment in bytes."""
        return self._lay.total_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writing ------------------------------------------------------------------

    def add(self, n: Number = 1, field: str | None = None) -> None:
        """Add ``n`` to ``field`` (the first field by default) in the current bucket.

        Exact: once this returns, every reader in every process sees the count.
        """
        f = 1 if field is None else self._word_of(field)
        try:
            base = self._tls.base
        except AttributeError:
            base = self._bind_thread()
        if base < 0:
            self._add_shared(n, f)
            return
        # lock-free: only this thread writes the row starting at `base`
        epoch = self._clock() // self._bucket_ns
        slot = base + epoch % self._n_buckets * self._slot_words
        if self._q[slot] != epoch:
            self._roll(slot, epoch)
        try:
            self._v[slot + f] += n
        except (TypeError, ValueError) as exc:
            raise self._bad_amount(n) from exc

    def _add_locked(self, n: Number = 1, field: str | None = None) -> None:
        """``add()`` of a locked window (bound as ``self.add`` when the mode is locked)."""
        f = 1 if field is None else self._word_of(field)
        handle = self._row_lock
        rc = trylock(handle)
        if rc:
            self._locks.acquire_contended(layout.LOCK_SHARED_ROW, rc)
        try:
            epoch = self._clock() // self._bucket_ns  # read under the lock: epochs never go back
            slot = self._shared_base + epoch % self._n_buckets * self._slot_words
            if self._q[slot] != epoch:
                self._roll(slot, epoch)
            try:
                self._v[slot + f] += n
            except (TypeError, ValueError) as exc:
                raise self._bad_amount(n) from exc
        finally:
            unlock(handle)

    def _add_shared(self, n: Number, f: int) -> None:
        """Striped mode with every stripe taken: add into row 0 under its lock,
        looking for a free stripe again once a second."""
        field = self._g.fields[f - 1]
        if time.monotonic_ns() >= self._tls.retry_ns:
            self._tls.retry_ns = time.monotonic_ns() + _CLAIM_RETRY_NS
            if self._bind_thread() >= 0:
                self.add(n, field)
                return
        self._add_locked(n, field)

    def _roll(self, slot: int, epoch: int) -> None:
        """Recycle a stale slot for bucket ``epoch``: zero first, stamp last, so a
        concurrent reader that sees the new epoch never sees the old values.
        Caller is the row's only writer (its owner thread, or the row-0 lock holder)."""
        self._q[slot + 1 : slot + self._slot_words] = self._zeros
        self._q[slot] = epoch

    def _bad_amount(self, n: object) -> Exception:
        if self._g.dtype == "int64":
            if isinstance(n, int):
                return OverflowError(f"{n} does not fit in an int64 window value")
            return TypeError(f"add() takes an int for an int64 window, not {n!r}")
        return TypeError(f"add() takes a number, not {n!r}")

    def _word_of(self, field: str) -> int:
        word = self._field_word.get(field)
        if word is None:
            self._check_open()
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return word

    # -- stripes ------------------------------------------------------------------

    def _bind_thread(self) -> int:
        """Give the calling thread its row: the word index of its stripe, or -1 for row 0."""
        self._check_open()
        tls = self._tls
        tls.retry_ns = time.monotonic_ns() + _CLAIM_RETRY_NS
        row = self._claim_row() if self._striped else None
        tls.base = -1 if row is None else (self._lay.rows_off + row * self._lay.row_bytes) // _W
        return int(tls.base)

    def _claim_row(self) -> int | None:
        """Take a free stripe, or adopt one whose owner died (its counts are kept)."""
        tid, started, pid = owners.current_thread()
        q = self._q
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row in range(1, self._lay.n_rows):
                e = self._entry_word(row)
                if q[e] and owners.tid_alive(q[e], q[e + 1]):
                    continue
                q[e + 1], q[e + 2], q[e + 3] = started, pid, time.monotonic_ns()
                q[e] = tid
                in_use = layout.ROWS_IN_USE_OFF // _W
                q[in_use] = max(q[in_use], row + 1)
                with self._rows_lock:
                    self._my_rows.append((row, tid))
                return row
            return None
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)

    def _entry_word(self, row: int) -> int:
        return (self._lay.stripes_off + row * layout.STRIPE_ENTRY_BYTES) // _W

    def _release_rows(self) -> None:
        """Hand this process's stripes back (data kept: it is still inside the window)."""
        with self._rows_lock:
            mine, self._my_rows = self._my_rows, []
        if not mine:
            return
        q = self._q
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row, tid in mine:
                if q[self._entry_word(row)] == tid:
                    q[self._entry_word(row)] = 0
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)

    def reclaim(self) -> int:
        """Free the stripes of threads that have died; returns how many.

        Not needed for correctness -- a claimer adopts dead stripes by itself --
        but lets a supervisor (gunicorn's ``child_exit``) tidy up at once.
        """
        self._check_open()
        q, freed = self._q, 0
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row in range(1, self._lay.n_rows):
                e = self._entry_word(row)
                if q[e] and not owners.tid_alive(q[e], q[e + 1]):
                    q[e] = 0
                    freed += 1
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)
        return freed

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed stripe (for inspection)."""
        self._check_open()
        q, out = self._q, []
        for row in range(1, self._lay.n_rows):
            e = self._entry_word(row)
            if q[e]:
                out.append((row, int(q[e + 2]), owners.tid_alive(q[e], q[e + 1])))
        return out

    # -- reading --------------------------------------------------------------------

    def total(self, field: str | None = None, last: Duration | None = None) -> Number:
        """Sum of ``field`` over the last ``last`` (default: the whole span)."""
        f = 1 if field is None else self._word_of(field)
        per_slot, _, _ = self._per_slot(last, f - 1)
        return _scalar(per_slot.sum(), self._g.dtype)

    def totals(self, last: Duration | None = None) -> dict[str, Number]:
        """``{field: sum}`` over the last ``last`` (default: the whole span)."""
        per_slot, _, _ = self._per_slot(last, None)
        sums = per_slot.sum(axis=0)
        return {f: _scalar(sums[i], self._g.dtype) for i, f in enumerate(self._g.fields)}

    def rate(self, field: str | None = None, last: Duration = 1) -> float:
        """Events per second of ``field`` over the covered interval.

        The interval runs from the start of the oldest bucket counted to now, so
        a partly filled current bucket is neither ignored nor over-weighted.
        """
        f = 1 if field is None else self._word_of(field)
        per_slot, now_ns, k = self._per_slot(last, f - 1)
        covered_ns = now_ns - (now_ns // self._bucket_ns - k + 1) * self._bucket_ns
        return float(per_slot.sum()) * NS_PER_S / max(covered_ns, 1)

    def series(self, field: str | None = None, last: Duration | None = None) -> npt.NDArray[Any]:
        """One value per bucket, oldest first, the current bucket last; stale buckets 0."""
        f = 1 if field is None else self._word_of(field)
        per_slot, now_ns, k = self._per_slot(last, f - 1)
        return per_slot[ring.slots_oldest_first(now_ns // self._bucket_ns, self._n_buckets, k)]

    def _per_slot(self, last: Duration | None, value_index: int | None) -> tuple[npt.NDArray[Any], int, int]:
        """Live values per ring slot, summed over rows; lock-free.

        Liveness is tested before and after the values are read: a slot that
        changed meanwhile was being recycled by its writer and counts as expired.
        """
        self._check_open()
        k = self._n_buckets if last is None else self._buckets_for(last)
        now_ns = self._clock()
        expected = ring.expected_epochs(now_ns // self._bucket_ns, self._n_buckets, k)
        rows = self._rows_in_use()
        epochs = self._epochs[:rows]
        widen: tuple[slice | None, ...]
        if value_index is None:
            values, widen = self._values[:rows], (slice(None), slice(None), None)
        else:
            values, widen = self._values[:rows, :, value_index], (slice(None), slice(None))
        live = epochs == expected
        picked = np.where(live[widen], values, 0)
        still = epochs == expected
        if not np.array_equal(live, still):
            picked = np.where((live & still)[widen], picked, 0)
        return picked.sum(axis=0), now_ns, k

    def _buckets_for(self, last: Duration) -> int:
        return ring.buckets_for(to_ns(last, "last"), self._bucket_ns, self._n_buckets)

    def _rows_in_use(self) -> int:
        """Rows readers must sum: row 0 plus every stripe ever claimed (clamped)."""
        return max(1, min(int(self._q[layout.ROWS_IN_USE_OFF // _W]), self._lay.n_rows))

    # -- lifecycle --------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the window for everyone. Adds racing with reset() may be dropped."""
        self._check_open()
        locks = self._locks
        locks.acquire(layout.LOCK_STRIPE_TABLE)
        locks.acquire(layout.LOCK_SHARED_ROW)
        try:
            self._epochs[:] = ring.EMPTY_EPOCH  # unstamp first: readers skip the slots at once
            self._values[:] = 0
        finally:
            locks.release(layout.LOCK_SHARED_ROW)
            locks.release(layout.LOCK_STRIPE_TABLE)

    def close(self) -> None:
        """Detach this process. The window lives on for everyone else."""
        if self._closed:
            return
        try:
            self._release_rows()
        finally:
            self._closed = True
            self._tls = _ClosedTLS()  # type: ignore[assignment]
            self.__dict__.pop("add", None)  # back to Window.add, which now raises
            _live_windows.discard(self)
            del self._epochs, self._values
            self._q.release()
            self._v.release()
            with suppress(BufferError):  # a view is still exported somewhere: GC unmaps it
                self._seg.close()

    def unlink(self) -> bool:
        """Remove the window from the host (idempotent). Attached processes keep
        their mapping until they close; new attaches fail."""
        return _unlink_name(self.name)

    def _check_open(self) -> None:
        if self._closed:
            raise WindowClosedError(f"window {self.name!r} is closed")

    def __enter__(self) -> Window:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with suppress(Exception):
            self.close()

    def __repr__(self) -> str:
        state = "closed" if getattr(self, "_closed", True) else str(self._g)
        return f"<shmwin.Window {getattr(self, 'name', '?')!r} {state}>"


# -- helpers ----------------------------------------------------------------------------


def _geometry(
    span: Duration, buckets: int, fields: tuple[str, ...] | list[str], dtype: str, mode: str, stripes: int
) -> Geometry:
    """The geometry a constructor asks for, validated."""
    span_ns = to_ns(span, "span")
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"buckets must be a positive int, not {buckets!r}")
    if span_ns % buckets:
        raise ValueError(
            f"buckets={buckets} does not divide span={span!r} ({span_ns} ns) into whole "
            "nanosecond-wide buckets"
        )
    if isinstance(fields, str):
        fields = (fields,)
    return Geometry(
        span_ns // buckets, buckets, tuple(fields), dtype, mode, stripes if mode == "striped" else 0
    )


def _initialiser(g: Geometry) -> Callable[[mmap.mmap], None]:
    """Fill a new segment: header, locks, empty epochs -- and the magic word last."""

    def init(mm: mmap.mmap) -> None:
        lay = Layout.plan(g)
        meta = Meta(os.getpid(), time.time_ns(), time.monotonic_ns(), _boot_id())
        mm[: layout.HEADER_BYTES] = layout.pack_header(g, lay, meta)
        mm[layout.ROWS_IN_USE_OFF : layout.ROWS_IN_USE_OFF + _W] = (1).to_bytes(_W, "little")
        init_locks(mm, lay.locks_off, g.n_locks, layout.LOCK_BYTES)
        epochs, values = _numpy_views(mm, g, lay)
        epochs[:] = ring.EMPTY_EPOCH
        del epochs, values
        mm[0:_W] = layout.MAGIC

    return init


def _ready(mm: mmap.mmap) -> bool:
    """Is the magic word written? (Junk there is caught by header validation.)"""
    return len(mm) < _W or mm[0:_W] != b"\0" * _W


def _numpy_views(mm: mmap.mmap, g: Geometry, lay: Layout) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Strided views: epochs (rows, buckets) and values (rows, buckets, fields)."""
    slot_bytes = lay.slot_words * _W
    epochs = np.ndarray((lay.n_rows, g.n_buckets), np.int64, mm, lay.rows_off, (lay.row_bytes, slot_bytes))
    values = np.ndarray(
        (lay.n_rows, g.n_buckets, len(g.fields)),
        np.dtype(g.dtype),
        mm,
        lay.rows_off + _W,
        (lay.row_bytes, slot_bytes, _W),
    )
    return epochs, values


def _scalar(x: Any, dtype: str) -> Number:
    return int(x) if dtype == "int64" else float(x)


def _boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return b"\0" * 16


_live_windows: weakref.WeakSet[Window] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for w in list(_live_windows):
        w._reset_process_state()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["Window"]
