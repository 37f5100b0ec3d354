"""Window: a named sliding time-window counter shared by every process on the host.

Data flow of one ``add()``: ask the clock for now, ask ``ring`` for the epoch and
slot, then write the slot of *this thread's* row (striped mode, no lock), of the
shared row 0 under its robust mutex (locked mode, and the fallback when every
stripe is taken), or of the key's row under the key's lock (keyed windows).
Reads sum rows in numpy, skipping stale slots, and never take a lock.
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

from . import backends, layout, ring
from .clock import Clock
from .duration import NS_PER_S, Duration, format_ns, to_ns
from .errors import (
    GeometryMismatchError,
    ShmwinError,
    UnknownFieldError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
)
from .keys import Key, KeyTable
from .layout import Geometry, Layout, Meta, Ring
from .locks import LockTable, init_locks, trylock, unlock
from .segment import Segment
from .segment import unlink as _unlink_name
from .stripes import StripeTable

Number = int | float

_W = layout.WORD_BYTES
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

    With ``capacity=N`` the window is *keyed*: every call takes ``key=`` and each
    key has its own counts (up to at least N live keys; idle keys are reclaimed).
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
        capacity: int = 0,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
        backend: str | None = None,
    ):
        want = _geometry(span, buckets, resolutions, fields, dtype, mode, stripes, capacity)
        self._open(name, want, clock, perm, lock_timeout, ready_timeout)

    def _open(
        self,
        name: str,
        want: Geometry,
        clock: Clock | None,
        perm: int,
        lock_timeout: float,
        ready_timeout: float,
    ) -> None:
        """Create the segment, or attach to it and insist on the same geometry."""
        for _ in range(10):  # a racing unlink sends us round again
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
        span: Duration | None = None,
        buckets: int | None = None,
        fields: tuple[str, ...] | list[str] | str = ("count",),
        *,
        resolutions: tuple[str, ...] | list[str] | None = None,
        dtype: str = "int64",
        mode: str | None = None,
        stripes: int = 64,
        capacity: int = 0,
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
    ) -> Window:
        """Create a new window; :class:`WindowExistsError` if the name is taken."""
        want = _geometry(span, buckets, resolutions, fields, dtype, mode, stripes, capacity)
        seg = Segment.create(name, Layout.plan(want).total_bytes, perm, _initialiser(want))
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
        self._ring0 = lay.ring_words[0] + lay.slot_words  # first bucket slot of ring 0 in a row
        self._row_words = lay.row_bytes // _W
        self._rows_word = lay.rows_off // _W
        self._field_word = {f: i + 1 for i, f in enumerate(g.fields)}
        self._q = memoryview(seg.mm).cast("q")
        self._v: Any = self._q if g.dtype == "int64" else memoryview(seg.mm).cast("d")
        self._zeros = memoryview(bytearray(_W * len(g.fields))).cast("q")
        self._shared_base = self._rows_word + self._ring0
        # per ring: (word offset of its first bucket slot within a row, bucket ns, buckets)
        self._ring_specs = [
            (off + lay.slot_words, r.bucket_ns, r.n_buckets)
            for off, r in zip(lay.ring_words, g.rings, strict=True)
        ]
        self._views = [_ring_views(seg.mm, g, lay, i) for i in range(len(g.rings))]
        self._longest = max(range(len(g.rings)), key=lambda i: g.rings[i].span_ns)
        self._one_ring = len(g.rings) == 1
        self._slots = _slot_view(seg.mm, g, lay)
        self._empty_row_bytes = _empty_row_template(g, lay)
        self._striped = g.mode == "striped"
        self._row_lock = self._locks.handles[layout.LOCK_SHARED_ROW]
        self._stripes = StripeTable(self._q, lay, self._locks)
        self._keys: KeyTable | None = None
        if g.keyed:
            self._keys = KeyTable(seg.mm, self._q, g, lay, self._locks)
            self._keys.on_reuse(self._empty_row)
        self._bind_writer()
        self._reset_process_state()
        self._closed = False
        _live_windows.add(self)

    def _bind_writer(self) -> None:
        """Pick this segment's add(): each variant skips checks the others need."""
        if self._g.kind != "window":
            self.add = self._add_refused  # type: ignore[method-assign]
        elif self._g.keyed:
            self.add = self._add_keyed  # type: ignore[method-assign]
        elif not self._striped:
            self.add = self._add_locked  # type: ignore[method-assign]
        elif len(self._g.rings) > 1:
            self.add = self._add_striped_rings  # type: ignore[method-assign]

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
    def capacity(self) -> int:
        return self._g.capacity

    @property
    def nbytes(self) -> int:
        """Size of the shared segment in bytes."""
        return self._lay.total_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writing ------------------------------------------------------------------

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """Add ``n`` to ``field`` (the first field by default) in the current bucket.

        Exact: once this returns, every reader in every process sees the count.
        """
        if key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")
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

    def _add_locked(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """``add()`` of an unkeyed locked window: row 0 under lock 1."""
        if key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")
        f = 1 if field is None else self._word_of(field)
        handle = self._row_lock
        rc = trylock(handle)
        if rc:
            self._locks.acquire_contended(layout.LOCK_SHARED_ROW, rc)
        try:
            if self._one_ring:  # the common case, inline: ring 0 of row 0
                epoch = self._clock() // self._bucket_ns  # under the lock: epochs never go back
                slot = self._shared_base + epoch % self._n_buckets * self._slot_words
                if self._q[slot] != epoch:
                    self._roll(slot, epoch)
                try:
                    self._v[slot + f] += n
                except (TypeError, ValueError) as exc:
                    raise self._bad_amount(n) from exc
            else:
                self._add_in_row(self._rows_word, n, f)
        finally:
            unlock(handle)

    def _add_keyed(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """``add()`` of a keyed window: the key's row under its lock."""
        if key is None:
            raise TypeError(f"window {self.name!r} is keyed: pass key=")
        f = 1 if field is None else self._word_of(field)
        keys = self._keys
        assert keys is not None
        slot = keys.lock_key(key, self._clock(), create=True)
        try:
            now_ns = self._add_in_row(self._rows_word + slot * self._row_words, n, f)
            keys.touch(slot, now_ns)
        finally:
            keys.unlock_row(slot)

    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number:
        """Add, and return ``field``'s total over the window *including* this add, atomically
        (keyed windows): no other add to the key lands between the two."""
        keys = self._keyed()
        if key is None:
            raise TypeError(f"window {self.name!r} is keyed: pass key=")
        f = 1 if field is None else self._word_of(field)
        slot = keys.lock_key(key, self._clock(), create=True)
        try:
            row = self._rows_word + slot * self._row_words
            now_ns = self._add_in_row(row, n, f)
            keys.touch(slot, now_ns)
            first, bucket_ns, n_buckets = self._ring_specs[self._longest]
            epoch, total = now_ns // bucket_ns, 0
            for e in range(epoch - n_buckets + 1, epoch + 1):
                slot_word = row + first + e % n_buckets * self._slot_words
                if self._q[slot_word] == e:
                    total += self._v[slot_word + f]
            return total
        finally:
            keys.unlock_row(slot)

    def _add_in_row(self, row: int, n: Number, f: int) -> int:
        """Add into every ring of the row starting at word ``row``; caller holds the row's
        lock. The clock is read under the lock, so a row's epochs never go back."""
        now_ns = self._clock()
        self._add_at(row, now_ns, n, f)
        return now_ns

    def _add_at(self, row: int, now_ns: int, n: Number, f: int) -> None:
        """Add ``n`` at time ``now_ns`` into each ring of a row (caller is its only writer)."""
        q, v, sw = self._q, self._v, self._slot_words
        for first, bucket_ns, n_buckets in self._ring_specs:
            epoch = now_ns // bucket_ns
            slot = row + first + epoch % n_buckets * sw
            if q[slot] != epoch:
                self._roll(slot, epoch)
            try:
                v[slot + f] += n
            except (TypeError, ValueError) as exc:
                raise self._bad_amount(n) from exc

    def _add_striped_rings(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """``add()`` of a striped window with several resolutions: one timestamp, every ring."""
        if key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")
        f = 1 if field is None else self._word_of(field)
        try:
            base = self._tls.base
        except AttributeError:
            base = self._bind_thread()
        if base < 0:
            self._add_shared(n, f)
            return
        self._add_at(base - self._ring0, self._clock(), n, f)  # lock-free: this thread's row

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
        f = 1 if field is None else self._word_of(field)
        batch = self._batch_values(values)
        if at is None:
            if batch.size:
                self.add(_scalar(batch.sum(), self._g.dtype), self._g.fields[f - 1], key=key)
            return
        stamps = np.asarray(at)
        if stamps.shape != batch.shape or (stamps.size and stamps.dtype.kind not in "iu"):
            raise ValueError("at= must be integer monotonic ns timestamps, one per value")
        stamps = stamps.astype(np.int64, copy=False)
        if self._keys is not None:
            if key is None:
                raise TypeError(f"window {self.name!r} is keyed: pass key=")
            slot = self._keys.lock_key(key, self._clock(), create=True)
            try:
                now_ns = self._clock()
                self._add_batch(self._rows_word + slot * self._row_words, now_ns, batch, stamps, f)
                self._keys.touch(slot, now_ns)
            finally:
                self._keys.unlock_row(slot)
            return
        if key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")
        base = -1
        if self._striped:
            try:
                base = self._tls.base
            except AttributeError:
                base = self._bind_thread()
        if base >= 0:  # lock-free: this thread's row
            self._add_batch(base - self._ring0, self._clock(), batch, stamps, f)
            return
        self._locks.acquire(layout.LOCK_SHARED_ROW)
        try:
            self._add_batch(self._rows_word, self._clock(), batch, stamps, f)
        finally:
            self._locks.release(layout.LOCK_SHARED_ROW)

    def _batch_values(self, values: npt.ArrayLike) -> npt.NDArray[Any]:
        batch = np.asarray(values)
        if batch.ndim != 1:
            batch = batch.reshape(-1)
        if self._g.dtype == "int64" and batch.size and batch.dtype.kind not in "iub":
            raise TypeError(f"add_many() takes integers for an int64 window, not {batch.dtype}")
        if batch.dtype.kind not in "iubf":
            raise TypeError(f"add_many() takes numbers, not {batch.dtype}")
        return batch

    def _add_batch(
        self, row: int, now_ns: int, batch: npt.NDArray[Any], stamps: npt.NDArray[np.int64], f: int
    ) -> None:
        """Vectorised add into every ring of a row; caller is the row's only writer now."""
        oldest_ns = max(now_ns - self._g.span_ns, -1)  # a monotonic clock never reads below 0
        if stamps.size and (stamps.max() > now_ns or stamps.min() <= oldest_ns):
            raise ValueError("at= holds timestamps in the future, or older than the window's span")
        exact_in_float = self._g.dtype == "float64" or (
            batch.size == 0 or float(np.abs(batch).max()) * batch.size < 2**53
        )
        for first, bucket_ns, n_buckets in self._ring_specs:
            now_epoch = now_ns // bucket_ns
            ages = now_epoch - stamps // bucket_ns  # 0 = the current bucket; >= n_buckets: gone
            if exact_in_float:
                sums = np.bincount(ages, weights=batch, minlength=n_buckets)[:n_buckets]
            else:
                inside = ages < n_buckets
                sums = np.zeros(n_buckets, np.int64)
                np.add.at(sums, ages[inside], batch[inside])
            for age in np.flatnonzero(sums):
                epoch = now_epoch - int(age)
                word = row + first + epoch % n_buckets * self._slot_words
                if self._q[word] != epoch:
                    self._roll(word, epoch)
                self._v[word + f] += _scalar(sums[age], self._g.dtype)

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
        Caller is the row's only writer (its owner thread, or the row lock holder)."""
        self._q[slot + 1 : slot + self._slot_words] = self._zeros
        self._q[slot] = epoch

    def _empty_row(self, row: int) -> None:
        """Overwrite a row with the empty template (every epoch EMPTY, every value 0).
        Caller holds the row's lock, and no reader trusts the row until the key's
        generation is published after this."""
        start = self._lay.rows_off + row * self._lay.row_bytes + self._lay.ring_words[0] * _W
        self._seg.mm[start : start + self._lay.rings_bytes] = self._empty_row_bytes

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
        """Give the calling thread its row: the word index of its ring 0, or -1 for row 0."""
        self._check_open()
        tls = self._tls
        tls.retry_ns = time.monotonic_ns() + _CLAIM_RETRY_NS
        claim = self._stripes.claim() if self._striped else None
        if claim is None:
            tls.base = -1
        else:
            with self._rows_lock:
                self._my_rows.append(claim)
            tls.base = self._rows_word + claim[0] * self._row_words + self._ring0
        return int(tls.base)

    def reclaim(self) -> int:
        """Free the stripes of threads that have died; returns how many.

        Not needed for correctness -- a claimer adopts dead stripes by itself --
        but lets a supervisor (gunicorn's ``child_exit``) tidy up at once.
        """
        self._check_open()
        return self._stripes.reclaim() if self._striped else 0

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed stripe (for inspection)."""
        self._check_open()
        return self._stripes.owners() if self._striped else []

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
        keys = self._keyed()
        slot = keys.lock_key(key, self._clock(), create=False)
        if slot < 0:
            return
        try:
            self._empty_row(slot)
            keys.touch(slot, 0)
        finally:
            keys.unlock_row(slot)

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
        per_slot, now_ns, k, index = self._live_values(last, f - 1, key, resolution=resolution)
        bucket_ns = self._ring_specs[index][1]
        covered_ns = now_ns - (now_ns // bucket_ns - k + 1) * bucket_ns
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
        per_slot, now_ns, k, index = self._live_values(last, f - 1, key, resolution=resolution)
        _, bucket_ns, n_buckets = self._ring_specs[index]
        return per_slot[ring.slots_oldest_first(now_ns // bucket_ns, n_buckets, k)]

    @property
    def resolutions(self) -> list[str]:
        """The resolutions, finest first, as "span/bucket" strings ("1m/1s", "1h/1m")."""
        return [f"{format_ns(r.span_ns)}/{format_ns(r.bucket_ns)}" for r in self._g.rings]

    def _pick(self, last: Duration | None, resolution: str | int | None) -> tuple[int, int]:
        """(ring index, buckets to read): the finest ring covering ``last``, or as asked."""
        if resolution is not None:
            index = self._resolution_index(resolution)
            _, bucket_ns, n_buckets = self._ring_specs[index]
            if last is None:
                return index, n_buckets
            return index, ring.buckets_for(to_ns(last, "last"), bucket_ns, n_buckets)
        if last is None:
            return self._longest, self._ring_specs[self._longest][2]
        last_ns = to_ns(last, "last")
        for index, (_, bucket_ns, n_buckets) in enumerate(self._ring_specs):
            if bucket_ns * n_buckets >= last_ns:
                return index, ring.buckets_for(last_ns, bucket_ns, n_buckets)
        _, bucket_ns, n_buckets = self._ring_specs[self._longest]
        return self._longest, ring.buckets_for(last_ns, bucket_ns, n_buckets)  # raises: too long

    def _resolution_index(self, resolution: str | int) -> int:
        if isinstance(resolution, int) and 0 <= resolution < len(self._ring_specs):
            return resolution
        if isinstance(resolution, str):
            wanted = parse_resolution(resolution)
            for index, r in enumerate(self._g.rings):
                if (r.bucket_ns, r.n_buckets) == (wanted.bucket_ns, wanted.n_buckets):
                    return index
        raise ValueError(f"no resolution {resolution!r}; this window has {self.resolutions}")

    def _live_values(
        self,
        last: Duration | None,
        value_index: int | None,
        key: Key | None,
        per_row: bool = False,
        resolution: str | int | None = None,
    ) -> tuple[npt.NDArray[Any], int, int, int]:
        """Live values summed over rows (per slot), or over slots (per row); lock-free.

        Liveness is tested before and after the values are read: a slot that
        changed meanwhile was being recycled by its writer and counts as expired.
        """
        self._check_open()
        index, k = self._pick(last, resolution)
        _, bucket_ns, n_buckets = self._ring_specs[index]
        all_epochs, all_values = self._views[index]
        for _ in range(100):
            now_ns = self._clock()
            rows, generation = self._rows_for(key)
            expected = ring.expected_epochs(now_ns // bucket_ns, n_buckets, k)
            epochs = all_epochs[rows]
            widen: tuple[slice | None, ...]
            if value_index is None:
                values, widen = all_values[rows], (slice(None), slice(None), None)
            else:
                values, widen = all_values[rows, :, value_index], (slice(None), slice(None))
            live = epochs == expected
            picked = np.where(live[widen], values, 0)
            still = epochs == expected
            if not np.array_equal(live, still):
                picked = np.where((live & still)[widen], picked, 0)
            if generation is None or self._keys is None or self._keys.generation(rows.start) == generation:
                return picked.sum(axis=1 if per_row else 0), now_ns, k, index
        raise ShmwinError(f"key {key!r} kept moving while it was read")

    def _rows_for(self, key: Key | None) -> tuple[slice, int | None]:
        """Rows a read sums, and the key entry's generation to re-check afterwards."""
        if key is None:
            if self._keys is not None:
                return slice(0, self._lay.n_rows), None
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
        held = list(range(self._g.n_locks))
        for lock in held:
            self._locks.acquire(lock)
        try:
            self._slots[:, :, 0] = ring.EMPTY_EPOCH  # unstamp first: readers skip the slots at once
            self._slots[:, :, 1:] = 0
        finally:
            for lock in reversed(held):
                self._locks.release(lock)

    def close(self) -> None:
        """Detach this process. The window lives on for everyone else."""
        if self._closed:
            return
        try:
            with self._rows_lock:
                mine, self._my_rows = self._my_rows, []
            if mine:
                self._stripes.release(mine)
        finally:
            self._closed = True
            self._tls = _ClosedTLS()  # type: ignore[assignment]
            self.__dict__.pop("add", None)  # back to Window.add, which now raises
            _live_windows.discard(self)
            del self._views, self._slots, self._keys, self._stripes
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
    span: Duration | None,
    buckets: int | None,
    resolutions: tuple[str, ...] | list[str] | None,
    fields: tuple[str, ...] | list[str] | str,
    dtype: str,
    mode: str | None,
    stripes: int,
    capacity: int,
) -> Geometry:
    """The geometry a constructor asks for, validated."""
    if isinstance(capacity, bool) or not isinstance(capacity, int):
        raise ValueError(f"capacity must be an int, not {capacity!r}")
    if mode is None:
        mode = "locked" if capacity else "striped"
    if resolutions is None:
        rings: tuple[Ring, ...] = (ring_of(60 if span is None else span, 60 if buckets is None else buckets),)
    elif span is not None or buckets is not None:
        raise ValueError("give either span and buckets, or resolutions, not both")
    else:
        rings = _resolution_rings(resolutions)
    return Geometry(
        rings,
        (fields,) if isinstance(fields, str) else tuple(fields),
        dtype,
        mode,
        stripes if mode == "striped" else 0,
        capacity,
    )


def parse_resolution(spec: str) -> Ring:
    """ "1h/1m" -> a ring of 60 one-minute buckets."""
    span, sep, bucket = spec.partition("/") if isinstance(spec, str) else ("", "", "")
    if not sep:
        raise ValueError(f"resolution {spec!r} is not 'span/bucket', e.g. '1m/1s', '1h/1m', '24h/1h'")
    span_ns, bucket_ns = to_ns(span.strip(), "resolution span"), to_ns(bucket.strip(), "resolution bucket")
    if span_ns % bucket_ns:
        raise ValueError(f"resolution {spec!r}: the bucket does not divide the span")
    return Ring(bucket_ns, span_ns // bucket_ns)


def _resolution_rings(specs: tuple[str, ...] | list[str] | str) -> tuple[Ring, ...]:
    if isinstance(specs, str):
        specs = (specs,)
    rings = sorted((parse_resolution(spec) for spec in specs), key=lambda r: (r.bucket_ns, r.n_buckets))
    if not rings:
        raise ValueError("resolutions must name at least one 'span/bucket'")
    if len({r.bucket_ns for r in rings}) != len(rings):
        raise ValueError(f"two resolutions share a bucket width: {list(specs)}")
    return tuple(rings)


def ring_of(span: Duration, buckets: int, limit: int = 0) -> Ring:
    """A ring of ``buckets`` whole-nanosecond buckets covering ``span``."""
    span_ns = to_ns(span, "span")
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"buckets must be a positive int, not {buckets!r}")
    if span_ns % buckets:
        raise ValueError(
            f"buckets={buckets} does not divide span={span!r} ({span_ns} ns) into whole "
            "nanosecond-wide buckets"
        )
    return Ring(span_ns // buckets, buckets, limit)


def _initialiser(g: Geometry) -> Callable[[mmap.mmap], None]:
    """Fill a new segment: header, locks, empty epochs -- and the magic word last."""

    def init(mm: mmap.mmap) -> None:
        lay = Layout.plan(g)
        meta = Meta(os.getpid(), time.time_ns(), time.monotonic_ns(), _boot_id())
        mm[: layout.HEADER_BYTES] = layout.pack_header(g, lay, meta)
        mm[layout.ROWS_IN_USE_OFF : layout.ROWS_IN_USE_OFF + _W] = (1).to_bytes(_W, "little")
        init_locks(mm, lay.locks_off, g.n_locks, layout.LOCK_BYTES)
        slots = _slot_view(mm, g, lay)
        slots[:, :, 0] = ring.EMPTY_EPOCH
        del slots
        mm[0:_W] = layout.MAGIC

    return init


def _ready(mm: mmap.mmap) -> bool:
    """Is the magic word written? (Junk there is caught by header validation.)"""
    return len(mm) < _W or mm[0:_W] != b"\0" * _W


def _slot_view(mm: mmap.mmap, g: Geometry, lay: Layout) -> npt.NDArray[np.int64]:
    """Every slot of every ring of every row as int64 words: (rows, slots, 1 + fields)."""
    n_slots = sum(r.n_buckets + 1 for r in g.rings)
    view: npt.NDArray[np.int64] = np.ndarray(
        (lay.n_rows, n_slots, lay.slot_words), np.int64, mm, lay.rows_off + lay.ring_words[0] * _W,
        (lay.row_bytes, lay.slot_words * _W, _W),
    )  # fmt: skip
    return view


def _empty_row_template(g: Geometry, lay: Layout) -> bytes:
    """The bytes of a row with every slot unstamped and every value zero."""
    words = np.zeros(lay.rings_bytes // _W, np.int64)
    n_slots = sum(r.n_buckets + 1 for r in g.rings)
    words[: n_slots * lay.slot_words : lay.slot_words] = ring.EMPTY_EPOCH
    return words.tobytes()


def _ring_views(
    mm: mmap.mmap, g: Geometry, lay: Layout, index: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[Any]]:
    """Strided views of ring ``index``'s buckets: epochs (rows, buckets), values (rows, buckets, fields)."""
    slot_bytes = lay.slot_words * _W
    first = lay.rows_off + (lay.ring_words[index] + lay.slot_words) * _W  # past the header slot
    n = g.rings[index].n_buckets
    epochs = np.ndarray((lay.n_rows, n), np.int64, mm, first, (lay.row_bytes, slot_bytes))
    values = np.ndarray(
        (lay.n_rows, n, len(g.fields)), np.dtype(g.dtype), mm, first + _W, (lay.row_bytes, slot_bytes, _W)
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

__all__ = ["Window", "ring_of"]
