"""Window: a named sliding time-window counter shared by every process on the host.

Data flow of one ``add()``: it is one call into the native core (``_core.c``), which
reads the clock, finds the epoch and slot, and writes the slot of *this process's*
stripe (striped mode, no lock), of the shared row 0 under its robust mutex (locked
mode, and the fallback when every stripe is taken), or of the key's row under the
key's lock (keyed windows). Reads sum rows in numpy, skipping stale slots, and never
take a lock.
"""

from __future__ import annotations

import mmap
import os
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any

import numpy as np
import numpy.typing as npt

from . import backends, layout, native, ring
from .clock import Clock
from .duration import NS_PER_S, Duration, format_ns
from .errors import (
    GeometryMismatchError,
    ShmwinError,
    UnknownFieldError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
)
from .geometry import parse_resolution, ring_of, window_geometry
from .keys import Key, KeyTable
from .layout import Geometry, Layout, Meta
from .locks import check_lock_table, init_locks, init_stripes
from .rows import RingView, Rows, slot_view
from .segment import Segment
from .segment import unlink as _unlink_name
from .stripes import StripeTable

Number = int | float

_W = layout.WORD_BYTES


class Window:
    """A sliding window of ``buckets`` time buckets over ``span``, in shared memory.

    ``Window(name, ...)`` creates the window or attaches to it if it exists with
    the same geometry; ``Window.create`` insists on creating, ``Window.attach``
    reads the geometry from the segment. ``close()`` detaches this process;
    ``unlink()`` removes the window for everyone. Both are idempotent.

    With ``keyed=True`` the window is *keyed*: every call takes ``key=`` and each key
    has its own counts. Its key table grows as keys come (memory follows the keys in use;
    idle keys are reclaimed); ``capacity=N`` caps it at N keys (then ``KeyTableFullError``).
    """

    def __new__(cls, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        if backends.is_shared_memory(backend):
            return super().__new__(cls)
        assert backend is not None
        return backends.factory(backend, "window")(*args, backend=backend, **kwargs)

    def __init__(
        self,
        name: str,
        span: Duration | None = None,
        buckets: int | None = None,
        fields: tuple[str, ...] | list[str] | str = ("count",),
        *,
        resolutions: tuple[str, ...] | list[str] | None = None,
        dtype: str = "int64",
        mode: str | None = None,
        stripes: int = 64,
        capacity: int | None = None,
        keyed: bool = False,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
        backend: str | None = None,
    ):
        want = window_geometry(span, buckets, resolutions, fields, dtype, mode, stripes, capacity, keyed)
        self._open(name, want, clock, perm, lock_timeout, ready_timeout)

    @classmethod
    def open_geometry(
        cls,
        name: str,
        want: Geometry,
        *,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
        on_full: str = "raise",
    ) -> Window:
        """Create or attach a window of exactly ``want`` (what ``Limiter`` builds on)."""
        self = object.__new__(cls)
        self._open(name, want, clock, perm, lock_timeout, ready_timeout, on_full)
        return self

    def _open(
        self,
        name: str,
        want: Geometry,
        clock: Clock | None,
        perm: int,
        lock_timeout: float,
        ready_timeout: float,
        on_full: str = "raise",
    ) -> None:
        """Create the segment, or attach to it and insist on the same geometry."""
        for _ in range(10):  # a racing unlink sends us round again
            try:
                seg = _create(name, want, perm)
                self._bind(seg, clock, lock_timeout, on_full)
                return
            except WindowExistsError:
                pass
            try:
                seg = Segment.attach(name, ready_timeout, _ready)
            except WindowNotFoundError:
                continue
            self._bind(seg, clock, lock_timeout, on_full)
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
        span: Duration | None = None,
        buckets: int | None = None,
        fields: tuple[str, ...] | list[str] | str = ("count",),
        *,
        resolutions: tuple[str, ...] | list[str] | None = None,
        dtype: str = "int64",
        mode: str | None = None,
        stripes: int = 64,
        capacity: int | None = None,
        keyed: bool = False,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
    ) -> Window:
        """Create a new window; :class:`WindowExistsError` if the name is taken."""
        want = window_geometry(span, buckets, resolutions, fields, dtype, mode, stripes, capacity, keyed)
        seg = _create(name, want, perm)
        self = object.__new__(cls)
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
        backend: str | None = None,
    ) -> Window:
        """Attach to an existing window, geometry read from the segment."""
        if not backends.is_shared_memory(backend):
            assert backend is not None
            return backends.factory(backend, "attach_window")(name, backend=backend, clock=clock)  # type: ignore[no-any-return]
        seg = Segment.attach(name, ready_timeout, _ready)
        self = object.__new__(cls)
        self._bind(seg, clock, lock_timeout)
        return self

    # -- setup ------------------------------------------------------------------

    def _bind(self, seg: Segment, clock: Clock | None, lock_timeout: float, on_full: str = "raise") -> None:
        """Validate the mapped segment and build this process's views of it."""
        self._seg = seg
        self._closed = True  # until fully bound, close() must not touch views
        try:
            g, lay, meta = layout.unpack_header(seg.mm[: layout.HEADER_BYTES], seg.size)
            check_lock_table(seg.mm, lay.locks_off, g.n_locks)
            layout.check_key_state(seg.mm, g, lay)
            # the core holds its window (through the claim callback): a bound ``w.add`` kept
            # alone keeps the window open, as a bound Python method would
            core = native.open_core(
                seg.mm, seg.name, g, lay, meta,
                clock=clock, lock_timeout=lock_timeout, on_full=on_full, claim=self._claim_stripe,
                fd=seg.fd,
            )  # fmt: skip
        except BaseException:
            seg.close()
            raise
        seg.release_fd()  # the core keeps its own (keyed windows grow through it)
        self._g, self._lay, self.meta = g, lay, meta
        self.name = seg.name
        self._core = core
        self._clock: Callable[[], int] = clock or time.monotonic_ns
        # every view below holds an export of the mmap (numpy arrays through ``_raw``; a plain
        # ``np.ndarray(buffer=mm)`` would not): a reader in another thread still using one keeps
        # the mapping alive, and close() then leaves the unmapping to the GC
        self._buf = memoryview(seg.mm)
        self._raw = np.frombuffer(seg.mm, np.uint8)
        self._q = self._buf.cast("q")
        self._field_word = {f: i + 1 for i, f in enumerate(g.fields)}
        self._rows = Rows(self._raw, g, lay)
        self._stripes = StripeTable(self._q, lay, core)
        self._keys: KeyTable | None = KeyTable(self._buf, self._q, g, lay, core) if g.keyed else None
        if g.kind == "window":
            self.add = core.add  # type: ignore[method-assign]
            self.add_and_total = core.add_and_total  # type: ignore[method-assign]
        else:
            self.add = self._add_refused  # type: ignore[method-assign]
            self.add_and_total = self._add_refused  # type: ignore[method-assign,assignment]
        self._closed = False

    def _claim_stripe(self) -> tuple[int, int]:
        """The core's callback when this process has no stripe yet (first add, or after a
        fork): the candidates it may claim; the core claims and remembers in one call."""
        self._check_open()
        return self._stripes.candidates()

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
    def capacity(self) -> int:
        return self._g.capacity

    @property
    def nbytes(self) -> int:
        """Size of the shared segment in bytes."""
        return self._lay.total_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writing (each call is one native, uninterruptible section) ---------------

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """Add ``n`` to ``field`` (the first field by default) in the current bucket.

        Exact: once this returns, every reader in every process sees the count. The
        instance's ``add`` is the native core's; this stands in only once closed.
        """
        raise WindowClosedError(f"window {self.name!r} is closed")

    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number:
        """Add, and return ``field``'s total over the window *including* this add, atomically
        (keyed windows): no other add to the key lands between the two."""
        raise WindowClosedError(f"window {self.name!r} is closed")

    def _add_refused(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        raise ShmwinError(
            f"{self.name!r} is a {self._g.kind}: write to it through its {self._g.kind.title()}, "
            "a Window may only read it"
        )

    def add_many(
        self,
        values: npt.ArrayLike,
        field: str | None = None,
        at: npt.ArrayLike | None = None,
        key: Key | None = None,
    ) -> None:
        """Add a batch in one call: ``values`` (array-like), optionally stamped ``at``
        (monotonic ns, one per value, within the span; default: all now).

        Exact like ``add()``; timestamps in the future or older than the span raise
        ``ValueError`` before anything is written.
        """
        self._check_open()
        if self._g.kind != "window":
            self._add_refused()
        f = 1 if field is None else self._word_of(field)
        batch = self._batch_values(values)
        if at is None:
            if batch.size:
                self.add(_exact_sum(batch, self._g.dtype), self._g.fields[f - 1], key=key)
            return
        stamps = np.asarray(at)
        if stamps.shape != batch.shape or (stamps.size and stamps.dtype.kind not in "iu"):
            raise ValueError("at= must be integer monotonic ns timestamps, one per value")
        items = self._batch_items(self._clock(), batch, stamps.astype(np.int64, copy=False))
        self._core.add_batch(items, self._g.fields[f - 1], key)

    def _batch_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        batch = np.asarray(values)
        if batch.ndim != 1:
            batch = batch.reshape(-1)
        if self._g.dtype == "int64" and batch.size and batch.dtype.kind not in "iub":
            raise TypeError(f"add_many() takes integers for an int64 window, not {batch.dtype}")
        if batch.dtype.kind not in "iubf":
            raise TypeError(f"add_many() takes numbers, not {batch.dtype}")
        if batch.dtype.kind == "f" and batch.size and not np.isfinite(batch).all():
            raise ValueError("add_many() takes finite numbers (no NaN or infinity)")
        return batch

    def _batch_items(
        self, now_ns: int, batch: npt.NDArray[Any], stamps: npt.NDArray[np.int64]
    ) -> list[tuple[int, int, Number]]:
        """Per ring, the batch summed by bucket: ``(ring, epoch, sum)`` for the core to add."""
        oldest_ns = max(now_ns - self._g.span_ns, -1)  # a monotonic clock never reads below 0
        if stamps.size and (stamps.max() > now_ns or stamps.min() <= oldest_ns):
            raise ValueError("at= holds timestamps in the future, or older than the window's span")
        exact_in_float = self._g.dtype == "float64" or (
            batch.size == 0 or float(np.abs(batch).max()) * batch.size < 2**53
        )
        items = []
        for index, r in enumerate(self._rows.rings):
            bucket_ns, n_buckets = r.bucket_ns, r.n_buckets
            now_epoch = now_ns // bucket_ns
            ages = now_epoch - stamps // bucket_ns  # 0 = the current bucket; >= n_buckets: gone
            if exact_in_float:
                sums = np.bincount(ages, weights=batch, minlength=n_buckets)[:n_buckets]
            else:  # Python ints: a sum past int64 is then an OverflowError in the core, not a wrap
                inside = ages < n_buckets
                sums = np.zeros(n_buckets, object)
                np.add.at(sums, ages[inside], batch[inside].astype(object))
            for age in np.flatnonzero(sums):
                items.append((index, now_epoch - int(age), _scalar(sums[age], self._g.dtype)))
        return items

    def _word_of(self, field: str) -> int:
        word = self._field_word.get(field)
        if word is None:
            self._check_open()
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return word

    # -- stripes ------------------------------------------------------------------

    def reclaim(self) -> int:
        """Free the stripes of processes that have died; returns how many.

        Not needed for correctness -- a claimer adopts dead stripes by itself --
        but lets a supervisor (gunicorn's ``child_exit``) tidy up at once.
        """
        self._check_open()
        return self._stripes.reclaim() if self._g.mode == "striped" else 0

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed stripe (for inspection)."""
        self._check_open()
        return self._stripes.owners() if self._g.mode == "striped" else []

    # -- keys -----------------------------------------------------------------------

    def keys(self) -> list[Key]:
        """The keys that still have counts inside the window (keyed windows)."""
        keys = self._keyed()
        now_ns = self._clock()
        return [key for slot, key, _ in keys.entries() if not keys.is_idle(slot, now_ns)]

    def top(
        self, n: int = 10, field: str | None = None, last: Duration | None = None
    ) -> list[tuple[Key, Number]]:
        """The ``n`` keys with the largest totals of ``field``, largest first."""
        keys = self._keyed()
        f = 1 if field is None else self._word_of(field)
        per_row, _, _, _ = self._live_values(last, f - 1, None, per_row=True)
        order = np.argsort(per_row, kind="stable")[::-1]
        out: list[tuple[Key, Number]] = []
        for slot in order[: max(n, 0) * 2]:
            if per_row[slot] == 0 or len(out) == n:
                break
            entry = keys.entry(int(slot))
            if entry is not None:
                out.append((entry, _scalar(per_row[slot], self._g.dtype)))
        return out

    def clear(self, key: Key) -> None:
        """Forget every count of ``key`` (keyed windows); the entry becomes free."""
        self._keyed()
        self._core.clear(key)

    def _keyed(self) -> KeyTable:
        self._check_open()
        if self._keys is None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")
        return self._keys

    # -- reading --------------------------------------------------------------------

    def total(
        self,
        field: str | None = None,
        last: Duration | None = None,
        key: Key | None = None,
        resolution: str | int | None = None,
    ) -> Number:
        """Sum of ``field`` over the last ``last`` (default: the whole span).

        On a keyed window, ``key=None`` sums every key. ``resolution`` ("1h/1m" or an
        index) reads that ring instead of the finest one covering ``last``.
        """
        f = 1 if field is None else self._word_of(field)
        per_slot, _, _, _ = self._live_values(last, f - 1, key, resolution=resolution)
        return _scalar(per_slot.sum(), self._g.dtype)

    def totals(
        self, last: Duration | None = None, key: Key | None = None, resolution: str | int | None = None
    ) -> dict[str, Number]:
        """``{field: sum}`` over the last ``last`` (default: the whole span)."""
        per_slot, _, _, _ = self._live_values(last, None, key, resolution=resolution)
        sums = per_slot.sum(axis=0)
        return {f: _scalar(sums[i], self._g.dtype) for i, f in enumerate(self._g.fields)}

    def rate(
        self,
        field: str | None = None,
        last: Duration | None = 1,
        key: Key | None = None,
        resolution: str | int | None = None,
    ) -> float:
        """Events per second of ``field`` over the covered interval (``last=None``: the span).

        The interval runs from the start of the oldest bucket counted to now, so
        a partly filled current bucket is neither ignored nor over-weighted.
        """
        f = 1 if field is None else self._word_of(field)
        per_slot, now_ns, k, r = self._live_values(last, f - 1, key, resolution=resolution)
        covered_ns = now_ns - (now_ns // r.bucket_ns - k + 1) * r.bucket_ns
        return float(per_slot.sum()) * NS_PER_S / max(covered_ns, 1)

    def series(
        self,
        field: str | None = None,
        last: Duration | None = None,
        key: Key | None = None,
        resolution: str | int | None = None,
    ) -> npt.NDArray[Any]:
        """One value per bucket, oldest first, the current bucket last; stale buckets 0.

        The buckets are those of the finest resolution covering ``last`` (the finest
        one when ``last`` is None), or of ``resolution`` ("1h/1m" or its index).
        """
        f = 1 if field is None else self._word_of(field)
        if resolution is None and last is None:
            resolution = 0
        per_slot, now_ns, k, r = self._live_values(last, f - 1, key, resolution=resolution)
        return per_slot[ring.slots_oldest_first(now_ns // r.bucket_ns, r.n_buckets, k)]

    @property
    def resolutions(self) -> list[str]:
        """The resolutions, finest first, as "span/bucket" strings ("1m/1s", "1h/1m")."""
        return [f"{format_ns(r.span_ns)}/{format_ns(r.bucket_ns)}" for r in self._g.rings]

    def resolution_for(self, last: Duration | None = None, resolution: str | int | None = None) -> int:
        """The index of the ring a read over ``last`` (or of ``resolution``) uses: the finest
        that covers it (the longest when ``last`` is None)."""
        self._check_open()
        return self._rows.pick(last, resolution)[0].index

    def last_write_ns(self) -> int | None:
        """When this window was last written (monotonic ns), or None if never. Never earlier
        than the newest write: for unkeyed windows it is the *end* of the newest bucket, so
        an idle time measured from it is never overstated (what makes ``gc`` safe)."""
        self._check_open()
        if self._keys is not None:
            return max((last for _, _, last in self._keys.entries() if last > 0), default=0) or None
        newest = self._rows.newest_epoch(slice(0, self._rows_in_use()))
        return None if newest < 0 else (newest + 1) * self._rows.rings[0].bucket_ns

    def _live_values(
        self,
        last: Duration | None,
        value_index: int | None,
        key: Key | None,
        per_row: bool = False,
        resolution: str | int | None = None,
    ) -> tuple[npt.NDArray[Any], int, int, RingView]:
        """Live values summed over rows (per slot), or over slots (per row); lock-free. A
        key's generation is checked after the read: if it moved, the read is done again."""
        self._check_open()
        r, k = self._rows.pick(last, resolution)
        for _ in range(100):
            now_ns = self._clock()
            rows, generation = self._rows_for(key)
            values = Rows.live(r, k, now_ns, rows, value_index, per_row)
            if generation is None or self._keys is None or self._keys.generation(rows.start) == generation:
                return values, now_ns, k, r
        raise ShmwinError(f"key {key!r} kept moving while it was read")

    def _rows_for(self, key: Key | None) -> tuple[slice, int | None]:
        """Rows a read sums, and the key entry's generation to re-check afterwards."""
        if key is None:
            if self._keys is not None:
                return slice(0, self._keys.rows_top()), None
            return slice(0, self._rows_in_use()), None
        found = self._keyed().find(key)
        if found is None:
            return slice(0, 0), None
        return slice(found[0], found[0] + 1), found[1]

    def _rows_in_use(self) -> int:
        """Rows readers must sum: row 0 plus every stripe ever claimed (clamped)."""
        return max(1, min(int(self._q[layout.ROWS_IN_USE_OFF // _W]), self._lay.n_rows))

    # -- lifecycle --------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the window for everyone. Adds racing with reset() may be dropped
        in striped mode; locked and keyed windows reset exactly."""
        self._check_open()
        self._core.reset()

    def close(self) -> None:
        """Detach this process. The window lives on for everyone else."""
        if self._closed:
            return
        try:
            self._core.release_stripe()  # this process's stripe, if it has one: data kept
        finally:
            self._closed = True
            self._core.close()  # from here every write raises WindowClosedError
            for bound in ("add", "add_and_total"):
                self.__dict__.pop(bound, None)  # back to the class's, which raise
            # drop (never release) the views: a reader in another thread may still hold one,
            # and its export then keeps the mapping alive until it lets go
            del self._rows, self._keys, self._stripes, self._q, self._buf, self._raw
            with suppress(BufferError):
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


def _create(name: str, g: Geometry, perm: int) -> Segment:
    """A new segment of geometry ``g``: keyed ones are sized for their capacity but reserve
    only their header, locks and first index (rows are reserved as keys come)."""
    lay = Layout.plan(g)
    return Segment.create(name, lay.total_bytes, perm, _initialiser(g), reserve=lay.first_bytes)


def _initialiser(g: Geometry) -> Callable[[mmap.mmap], None]:
    """Fill a new segment: header, locks, empty epochs -- and the magic word last. Keyed
    rows are filled as they are handed out; their table starts empty (all zero)."""

    def init(mm: mmap.mmap) -> None:
        lay = Layout.plan(g)
        meta = Meta(os.getpid(), time.time_ns(), time.monotonic_ns(), _boot_id(), os.urandom(16))
        mm[: layout.HEADER_BYTES] = layout.pack_header(g, lay, meta)
        mm[layout.ROWS_IN_USE_OFF : layout.ROWS_IN_USE_OFF + _W] = (1).to_bytes(_W, "little")
        init_locks(mm, lay.locks_off, g.n_locks)
        if not g.keyed:
            init_stripes(mm, lay.stripes_off, g.n_stripes + 1)
            slots = slot_view(mm, g, lay)
            slots[:, :, 0] = ring.EMPTY_EPOCH
            del slots
        mm[0:_W] = layout.MAGIC

    return init


def _ready(mm: mmap.mmap) -> bool:
    """Is the magic word written? (Junk there is caught by header validation.)"""
    return len(mm) < _W or mm[0:_W] != b"\0" * _W


def _scalar(x: Any, dtype: str) -> Number:
    return int(x) if dtype == "int64" else float(x)


def _exact_sum(batch: npt.NDArray[Any], dtype: str) -> Number:
    """The batch's sum, never wrapped: int64 sums that could pass 2**63 are done in Python."""
    if dtype == "int64" and batch.size and float(np.abs(batch).max()) * batch.size >= 2**63:
        return sum(int(v) for v in batch.tolist())
    return _scalar(batch.sum(), dtype)


def _boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return b"\0" * 16



__all__ = ["Window", "parse_resolution", "ring_of"]
