"""Window: a named sliding time-window counter shared by every process on the host -- or,
with ``backend="redis://..."``, by every host.

``Window`` is a thin front. It turns its arguments into a Geometry (``geometry.py``),
opens a backend through the registry (``backends/``: shared memory by default), and
answers every read the same way on every backend: which ring and how many buckets
(``geometry.pick_ring``), totals that never wrap (``policy.py``), rates over the
interval actually covered. The backend only adds and reads buckets. ``add`` is the
backend's own method (on shared memory, the native core's): nothing runs in between.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypedDict

from . import backends
from .backends.contract import Closing, Key, Of
from .backends.options import CreatingAnywhere, Opening, OpeningAnywhere, spelled_out
from .clock import Clock, host_clock
from .errors import BackendUnavailableError, UnknownFieldError, WindowClosedError
from .geometry import (
    Geometry,
    Meta,
    parse_resolution,
    pick_ring,
    resolution_index,
    resolution_name,
    ring_of,
    window_geometry,
)
from .policy import (
    ON_FULL,
    WINDOW_ON_ERROR,
    WINDOW_ON_FULL,
    batch_sum,
    choice,
    exact,
    exact_sum,
    int64_total,
    items_by_bucket,
    stamps_of,
    values_of,
)
from .rate import NS_PER_S, Duration, to_ns

if TYPE_CHECKING:  # numpy: imported by the reads and add_many that build arrays, never by add
    import numpy.typing as npt
    from typing_extensions import Unpack

Number = int | float
Fields = tuple[str, ...] | list[str] | str


class Shape(TypedDict, total=False):
    """A window's geometry beyond span, buckets and fields (``window_geometry``'s words)."""

    resolutions: tuple[str, ...] | list[str] | None
    dtype: str
    mode: str | None
    stripes: int | None
    capacity: int | None
    keyed: bool


SHAPE_DEFAULTS = {"dtype": "int64", "keyed": False}  # the other shape words default to None
BACKEND_SHAPE = ("mode", "stripes")  # shape words the backend is told too (one it cannot honour raises)


class Created(Shape, CreatingAnywhere, total=False):
    """``Window.create``'s keywords."""


class Opened(Shape, OpeningAnywhere, total=False):
    """``Window(...)``'s keywords, beyond ``on_error`` and ``on_full``."""


def _asked(span: Duration | None, buckets: int | None, fields: Fields, options: Created | Opened
           ) -> tuple[Geometry, dict[str, Any]]:  # fmt: skip
    """The geometry a constructor asks for, and the keywords it passes to the backend."""
    shape: dict[str, Any] = {**SHAPE_DEFAULTS, **options}
    want = window_geometry(span, buckets, shape.get("resolutions"), fields, shape["dtype"], shape.get("mode"),
                           shape.get("stripes"), shape.get("capacity"), shape["keyed"])  # fmt: skip
    store = {k: v for k, v in options.items() if k not in Shape.__annotations__ or k in BACKEND_SHAPE}
    return want, store


class Window(Closing):
    """A sliding window of ``buckets`` time buckets over ``span``, shared by name.

    ``Window(name, ...)`` creates the window or attaches to it if it exists with the
    same geometry; ``Window.create`` insists on creating, ``Window.attach`` reads the
    geometry from the store. ``close()`` detaches this process; ``unlink()`` removes
    the window for everyone. Both are idempotent.

    With ``keyed=True`` the window is *keyed*: every call takes ``key=`` and each key
    has its own counts. Its key table grows as keys come (memory follows the keys in use;
    idle keys are reclaimed); ``capacity=N`` caps it at N keys. When no row is left for a new
    key (``capacity`` live keys, or a full ``/dev/shm`` after idle keys were reclaimed),
    ``on_full`` decides: "raise" (the default: :class:`KeyTableFullError` or
    :class:`OutOfSpaceError`), or "allow"/"deny", which drop the add; either way the request
    is counted in :meth:`full_count`.

    Backend options (None: the backend's default; one the backend cannot honour is a
    :class:`~shmwin.errors.NotSupportedError`): shared memory takes ``perm`` (0o600),
    ``lock_timeout`` (10 s), ``ready_timeout`` (5 s), ``mode`` and ``stripes``; Redis
    takes ``timeout`` (1 s). ``on_error="allow"`` drops an ``add``/``add_many`` that
    cannot reach a remote backend (reads still raise); also when the server is down
    while the window is built, which then claims its name at the first call that gets
    through.
    """

    @spelled_out(Opened, SHAPE_DEFAULTS)
    def __init__(
        self,
        name: str,
        span: Duration | None = None,
        buckets: int | None = None,
        fields: Fields = ("count",),
        *,
        on_error: str = "raise",
        on_full: str = WINDOW_ON_FULL,
        **options: Unpack[Opened],
    ):
        choice("on_error", on_error, WINDOW_ON_ERROR)
        choice("on_full", on_full, ON_FULL)
        want, store = _asked(span, buckets, fields, options)
        opened = backends.open("window", name, want, on_error=on_error, on_full=on_full, **store)
        self._bind(opened, options.get("clock"), on_error)

    @classmethod
    @spelled_out(Created, SHAPE_DEFAULTS)
    def create(
        cls,
        name: str,
        span: Duration | None = None,
        buckets: int | None = None,
        fields: Fields = ("count",),
        **options: Unpack[Created],
    ) -> Window:
        """Create a new window; :class:`WindowExistsError` if the name is taken."""
        want, store = _asked(span, buckets, fields, options)
        return cls._over(backends.open("window", name, want, exclusive=True, **store), options.get("clock"))

    @classmethod
    @spelled_out(OpeningAnywhere)
    def attach(
        cls,
        name: str,
        *,
        on_error: str = "raise",
        on_full: str = WINDOW_ON_FULL,
        **options: Unpack[OpeningAnywhere],
    ) -> Window:
        """Attach to an existing window, geometry read from the store (the server must answer).
        ``perm`` (shared memory) trusts a segment group or others may write, as far as it goes;
        ``on_full`` answers a key that finds its table full, as when the window was opened."""
        choice("on_error", on_error, WINDOW_ON_ERROR)
        opened = backends.open("window", name, None, on_error=on_error, on_full=on_full, **options)
        return cls._over(opened, options.get("clock"), on_error)

    @classmethod
    @spelled_out(Opening)
    def open_geometry(
        cls,
        name: str,
        want: Geometry,
        *,
        on_full: str = WINDOW_ON_FULL,
        backend: str | None = None,
        **options: Unpack[Opening],
    ) -> Window:
        """Create or attach a window of exactly ``want`` (a Geometry built by ``geometry.py``)."""
        opened = backends.open("window", name, want, backend=backend, on_full=on_full, **options)
        return cls._over(opened, options.get("clock"))

    @classmethod
    def _for_role(
        cls,
        role: str,
        name: str,
        span: Duration,
        buckets: int,
        fields: Fields,
        *,
        capacity: int | None = None,
        clock: Clock | None = None,
        perm: int | None = None,
        backend: str | None = None,
    ) -> Window:
        """A window that shmwin's own parts (a breaker, a shedder, ...) make, created with its
        ``role`` recorded in the segment (or attached, if it has that very geometry)."""
        want = window_geometry(span, buckets, None, fields, "int64", None, None, capacity)
        return cls.open_geometry(name, dataclasses.replace(want, role=role), clock=clock, perm=perm,
                                 backend=backend)  # fmt: skip

    @classmethod
    def _attach_as(
        cls,
        name: str,
        is_kind: Callable[[Window], bool],
        refusal: Exception,
        **options: Unpack[OpeningAnywhere],
    ) -> Window:
        """Attach the window of one of shmwin's own parts (a breaker, a shedder, ...): closed
        again, and ``refusal`` raised, if ``is_kind`` says it is not one."""
        window = cls.attach(name, **options)
        if not is_kind(window):
            window.close()
            raise refusal
        return window

    @classmethod
    def _over(cls, opened: backends.WindowBackend, clock: Clock | None, on_error: str = "raise") -> Window:
        """A front over a backend window that is already open (``Limiter.window`` too)."""
        self = cls.__new__(cls)
        self._bind(opened, clock, on_error)
        return self

    def _bind(self, opened: backends.WindowBackend, clock: Clock | None, on_error: str) -> None:
        self._backend = opened
        self.name = opened.name
        self._g = opened.geometry
        self._clock: Callable[[], int] = clock or host_clock()
        self._on_error = on_error
        self._field_index = {f: i for i, f in enumerate(self._g.fields)}
        # the hot path is the backend's own method (the native core's on shared memory)
        self.add = opened.add if on_error == "raise" else self._add_or_drop  # type: ignore[method-assign]
        self.add_and_total = opened.add_and_total  # type: ignore[method-assign]

    # -- geometry -------------------------------------------------------------------

    url = Of[str]("url", "_backend", 'The backend\'s URL ("" for shared memory).')
    @property
    def geometry(self) -> Geometry:
        return self._g

    fields = Of[tuple[str, ...]]("fields")
    span_ns = Of[int]("span_ns")
    bucket_ns = Of[int]("bucket_ns")
    buckets = Of[int]("n_buckets")
    dtype = Of[str]("dtype")
    mode = Of[str]("mode")
    stripes = Of[int]("n_stripes")
    capacity = Of[int]("capacity")

    @property
    def span(self) -> float:
        """Span in seconds."""
        return self._g.span_ns / NS_PER_S

    @property
    def resolutions(self) -> list[str]:
        """The resolutions, finest first, as "span/bucket" strings ("1m/1s", "1h/1m")."""
        return [resolution_name(r) for r in self._g.rings]

    nbytes = Of[int]("nbytes", "_backend", "Size of the shared segment in bytes (shared memory).")
    meta = Of[Meta]("meta", "_backend", "Who created the segment, and when (shared memory).")
    closed = Of[bool]("closed", "_backend", "True once this process has closed the window.")

    # -- writing ----------------------------------------------------------------------

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """Add ``n`` to ``field`` (the first field by default) in the current bucket.

        Exact: once this returns, every reader in every process sees the count. The
        instance's ``add`` is the backend's own (the native core's on shared memory).
        """
        self._backend.add(n, field, key)

    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number:
        """Add, and return ``field``'s total over the window *including* this add, atomically
        (keyed windows): no other add to the key lands between the two. A key the full table
        cannot hold raises :class:`~shmwin.errors.KeyTableFullError` whatever ``on_full`` says
        (it has no total to answer; the request is counted in :meth:`full_count`)."""
        return self._backend.add_and_total(n, field, key)

    def _add_or_drop(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        with suppress(BackendUnavailableError):  # on_error="allow": an add that cannot reach it is dropped
            self._backend.add(n, field, key)

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
        name = self._g.fields[self._index(field)]
        values_ = values_of(values, self._g.dtype)
        if at is None:
            if values_.size:
                self.add(batch_sum(values_, self._g.dtype), name, key=key)
            return
        items = items_by_bucket(self._g, self._clock(), values_, stamps_of(at, values_))
        try:
            self._backend.add_batch(items, name, key)
        except BackendUnavailableError:
            if self._on_error == "raise":
                raise

    # -- stripes, keys ----------------------------------------------------------------

    def reclaim(self) -> int:
        """Free the stripes of processes that have died; returns how many.

        Not needed for correctness -- a claimer adopts dead stripes by itself --
        but lets a supervisor (gunicorn's ``child_exit``) tidy up at once.
        """
        return self._backend.reclaim()

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed stripe (for inspection)."""
        return self._backend.stripe_owners()

    def full_count(self) -> int:
        """Requests that met a full key table -- no row for a new key: ``capacity`` live keys,
        or no room left in ``/dev/shm`` after idle keys were reclaimed -- whatever ``on_full``
        then answered. Shared by every process; 0 for an unkeyed window or a Redis one."""
        return self._backend.full_count()

    def keys(self) -> list[Key]:
        """The keys that still have counts inside the window (keyed windows)."""
        self._keyed()
        return self._backend.keys()

    def top(
        self, n: int = 10, field: str | None = None, last: Duration | None = None
    ) -> list[tuple[Key, Number]]:
        """The ``n`` keys with the largest totals of ``field``, largest first."""
        self._keyed()
        ring_index, k = pick_ring(self._g.rings, last)
        if last is not None:  # (this process's clock: the backend reads the same a moment later)
            k = within_last(k, self._g.rings[ring_index].bucket_ns, self._clock(), to_ns(last, "last"))
        found = self._backend.top(n, self._index(field), ring_index, k) if k else []
        return [(key, self._number(v, "a key's total")) for key, v in found]

    def clear(self, key: Key) -> None:
        """Forget every count of ``key`` (keyed windows); the entry becomes free."""
        self._keyed()
        self._backend.clear(key)

    def _keyed(self) -> None:
        self._check_open()
        if not self._g.keyed:
            raise ValueError(f"window {self.name!r} is not keyed (create it with keyed=True)")

    # -- reading ----------------------------------------------------------------------

    def total(
        self,
        field: str | None = None,
        last: Duration | None = None,
        key: Key | None = None,
        resolution: str | int | None = None,
    ) -> Number:
        """Sum of ``field`` over the last ``last`` (default: the whole span).

        On a keyed window, ``key=None`` sums every key. ``resolution`` ("1h/1m" or an
        index) reads that ring instead of the finest one covering ``last``. An int64 total
        past int64 (only reachable by summing many stripes, keys or buckets) raises
        OverflowError: never a wrapped or saturated number.
        """
        values, _, _, _ = self._read(field, last, key, resolution, ordered=False)
        return self._number(exact_sum(values), f"the total of {self._name_of(field)!r}")

    def totals(
        self, last: Duration | None = None, key: Key | None = None, resolution: str | int | None = None
    ) -> dict[str, Number]:
        """``{field: sum}`` over the last ``last`` (default: the whole span)."""
        values, _, _, _ = self._read(None, last, key, resolution, every_field=True, ordered=False)
        sums = exact(values).sum(axis=0)
        return {f: self._number(sums[i], f"the total of {f!r}") for i, f in enumerate(self._g.fields)}

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
        values, now_ns, k, bucket_ns = self._read(field, last, key, resolution, ordered=False)
        if self._g.rings[self.resolution_for(last, resolution)].log:
            covered_ns = bucket_ns  # an exact limiter's hit times: over its whole period
        else:
            covered_ns = now_ns - (now_ns // bucket_ns - k + 1) * bucket_ns
        return float(exact_sum(values)) / max(covered_ns, 1) * NS_PER_S  # divided first: 1e300 is no inf

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
        if resolution is None and last is None:
            resolution = 0
        values, _, _, _ = self._read(field, last, key, resolution)
        if values.dtype == object:  # some bucket summed past int64 over stripes or keys
            for v in values:
                int64_total(v, f"a bucket of {self._name_of(field)!r}")
            import numpy as np

            return values.astype(np.int64)
        return values

    def hit_times(self, key: Key, resolution: str | int = 0) -> list[tuple[int, int]]:
        """An exact limiter's hit times for ``key`` under one rate (``resolution``: its index,
        shortest period first): ``(time ns, hits)`` still counted now, oldest first; lock-free.
        For readers that need the times themselves (pyrate-limiter's ``peek``)."""
        self._check_open()
        index = resolution_index(self._g.rings, resolution)
        entries, _ = self._backend.log_entries(index, key)
        return sorted(entries)

    def resolution_for(self, last: Duration | None = None, resolution: str | int | None = None) -> int:
        """The index of the ring a read over ``last`` (or of ``resolution``) uses: the finest
        that covers it (the longest when ``last`` is None)."""
        self._check_open()
        return pick_ring(self._g.rings, last, resolution)[0]

    def last_write_ns(self) -> int | None:
        """When this window was last written (monotonic ns), or None if never; never earlier
        than the newest write, so an idle time measured from it is never overstated."""
        return self._backend.last_write_ns()

    def _read(
        self,
        field: str | None,
        last: Duration | None,
        key: Key | None,
        resolution: str | int | None,
        every_field: bool = False,
        ordered: bool = True,
    ) -> tuple[npt.NDArray[Any], int, int, int]:
        """``(values, now ns, k, bucket ns)`` of the ring a read over ``last`` uses (``ordered``:
        the last k buckets oldest first; else any order, for sums)."""
        value_index = None if every_field else self._index(field)
        if key is not None and not self._g.keyed:
            self._keyed()
        ring_index, k = pick_ring(self._g.rings, last, resolution)
        ring = self._g.rings[ring_index]
        # a ``last`` that is not a whole number of buckets: the oldest of the k buckets may have
        # begun before now - last, known only at the read's now (oldest first, to drop it)
        last_ns = None if last is None or ring.log else to_ns(last, "last")
        uneven = last_ns is not None and last_ns % ring.bucket_ns != 0
        reading = self._backend.read(value_index, ring_index, k, key, ordered or uneven)
        values = reading.values
        if last_ns is not None and uneven and within_last(k, ring.bucket_ns, reading.now_ns, last_ns) < k:
            values, k = values[1:], k - 1
        return values, reading.now_ns, k, ring.bucket_ns

    def _index(self, field: str | None) -> int:
        if field is None:
            return 0
        index = self._field_index.get(field)
        if index is None:
            self._check_open()
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return index

    def _name_of(self, field: str | None) -> str:
        return self._g.fields[0] if field is None else field

    def _number(self, x: Any, what: str) -> Number:
        return int64_total(x, f"{what} in window {self.name!r}") if self._g.dtype == "int64" else float(x)

    # -- lifecycle ----------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the window for everyone. Adds racing with reset() may be dropped
        in striped mode; locked and keyed windows reset exactly."""
        self._backend.reset()

    def close(self) -> None:
        """Detach this process. The window lives on for everyone else."""
        self._backend.close()

    def unlink(self) -> bool:
        """Remove the window for everyone (idempotent). Attached processes keep
        their mapping until they close; new attaches fail."""
        return self._backend.unlink()

    def _discard(self) -> None:
        """Close; and remove the window if this very open created it (shared memory): what a
        constructor of several segments does with those it made when a later one fails."""
        backends.discard(self._backend)

    def _check_open(self) -> None:
        if self._backend.closed:
            raise WindowClosedError(f"window {self.name!r} is closed")

    def __repr__(self) -> str:
        return repr(self._backend)


__all__ = ["Window", "parse_resolution", "ring_of"]


def within_last(k: int, bucket_ns: int, now_ns: int, last_ns: int) -> int:
    """Of the newest ``k`` buckets (``pick_ring`` rounds ``last`` up to whole buckets), how many
    began within the last ``last_ns`` at ``now_ns``: ``k``, or ``k - 1`` when the oldest began
    before now - last. A read over them then never counts an event older than ``last`` (the
    docs' promise), and misses at most one bucket width of the oldest events: with ``last``
    not a whole number of buckets, the newest ``ceil(last / bucket)`` would reach up to a bucket
    further back."""
    elapsed_ns = now_ns % bucket_ns  # into the current bucket (buckets begin at multiples)
    return k - 1 if (k - 1) * bucket_ns + elapsed_ns > last_ns else k
