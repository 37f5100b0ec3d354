"""ShmWindow: a window in a named shared-memory segment, the default backend of ``Window``.

Data flow of one ``add()``: it is one call into the native core (``shmwin/backends/shm/core/``), which
reads the clock, finds the epoch and slot, and writes the slot of *this process's*
stripe (striped mode, no lock), of the shared row 0 under its robust mutex (locked
mode, and the fallback when every stripe is taken), or of the key's row under the
key's lock (keyed windows). Reads sum rows in numpy (``shmwin/rows.py``), skipping
stale slots, and never take a lock.

Every way in -- :meth:`ShmWindow.open_geometry` (create or attach), :meth:`create`,
:meth:`attach` -- ends in :meth:`ShmWindow._bind`, the one place a mapped segment is
validated and handed to the core.
"""

from __future__ import annotations

import mmap
import os
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ... import _core
from ...clock import Clock, checked_clock, host_clock, host_monotonic_ns
from ...errors import (
    GeometryMismatchError,
    IncompatibleVersionError,
    NotSupportedError,
    ShmwinError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
)
from ...geometry import Geometry, Meta, slots_oldest_first
from ...policy import WINDOW_ON_FULL, int64_total
from ..contract import Key, Number, Reading, Request
from . import header, layout, native
from .format import COUNTER_ROLES
from .keys import KeyTable
from .layout import Layout
from .locks import check_lock_table, init_locks, init_stripes
from .owners import current_process
from .segment import Segment, path_of
from .stripes import StripeTable

if TYPE_CHECKING:  # rows.py reads in numpy: imported at a window's first read, never by an add
    import numpy as np
    import numpy.typing as npt

    from .rows import RingView, Rows

_W = layout.WORD_BYTES
# a window's buckets cannot change under its writers (a limiter's rates can: live.py)
_DROP_HINT = (": a window's buckets do not change live. To start it anew with the new ones, drop it: "
              "`shmwin rm {name}` (add --force while processes still hold it: they keep counting "
              "into the dropped one until they open it again); its counts go")  # fmt: skip
LOCK_TIMEOUT_S = 10.0


def _plain_windows(have: Geometry, want: Geometry) -> bool:
    """Both a plain window (no role: a concurrency segment is a window of its own role)."""
    return have.kind == "window" == want.kind and not have.role and not want.role


READY_TIMEOUT_S = 5.0
PERM = 0o600


@dataclass(frozen=True)
class ShmOptions:
    """How this process opens a segment, built once from the request (:meth:`of`) and handed
    down the open/create/attach chain whole. The values are passed on as given: the segment
    and the core check them (a non-int perm is an error there)."""

    clock: Clock | None = None
    perm: int = PERM  # the modes a segment is created with, and trusted with on attach
    lock_timeout: float = LOCK_TIMEOUT_S  # seconds a writer waits for a lock before repair
    ready_timeout: float = READY_TIMEOUT_S  # seconds an attach waits for a creator to finish
    on_full: str = WINDOW_ON_FULL  # what the core answers when the key table is full
    hash_key: bytes | None = None  # a new segment's SipHash key (None: random; see hash_key_of)

    @classmethod
    def of(cls, req: Request) -> ShmOptions:
        return cls(
            req.clock, req.option("perm", PERM), req.option("lock_timeout", LOCK_TIMEOUT_S),
            req.option("ready_timeout", READY_TIMEOUT_S), req.on_full,
            hash_key_of(req.option("hash_key", None)),
        )  # fmt: skip


class ShmWindow:
    """A sliding window of time buckets in a shared-memory segment (see the module docstring).

    With ``capacity=N`` the geometry is *keyed*: every call takes ``key=`` and each key
    has its own row (up to at least N live keys; idle keys are reclaimed).
    """

    name: str
    meta: Meta

    @classmethod
    def open(cls, req: Request) -> ShmWindow:
        """The registry's entry: create-or-attach, create, or attach, as ``req`` asks."""
        opts = ShmOptions.of(req)
        if req.geometry is None:
            return cls.attach(req.name, opts)
        if req.exclusive:
            return cls.create(req.name, req.geometry, opts)
        return cls.open_geometry(req.name, req.geometry, opts)

    @classmethod
    def open_geometry(cls, name: str, want: Geometry, opts: ShmOptions = ShmOptions()) -> ShmWindow:
        """Create the segment, or attach to it and insist on exactly ``want``."""
        self = cls.__new__(cls)
        for _ in range(10):  # a racing unlink sends us round again
            try:
                seg = _create(name, want, opts.perm, opts.clock, opts.hash_key)
                self._bind(seg, opts)
                return self
            except WindowExistsError:
                pass
            try:
                seg = Segment.attach(name, opts.ready_timeout, _ready, perm=opts.perm)
            except WindowNotFoundError:
                continue
            self._bind(seg, opts)
            if self._g != want:
                have = self._g
                self.close()
                raise GeometryMismatchError(
                    f"window {name!r} exists with geometry [{have}], not the requested [{want}]"
                    + (_DROP_HINT.format(name=name) if _plain_windows(have, want) else "")
                )
            return self
        raise ShmwinError(f"window {name!r} kept appearing and disappearing; gave up")

    @classmethod
    def create(cls, name: str, want: Geometry, opts: ShmOptions = ShmOptions()) -> ShmWindow:
        """Create a new segment; :class:`WindowExistsError` if the name is taken. (Only windows
        are created exclusively: their on_full, the window's, is what the request holds.)"""
        seg = _create(name, want, opts.perm, opts.clock, opts.hash_key)
        self = cls.__new__(cls)
        self._bind(seg, opts)
        return self

    @classmethod
    def attach(cls, name: str, opts: ShmOptions = ShmOptions()) -> ShmWindow:
        """Attach to an existing segment, geometry read from its header; ``opts.perm`` widens
        the modes trusted (group- or other-writable segments) as far as it goes."""
        seg = Segment.attach(name, opts.ready_timeout, _ready, perm=opts.perm)
        self = cls.__new__(cls)
        self._bind(seg, opts)
        return self

    # -- setup ------------------------------------------------------------------

    def _bind(self, seg: Segment, opts: ShmOptions) -> None:
        """Validate the mapped segment and build this process's views of it and its core."""
        self._seg = seg
        self._closed = True  # until fully bound, close() must not touch views
        try:
            try:
                g, lay, meta = header.unpack_header(seg.mm[: layout.HEADER_BYTES], seg.size)
            except IncompatibleVersionError as exc:  # whose, and what to do (the header knows no name)
                raise IncompatibleVersionError(
                    f"window {seg.name!r}: {exc} (a segment made by another shmwin version: once no process "
                    f"uses it, remove it with `shmwin rm {seg.name}`, and it is made again at the next open)"
                ) from None
            check_lock_table(seg.mm, lay.locks_off, g.n_locks)
            header.check_key_state(seg.mm, g, lay, meta.hash_key)
            # the claim callback holds nothing of this window: a handle dropped without close()
            # is freed by its reference count (its core's, when the last reference goes, gives
            # the stripe back), not left in a cycle for the GC, holding a stripe and a mapping
            # meanwhile (red team rtwin: 64 of 64 stripes held after 1,000 handles opened and
            # dropped with the GC off)
            core = native.open_core(
                seg.mm, seg.name, clock=opts.clock, lock_timeout=opts.lock_timeout, on_full=opts.on_full,
                claim=current_process, fd=seg.fd, role=g.role,
            )  # fmt: skip
        except BaseException:
            seg.close()
            raise
        # which file: a limiter's live move replaces the name's (live.py)
        self._ino = os.fstat(seg.fd).st_ino if seg.fd >= 0 else 0
        seg.release_fd()  # the core keeps its own (a keyed table grows through it)
        self._g, self._lay, self.meta = g, lay, meta
        self.name = seg.name
        self._core = core
        self._clock: Callable[[], int] = checked_clock(opts.clock) if opts.clock else host_clock()
        # every view below holds an export of the mmap (numpy arrays through ``_raw``; a plain
        # ``np.ndarray(buffer=mm)`` would not): a reader in another thread still using one keeps
        # the mapping alive, and close() then leaves the unmapping to the GC
        self._buf = memoryview(seg.mm)
        self._q = self._buf.cast("q")
        self._stripes = StripeTable(core)
        self._keys: KeyTable | None = None
        if g.keyed:
            self._keys = KeyTable(self._buf, self._q, g, lay, core, meta.hash_key)
        if isinstance(core, _core.WindowCore):  # a window of buckets (the role types have no add)
            self.add = core.add  # type: ignore[method-assign]
            self.add_and_total = core.add_and_total  # type: ignore[method-assign]
        else:
            self.add = self._add_refused  # type: ignore[method-assign]
            self.add_and_total = self._add_refused  # type: ignore[method-assign,assignment]
        self._closed = False

    # numpy's views, built at the first read: a process that only adds or hits (most of them)
    # never imports numpy (0.09 CPU-s) nor builds views it would not read; never after close()
    @cached_property
    def _raw(self) -> npt.NDArray[np.uint8]:
        import numpy as np

        self._check_open()
        return np.frombuffer(self._seg.mm, np.uint8)

    @cached_property
    def _rows(self) -> Rows:
        from .rows import Rows

        return Rows(self._raw, self._g, self._lay)

    # -- what the contract asks ---------------------------------------------------

    @property
    def url(self) -> str:
        return ""  # shared memory: no URL

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def nbytes(self) -> int:
        """Bytes of /dev/shm the segment holds (reserved). A keyed segment is sparse: it is
        sized for its capacity, but only the keys in use hold memory."""
        if not self._g.keyed:
            return self._lay.total_bytes
        self._check_open()
        try:
            return os.stat(path_of(self.name)).st_blocks * 512
        except OSError:  # unlinked: what its rows alone hold
            return self._lay.first_bytes + self._keyed().rows_top() * self._lay.row_bytes

    @property
    def closed(self) -> bool:
        return self._closed

    # -- writing (each call is one native, uninterruptible section) ---------------

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        """The instance's ``add`` is the native core's; this stands in only once closed."""
        raise WindowClosedError(f"window {self.name!r} is closed")

    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number:
        """The instance's is the native core's; this stands in only once closed."""
        raise WindowClosedError(f"window {self.name!r} is closed")

    def _add_refused(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        if self._g.role == "concurrency":
            raise ShmwinError(f"{self.name!r} holds a Concurrency's holders: use shmwin.Concurrency")
        if self._g.role == "distribution":
            raise ShmwinError(f"{self.name!r} holds a Distribution's bins: record with shmwin.Distribution")
        if self._g.role == "counter-cache":
            raise ShmwinError(f"{self.name!r} holds Django's counters: write through ShmwinCounterCache")
        if self._g.role in COUNTER_ROLES:
            raise ShmwinError(
                f"{self.name!r} holds limits' {self._g.role} state, written only through shm:// "
                "(shmwin.integrations.limits): a Window may only read it"
            )
        raise ShmwinError(
            f"{self.name!r} is a {self._g.kind}: write to it through its {self._g.kind.title()}, "
            "a Window may only read it"
        )

    def add_batch(self, items: Sequence[tuple[int, int, Number]], field: str, key: Key | None) -> None:
        self._check_open()
        if not isinstance(self._core, _core.WindowCore):
            self._add_refused()  # raises: a limiter's or a role's segment
            return
        self._core.add_batch(items, field, key)

    # -- stripes ------------------------------------------------------------------

    def reclaim(self) -> int:
        """Free the stripes of processes that have died; returns how many."""
        self._check_open()
        return self._stripes.reclaim() if self._g.mode == "striped" else 0

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed stripe (for inspection)."""
        self._check_open()
        return self._stripes.owners() if self._g.mode == "striped" else []

    # -- keys -----------------------------------------------------------------------

    def full_count(self) -> int:
        return self._keyed().full_count() if self._g.keyed else 0

    def keys(self) -> list[Key]:
        keys = self._keyed()
        now_ns = self._clock()
        return [key for slot, key, _ in keys.entries() if not keys.is_idle(slot, now_ns)]

    def top(self, n: int, value_index: int, ring_index: int, k: int) -> list[tuple[Key, Number]]:
        keys = self._keyed()
        per_row, _ = self._live(value_index, ring_index, k, None, per_row=True)
        import numpy as np

        order = np.argsort(per_row, kind="stable")[::-1]
        out: list[tuple[Key, Number]] = []
        for slot in order[: max(n, 0) * 2]:
            if per_row[slot] == 0 or len(out) == n:
                break
            entry = keys.entry(int(slot))
            if entry is not None:
                out.append((entry, self._number(per_row[slot])))
        return out

    def clear(self, key: Key) -> None:
        self._keyed()
        self._core.clear(key)

    def _key_states(self, words: int) -> list[tuple[Key, tuple[int, ...]]]:
        """``(key, its first ``words`` state words)`` of every live key of a counter role's
        segment (``format.FIXED_STATE``, ``SLIDING_STATE``): lock-free, each row's words
        kept only if its generation is still the one its key was read with (a row given to
        another key meanwhile is left out: never one key's name with another's state)."""
        keys = self._keyed()
        if not 0 < words <= self._lay.rings_bytes // layout.WORD_BYTES:
            raise ValueError(f"a row of {self.name!r} holds no {words} state words")
        now_ns, first = self._clock(), self._lay.ring_words[0]
        out: list[tuple[Key, tuple[int, ...]]] = []
        for row, key, _, generation in keys.entries_with_generation():
            if keys.is_idle(row, now_ns):
                continue
            at = (self._lay.rows_off + row * self._lay.row_bytes) // layout.WORD_BYTES + first
            state = tuple(int(x) for x in self._q[at : at + words])
            if keys.generation(row) == generation:
                out.append((key, state))
        return out

    def _keyed(self) -> KeyTable:
        self._check_open()
        if self._keys is None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with keyed=True)")
        return self._keys

    # -- reading --------------------------------------------------------------------

    def _ring(self, ring_index: int) -> RingView:
        """Ring ``ring_index``'s views; a counter role's rows hold state, no ring to read."""
        if self._g.role == "concurrency":
            raise ShmwinError(f"{self.name!r} holds a Concurrency's holders, not buckets: read them with "
                              "shmwin.Concurrency.count or `shmwin show`")
        if self._g.role == "distribution":
            raise ShmwinError(f"{self.name!r} holds a Distribution's bins: read it with shmwin.Distribution")
        if self._g.role == "counter-cache":
            raise ShmwinError(f"{self.name!r} holds Django's counters, not buckets: read them with "
                              "ShmwinCounterCache or `shmwin show`")
        if self._g.role in COUNTER_ROLES:
            raise ShmwinError(
                f"{self.name!r} holds limits' {self._g.role} state, not buckets: read it through "
                "shm:// (shmwin.integrations.limits) or `shmwin show`"
            )
        return self._rows.rings[ring_index]

    def read(
        self, value_index: int | None, ring_index: int, k: int, key: Key | None, ordered: bool = True
    ) -> Reading:
        self._check_open()
        r = self._ring(ring_index)
        if ordered and r.log:
            raise NotSupportedError(
                f"window {self.name!r} keeps hit times (exact), not buckets: it has totals, not a series"
            )
        per_slot, now_ns = self._live(value_index, ring_index, k, key)
        if not ordered:  # a sum: every slot, those outside the last k are 0
            return Reading(per_slot, now_ns)
        return Reading(per_slot[slots_oldest_first(now_ns // r.bucket_ns, r.n_buckets, k)], now_ns)

    def log_entries(self, ring_index: int, key: Key) -> tuple[list[tuple[int, int]], int]:
        """An exact limiter's log ring for ``key``: its entries counting now, as (time ns,
        hits), and now (this window's clock); lock-free, generation-checked like every read."""
        self._check_open()
        r = self._ring(ring_index)
        if not r.log:
            raise ValueError(f"ring {ring_index} of window {self.name!r} keeps buckets, not hit times")
        for _ in range(100):
            now_ns = self._clock()
            rows, generation = self._rows_for(key)
            if rows.start == rows.stop:
                return [], now_ns
            times, hits = r.epochs[rows.start].tolist(), r.values[rows.start, :, 0].tolist()
            if generation is None or self._keys is None or self._keys.generation(rows.start) == generation:
                live = [
                    (t, h) for t, h in zip(times, hits, strict=True) if h > 0 and t >= now_ns - r.bucket_ns
                ]
                return live, now_ns
        raise ShmwinError(f"key {key!r} kept moving while it was read")

    def last_write_ns(self) -> int | None:
        """When this window was last written (monotonic ns), or None if never. Never earlier
        than the newest write: for unkeyed windows it is the *end* of the newest bucket, so
        an idle time measured from it is never overstated (what makes ``gc`` safe)."""
        self._check_open()
        if self._keys is not None:
            return max((last for _, _, last in self._keys.entries() if last > 0), default=0) or None
        newest = self._rows.newest_epoch(slice(0, self._rows_in_use()))
        return None if newest < 0 else (newest + 1) * self._rows.rings[0].bucket_ns

    def _live(
        self, value_index: int | None, ring_index: int, k: int, key: Key | None, per_row: bool = False
    ) -> tuple[Any, int]:
        """Live values summed over rows (per slot), or over slots (per row); lock-free. A
        key's generation is checked after the read: if it moved, the read is done again."""
        self._check_open()
        r = self._ring(ring_index)
        for _ in range(100):
            now_ns = self._clock()
            rows, generation = self._rows_for(key)
            values = self._rows.live(r, k, now_ns, rows, value_index, per_row)
            if generation is None or self._keys is None or self._keys.generation(rows.start) == generation:
                return values, now_ns
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
        """Rows readers sum: all of them. The stored ``rows_in_use`` word is outside the
        header's checksum, and a lowered one would silently under-count; rows never claimed
        hold only empty buckets, so summing them costs a little and changes nothing."""
        return self._lay.n_rows

    def _number(self, x: Any) -> Number:
        return int64_total(x, f"a total of window {self.name!r}") if self._g.dtype == "int64" else float(x)

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
            del self._keys, self._stripes, self._q, self._buf
            for view in ("_rows", "_raw"):  # built at a first read, if one came
                self.__dict__.pop(view, None)
            with suppress(BufferError):
                self._seg.close()

    def unlink(self) -> bool:
        """Remove the window from the host (idempotent), in the namespace it was opened in.
        Attached processes keep their mapping until they close; new attaches fail."""
        return self._seg.unlink()

    def _discard(self) -> None:
        """Close, and remove the segment if this open created it: what a constructor of several
        segments does with those it made when a later one fails (all or none)."""
        self.close()
        self._seg.remove_made()

    def _check_open(self) -> None:
        if self._closed:
            raise WindowClosedError(f"window {self.name!r} is closed")

    # No __del__: a handle dropped without close() holds nothing its reference count does not
    # free -- its core gives the stripe back and unmaps when the last reference to it goes, so a
    # bound ``w.add`` kept alone keeps working, as a bound method would.

    def __repr__(self) -> str:
        state = "closed" if getattr(self, "_closed", True) else str(self._g)
        return f"<shmwin.Window {getattr(self, 'name', '?')!r} {state}>"


# -- helpers ----------------------------------------------------------------------------


def hash_key_of(given: object) -> bytes | None:
    """The ``hash_key`` option, checked: 16 bytes, not all zero (None: a random one). A limits
    storage gives its fixed windows one key (integrations/limits_segments.py), so that summing
    a key over them hashes it once; anyone else gets a key of the segment's own."""
    if given is None:
        return None
    if not isinstance(given, bytes) or len(given) != 16 or not any(given):
        raise ValueError(f"hash_key must be 16 bytes, not all zero, not {type(given).__name__} {given!r:.60}")
    return given


def _create(name: str, g: Geometry, perm: int, clock: Clock | None, hash_key: bytes | None = None) -> Segment:
    """A new segment of geometry ``g``: a keyed one is sized for its capacity but reserves
    only its header, locks and first index (rows are reserved as keys come). The header
    says which clock its writers read (``clock.clock_kind``, default "monotonic")."""
    lay = Layout.plan(g)
    clock_kind = getattr(clock, "clock_kind", "monotonic")
    if clock_kind not in layout.CLOCKS:
        raise ValueError(f"clock_kind must be one of {layout.CLOCKS}, not {clock_kind!r}")
    init = _initialiser(g, clock_kind, hash_key)
    return Segment.create(name, lay.total_bytes, perm, init, reserve=lay.first_bytes)


def _initialiser(
    g: Geometry, clock_kind: str = "monotonic", hash_key: bytes | None = None
) -> Callable[[mmap.mmap], None]:
    """Fill a new segment: header, locks, stripes, empty epochs -- and the magic word last.
    Keyed rows are filled as they are handed out; their table starts empty (all zero). Its
    SipHash key: ``hash_key`` if given (hash_key_of), else 16 random bytes."""

    def init(mm: mmap.mmap) -> None:
        lay = Layout.plan(g)
        # int(): a time-mocking library may have patched the clocks to return floats
        meta = Meta(
            os.getpid(), int(time.time_ns()), host_monotonic_ns(), _boot_id(), hash_key or os.urandom(16),
            clock_kind,
        )
        mm[: layout.HEADER_BYTES] = header.pack_header(g, lay, meta)
        mm[layout.ROWS_IN_USE_OFF : layout.ROWS_IN_USE_OFF + _W] = (1).to_bytes(_W, "little")
        init_locks(mm, lay.locks_off, g.n_locks)
        if g.keyed and g.n_stripes:  # a concurrency's processes: one liveness mutex each
            init_stripes(mm, lay.stripes_off, g.n_stripes + 1)
        if not g.keyed:
            init_stripes(mm, lay.stripes_off, g.n_stripes + 1)
            _fill_rings(mm, lay, layout.empty_rings(g, lay))
        mm[0:_W] = layout.MAGIC

    return init


def _fill_rings(mm: mmap.mmap, lay: Layout, empty: bytes) -> None:
    """Every row's rings (the bytes after its key header) set to ``empty``: a slice a row, so
    that creating a window loads no numpy (65 rows by default: microseconds, once)."""
    first = lay.rows_off + lay.ring_words[0] * _W
    for at in range(first, first + lay.n_rows * lay.row_bytes, lay.row_bytes):
        mm[at : at + len(empty)] = empty


def _ready(mm: mmap.mmap) -> bool:
    """Is the magic word written? (Junk there is caught by header validation.)"""
    return len(mm) < _W or mm[0:_W] != b"\0" * _W


def _boot_id() -> bytes:
    import uuid  # here: only a segment's creation asks, and uuid (with platform) costs every process 2 ms

    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return uuid.UUID(f.read().strip()).bytes
    except (OSError, ValueError):
        return b"\0" * 16
