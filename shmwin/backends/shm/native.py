"""The bridge from the layout table to the native core: one ``_core.Core`` per mapped segment.

Every write to a segment is a method of the Core built here (see ``_core.c``); the
offsets it works with all come from :class:`~shmwin.backends.shm.layout.Layout`, passed in once.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable

import numpy as np

from ... import _core, geometry, ring
from ...clock import Clock
from ...errors import (
    CorruptSegmentError,
    KeyTableFullError,
    LockTimeoutError,
    OutOfSpaceError,
    UnknownFieldError,
    WindowClosedError,
)
from . import layout

ON_FULL = ("raise", "allow", "deny")

_core.set_errors(
    WindowClosedError,
    LockTimeoutError,
    CorruptSegmentError,
    KeyTableFullError,
    UnknownFieldError,
    OutOfSpaceError,
)


def open_core(
    mm: mmap.mmap,
    name: str,
    g: geometry.Geometry,
    lay: layout.Layout,
    meta: geometry.Meta,
    *,
    clock: Clock | None,
    lock_timeout: float,
    on_full: str,
    claim: Callable[[], tuple[int, int]],
    fd: int = -1,
) -> _core.Core:
    """The native writer of a mapped, validated segment. Each call reads the clock once,
    before taking any lock: CLOCK_MONOTONIC natively (``clock=None``), or the injected one.
    A keyed segment's core keeps its own duplicate of ``fd``: it reserves memory as keys come."""
    return _core.Core(
        mm,
        name=name,
        limiter=g.kind == "limiter",
        floats=g.dtype == "float64",
        striped=g.mode == "striped",
        keyed=g.keyed,
        n_fields=len(g.fields),
        slot_words=lay.slot_words,
        head_slots=lay.head_slots,
        rings=tuple(
            (words, r.n_buckets, r.bucket_ns, r.limit, r.log)
            for words, r in zip(lay.ring_words, g.rings, strict=True)
        ),
        locks_off=lay.locks_off,
        n_locks=g.n_locks,
        n_key_locks=g.n_key_locks,
        stripes_off=lay.stripes_off,
        keys_off=lay.keys_off,
        rows_off=lay.rows_off,
        row_bytes=lay.row_bytes,
        n_rows=lay.n_rows,
        key_slots=g.key_slots,
        rings_off=lay.ring_words[0] * layout.WORD_BYTES,
        idle_ns=g.idle_ns,
        hash_key=meta.hash_key,
        empty_row=empty_row(g, lay),
        timeout_ns=round(lock_timeout * 1e9),
        on_full=ON_FULL.index(on_full),
        clock=clock,
        fields={f: i + 1 for i, f in enumerate(g.fields)},
        claim=claim,
        index_levels=g.index_levels,
        fd=fd,
    )


def empty_row(g: geometry.Geometry, lay: layout.Layout) -> bytes:
    """A row's rings as they are when empty: every epoch EMPTY, every value zero."""
    words = np.zeros(lay.rings_bytes // layout.WORD_BYTES, np.int64)
    n_slots = sum(r.n_buckets + lay.head_slots for r in g.rings)
    words[: n_slots * lay.slot_words : lay.slot_words] = ring.EMPTY_EPOCH
    return words.tobytes()
