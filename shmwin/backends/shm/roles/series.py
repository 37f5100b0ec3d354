"""Role "series": one app's prometheus_client values in one segment (core/series.c).

The segment ``/dev/shm/shmwin.<app>.metrics`` (format.SERIES_HDR and its records) holds:

    offset        size                    what
    0             4096                    header: magic, version, role 15, geometry, directory state
    locks_at      64                      the directory's robust lock (SERIES_LOCK_DIR)
    slots_at      n_slots x 128           process slots (STRIPE records): a liveness mutex each
    index_at      (2 x index_slots - 64) x 8   hash index, in levels of 64 << k words (hash32 << 32 |
                                          entry word + 1; 0 free), the next built when one is half full
    entries_at    entries_bytes           entries, append-only: SERIES_ENTRY + identity bytes
    cells_at      max_series x 32         cells: SERIES_CELL (value, stamp, seq, entry)

Only the header and the slots are reserved at creation; the rest is sparse, and each insert
reserves (``posix_fallocate``) the pages it is about to touch, so a full ``/dev/shm`` is an
:class:`~shmwin.errors.OutOfSpaceError` at a metric's creation, never a SIGBUS at a write.

A :class:`SeriesStore` is the one caller of the native SeriesMap; the Prometheus integration
(``shmwin.integrations.prometheus_shm``) holds a store and never the core.
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import struct
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from .... import _core
from ....errors import (
    CorruptSegmentError,
    IncompatibleVersionError,
    KeyTableFullError,
    OutOfSpaceError,
    SeriesIdentityError,
    SeriesTableFullError,
    WindowExistsError,
    WindowNotFoundError,
)
from ....geometry import MAX_STRIPES
from .. import format as F
from ..segment import DEFAULT_PERM, Segment, path_of
from ..segment import unlink as unlink_segment

SUFFIX = ".metrics"
DEFAULT_MAX_SERIES = 100_000
DEFAULT_SLOTS = 1024  # live processes at once (format.MAX_STRIPES)
ENTRY_ROOM = 256  # bytes of directory per series, on average: an entry record and its identity
RESERVE_STEP = 1 << 14  # reserve this far ahead as the directory and the cells grow
DEFAULT_TIMEOUT_NS = 5_000_000_000

SHARED, LIFETIME, META = F.SERIES_SHARED, F.SERIES_LIFETIME, F.SERIES_META
Record = tuple[int, int, int, int, int, int, int]  # (offset, kind, cell, slot, lifetime, pid, flags)


def segment_name(app: str) -> str:
    return app + SUFFIX


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def plan(max_series: int, slots: int) -> dict[str, int]:
    """Every offset and size of a series segment of this capacity."""
    if not 1 <= max_series <= F.SERIES_MAX:
        raise ValueError(f"max_series must be 1..{F.SERIES_MAX}, not {max_series!r}")
    if not 1 <= slots <= MAX_STRIPES:
        raise ValueError(f"slots must be 1..{MAX_STRIPES}, not {slots!r}")
    index_slots = max(F.SERIES_INDEX_MIN, 1 << (2 * max_series - 1).bit_length())
    index_words = 2 * index_slots - F.SERIES_INDEX_MIN  # every level, each twice the one before
    locks_at = F.SERIES_HDR_BYTES
    slots_at = _align(locks_at + F.LOCK_BYTES, F.STRIPE_ENTRY_BYTES)
    index_at = _align(slots_at + slots * F.STRIPE_ENTRY_BYTES, F.PAGE_BYTES)
    entries_at = _align(index_at + index_words * F.WORD_BYTES, F.PAGE_BYTES)
    entries_bytes = _align(max_series * ENTRY_ROOM + F.SERIES_MAX_KEY + F.SERIES_ENTRY_BYTES, F.PAGE_BYTES)
    cells_at = entries_at + entries_bytes
    total = _align(cells_at + max_series * F.SERIES_CELL_BYTES, F.PAGE_BYTES)
    return {"max_series": max_series, "index_slots": index_slots, "n_slots": slots, "locks_at": locks_at,
            "slots_at": slots_at, "index_at": index_at, "entries_at": entries_at,
            "entries_bytes": entries_bytes, "cells_at": cells_at, "total_bytes": total}  # fmt: skip


def _pack(mm: mmap.mmap, field: str, value: Any) -> None:
    offset = F._at(F.SERIES_HDR, field)
    kind = next(k for n, _, k in F.SERIES_HDR if n == field)
    struct.pack_into("<" + kind, mm, offset, value)


def _word(mm: mmap.mmap, field: str) -> int:
    offset = F._at(F.SERIES_HDR, field)
    kind = next(k for n, _, k in F.SERIES_HDR if n == field)
    return int(struct.unpack_from("<" + kind, mm, offset)[0])


def _initialise(geometry: dict[str, int]) -> Callable[[mmap.mmap], None]:
    def init(mm: mmap.mmap) -> None:
        _pack(mm, "version", F.FORMAT_VERSION)
        _pack(mm, "header_bytes", F.SERIES_HDR_BYTES)
        _pack(mm, "role", F.ROLE_SERIES)
        _pack(mm, "hash_key", os.urandom(16))
        for field, value in geometry.items():
            _pack(mm, field, value)
        _core.init_locks(mm, geometry["locks_at"], 1)
        _core.init_stripes(mm, geometry["slots_at"], geometry["n_slots"])
        mm[: len(F.MAGIC)] = F.MAGIC  # last: attachers wait for it

    return init


def _ready(mm: mmap.mmap) -> bool:
    return len(mm) >= F.SERIES_HDR_BYTES and mm[: len(F.MAGIC)] == F.MAGIC


def _check_header(mm: mmap.mmap, name: str) -> None:
    if _word(mm, "role") != F.ROLE_SERIES:
        raise CorruptSegmentError(f"{name!r} is a shmwin segment but not a metrics (series) segment")
    version = _word(mm, "version")
    if version != F.FORMAT_VERSION:
        raise IncompatibleVersionError(
            f"{name!r}: format version {version}, this shmwin reads {F.FORMAT_VERSION}"
        )
    if _word(mm, "total_bytes") != len(mm):
        raise CorruptSegmentError(f"{name!r}: its header's size is not the file's")


def is_series(mm: mmap.mmap) -> bool:
    """Is this mapped shmwin segment a metrics (series) segment? (For the tools.)"""
    return _ready(mm) and _word(mm, "role") == F.ROLE_SERIES


class SeriesStore:
    """One app's metrics segment, as this process sees it: its directory and its values."""

    def __init__(self, segment: Segment, timeout_ns: int = DEFAULT_TIMEOUT_NS):
        self.segment = segment
        self.name = segment.name
        mm = segment.mm
        _check_header(mm, segment.name)
        self._map = _core.SeriesMap(mm, name=segment.name, timeout_ns=timeout_ns)
        at = F._at(F.SERIES_HDR, "hash_key")
        self._hash_key = bytes(mm[at : at + 16])
        self._entries_at = _word(mm, "entries_at")
        self._cells_at = _word(mm, "cells_at")
        self._reserved = 0  # bytes of the file this process has reserved (a prefix)

    @classmethod
    def open(
        cls, app: str, *, max_series: int | None = None, slots: int | None = None,
        perm: int = DEFAULT_PERM, ready_timeout_s: float = 5.0,
    ) -> SeriesStore:  # fmt: skip
        """Attach the app's metrics segment, or create it (with this capacity: by default
        DEFAULT_MAX_SERIES and DEFAULT_SLOTS) if missing. A capacity asked of a segment that has
        another one is said (a RuntimeWarning): the segment keeps its own until it is reset."""
        name = segment_name(app)
        geometry = plan(max_series or DEFAULT_MAX_SERIES, slots or DEFAULT_SLOTS)
        for _ in range(3):
            try:
                store = cls(Segment.attach(name, ready_timeout_s, _ready, perm=perm))
            except WindowNotFoundError:
                pass
            else:
                store.say_capacity(max_series, slots)
                return store
            try:
                seg = Segment.create(name, geometry["total_bytes"], perm, _initialise(geometry),
                                     reserve=geometry["index_at"])  # fmt: skip
            except WindowExistsError:
                continue  # another process made it first: attach to it
            store = cls(seg)
            store._reserved = geometry["index_at"]
            return store
        raise WindowNotFoundError(f"metrics segment {name!r} kept disappearing while being opened")

    def say_capacity(self, max_series: int | None = None, slots: int | None = None) -> None:
        """A RuntimeWarning if this segment's capacity is not the one asked."""
        held = self.usage()
        asked = {"max_series": max_series, "slots": slots}
        differ = {k: v for k, v in asked.items() if v is not None and v != held[k]}
        if differ:
            import warnings

            kept = ", ".join(f"{k}={held[k]}" for k in differ)
            warnings.warn(f"metrics segment {self.name!r} was made with {kept}, not what was asked "
                          f"({', '.join(f'{k}={v}' for k, v in differ.items())}): it keeps its own until "
                          "it is reset (shp.reset, or the gunicorn hooks' reset_metrics)",
                          RuntimeWarning, stacklevel=4)  # fmt: skip

    @classmethod
    def attach(cls, app: str, *, ready_timeout_s: float = 5.0, perm: int = DEFAULT_PERM) -> SeriesStore:
        """The app's metrics segment, which must exist (a scraper never creates one)."""
        return cls(Segment.attach(segment_name(app), ready_timeout_s, _ready, perm=perm))

    # -- the directory -------------------------------------------------------------------------

    def hash(self, key: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(key, digest_size=8, key=self._hash_key).digest(), "little")

    def find(self, key: bytes) -> Record | None:
        return self._map.find(key, self.hash(key))

    def insert(self, key: bytes, kind: int, lifetime: int = 0, pid: int = 0) -> tuple[Record, bool]:
        """The entry of ``key``, made if missing (this process's lifetime's, for LIFETIME)."""
        if len(key) > F.SERIES_MAX_KEY:
            raise SeriesIdentityError(
                f"a series identity of {len(key)} bytes (metric name, label names and values, help): "
                f"a metrics segment stores at most {F.SERIES_MAX_KEY}"
            )
        found = self._map.find(key, h := self.hash(key))
        if found is not None:
            return found, False
        self._reserve_for(len(key))
        try:
            return self._map.insert(key, h, kind, lifetime, pid)
        except KeyTableFullError as exc:
            raise SeriesTableFullError(str(exc)) from None

    def lifetime(self, pid: int) -> tuple[int, int]:
        """``(slot, lifetime)`` of this process: claimed at its first call after start or fork."""
        try:
            return self._map.lifetime(pid)
        except KeyTableFullError as exc:
            raise SeriesTableFullError(str(exc)) from None

    def _reserve_for(self, key_len: int) -> None:
        """Reserve the pages the next insert may touch: its entry and its cell."""
        mm = self.segment.mm
        entry_end = self._entries_at + _word(mm, "entry_top") + F.SERIES_ENTRY_BYTES + key_len + F.WORD_BYTES
        cell_end = self._cells_at + (_word(mm, "cells_top") + 1) * F.SERIES_CELL_BYTES
        for end in (entry_end, cell_end):
            self._reserve_range(end)

    def _reserve_range(self, end: int) -> None:
        start = end - F.SERIES_MAX_KEY - F.PAGE_BYTES  # the record's pages, whatever was reserved before
        start = max(0, start - start % F.PAGE_BYTES)
        end = min(len(self.segment.mm), _align(end + RESERVE_STEP, F.PAGE_BYTES))
        if self.segment.fd < 0 or end <= start:
            return
        try:
            os.posix_fallocate(self.segment.fd, start, end - start)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise OutOfSpaceError(f"metrics segment {self.name!r}: /dev/shm is full") from None
            raise

    # -- values, scrapes, removal -------------------------------------------------------------

    def value(self, cell: int, rebind: Callable[[Any], tuple[int, int]] | None,
              pid_fn: Callable[[], int] | None, pid: int) -> _core.SeriesValue:  # fmt: skip
        return self._map.value(cell, rebind, pid_fn, pid)

    def entries(self, start: int) -> tuple[int, list[tuple[Record, bytes]]]:
        return self._map.entries(start)

    def read(self, offsets: Sequence[int]) -> list[tuple[float, float, bool, int]]:
        """``(value, stamp, live, pid)`` of the entry at each offset, read now."""
        return self._map.read(offsets)

    def adopt(self, offset: int, lifetime: int, pid: int) -> None:
        """Take over a live-mode gauge entry of this process's slot from a dead lifetime."""
        self._map.adopt(offset, lifetime, pid)

    def drop(self, offset: int) -> None:
        self._map.drop(offset)

    def usage(self) -> dict[str, int]:
        """What the segment holds: series (cells), entry bytes, lifetimes, refused inserts."""
        mm = self.segment.mm
        return {"cells": _word(mm, "cells_top"), "max_series": _word(mm, "max_series"),
                "entry_bytes": _word(mm, "entry_top"), "entries_bytes": _word(mm, "entries_bytes"),
                "lifetimes": _word(mm, "lifetimes"), "full_count": _word(mm, "full_count"),
                "slots": _word(mm, "n_slots")}  # fmt: skip

    @property
    def closed(self) -> bool:
        return bool(self._map.closed)

    def close(self) -> None:
        """Give this process's slot back and unmap (values made from this store then raise)."""
        self._map.close()
        with suppress(BufferError):  # a call of another thread still inside: unmapped at exit
            self.segment.close()

    def unlink(self) -> bool:
        return self.segment.unlink()


def peek(name: str) -> dict[str, int] | None:
    """The usage words of segment ``name`` (its header, read without mapping it) if it is a
    metrics (series) segment, else None: for ``shmwin ls``."""
    try:
        fd = os.open(path_of(name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        head = os.pread(fd, F.SERIES_HDR_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(head) < F.SERIES_HDR_BYTES or head[: len(F.MAGIC)] != F.MAGIC:
        return None
    word = {n: struct.unpack_from("<" + k, head, o)[0] for n, o, k in F.SERIES_HDR
            if k in ("q", "Q", "I")}  # fmt: skip
    if word["role"] != F.ROLE_SERIES:
        return None
    return {"series": word["cells_top"], "max_series": word["max_series"], "lifetimes": word["lifetimes"],
            "full_count": word["full_count"], "slots": word["n_slots"],
            "total_bytes": word["total_bytes"]}  # fmt: skip


def unlink(app: str) -> bool:
    """Remove the app's metrics segment from the host: every count restarts from zero."""
    return unlink_segment(segment_name(app))
