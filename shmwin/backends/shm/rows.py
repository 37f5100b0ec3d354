"""The read side of a segment's rows: numpy views of every ring, and live sums, lock-free.

A row (see the table in ``layout``) holds one ring per resolution or rate; a ring is its
header slot(s), then ``n_buckets`` slots of ``(epoch, value per field)`` -- but a limiter's
compact ring, its header words then ``n_buckets`` counts whose epochs follow from its head. Here each ring
is a :class:`RingView`: strided numpy views of its epochs ``(rows, buckets)`` and values
``(rows, buckets, fields)`` over every row at once, so a read over all stripes or all keys
is a handful of vector operations. Writers are the native core's; nothing here writes.
Which ring a read uses is :func:`shmwin.geometry.pick_ring`'s answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...geometry import EMPTY_EPOCH, Geometry, expected_epochs
from ...policy import exact, may_wrap_where
from . import layout
from .layout import Layout

_W = layout.WORD_BYTES


@dataclass(frozen=True)
class RingView:
    """Ring ``index`` of every row: where its buckets are, how wide, and views of them."""

    index: int
    first_word: int  # word offset of the ring's first bucket slot within a row
    bucket_ns: int
    n_buckets: int
    epochs: npt.NDArray[np.int64]  # (rows, n_buckets); a log ring: each entry's time; compact: heads
    values: npt.NDArray[Any]  # (rows, n_buckets, fields)
    log: bool = False  # entries (time ns, hits), bucket_ns the period: see geometry.Ring
    # a limiter's compact ring: no epoch per count; its (rows, 2) head and zeroed words, from
    # which slot_epochs derives them (``epochs`` is then unused)
    heads: npt.NDArray[np.int64] | None = None

    @property
    def span_ns(self) -> int:
        return self.bucket_ns if self.log else self.bucket_ns * self.n_buckets

    def slot_epochs(self, rows: slice) -> npt.NDArray[np.int64]:
        """The epoch each slot of ``rows`` holds, EMPTY_EPOCH if none: a slot ring's stored
        epochs (a view: read again at each use), or a compact ring's, derived afresh from its
        head and zeroed words -- slot s holds epoch e == s (mod n) in (head - n, head] iff
        e <= zeroed (core/rings.c, "the limiter's compact rings")."""
        if self.heads is None:
            return self.epochs[rows]
        words = np.array(self.heads[rows])  # one read of both words per row
        head, zeroed = words[:, 0:1], words[:, 1:2]
        empty = head == EMPTY_EPOCH
        head = np.where(empty | (head < 0), 0, head)  # junk or none: no epoch >= 0 matches below
        slots = np.arange(self.n_buckets, dtype=np.int64)
        derived = head - (head - slots) % self.n_buckets
        clean = ~empty & (derived <= np.minimum(zeroed, head)) & (derived >= 0)
        return np.where(clean, derived, EMPTY_EPOCH)


class Rows:
    """Every ring of every row of one mapped segment, as numpy views.

    ``raw`` must hold an export of the mapping (``np.frombuffer(mm, np.uint8)``): the views
    keep it, so a reader still holding one keeps the mapping alive after ``close()``.
    """

    def __init__(self, raw: npt.NDArray[np.uint8], g: Geometry, lay: Layout):
        self._g = g
        # a counter role's rows hold per-key state, no bucket: no ring view (its readers are
        # the role's own, which read the state words)
        stateful = g.keyed and (g.role in layout.STATE_BYTES or g.role == "concurrency")
        self.rings = [] if stateful else [_ring_view(raw, g, lay, i) for i in range(len(g.rings))]

    @staticmethod
    def live(
        r: RingView, k: int, now_ns: int, rows: slice, value_index: int | None, per_row: bool
    ) -> npt.NDArray[Any]:
        """Values of the last ``k`` buckets at ``now_ns``, summed over rows (one per slot) or
        over slots (one per row). Liveness is tested before and after the values are read:
        a slot that changed meanwhile was being recycled by its writer and counts as expired.
        int64 sums that could pass int64 come back as Python ints (object), never wrapped.
        A log ring counts its entries of the last period, whatever ``k``."""
        if r.log:
            return Rows._live_log(r, now_ns, rows, value_index, per_row)
        expected = expected_epochs(now_ns // r.bucket_ns, r.n_buckets, k)
        epochs = r.slot_epochs(rows)
        # (fields, rows, slots): numpy's inner loops then run along a row's slots, never over
        # a fields axis of length 1 (which cost 10x)
        values = np.moveaxis(r.values[rows], 2, 0) if value_index is None else r.values[rows, :, value_index]
        axis = -1 if per_row else -2
        wraps = per_row or values.shape[-2] > 1  # one row summed over rows is itself
        for _ in range(4):  # reductions with where=: no temporary as large as the rows
            live = epochs == expected
            if wraps and may_wrap_where(values, live):
                summed = np.where(live, values, 0).astype(object).sum(axis=axis)
            else:
                summed = np.add.reduce(values, axis=axis, where=live)
            if np.array_equal(live, r.slot_epochs(rows) == expected):  # no live slot recycled meanwhile
                return summed.T if value_index is None else summed  # type: ignore[no-any-return]
            epochs = r.slot_epochs(rows)
        return Rows._live_torn(values, r, rows, expected, axis, wraps, value_index is None)

    @staticmethod
    def _live_torn(
        values: npt.NDArray[Any], r: RingView, rows: slice, expected: npt.NDArray[np.int64],
        axis: int, wraps: bool, transpose: bool,
    ) -> npt.NDArray[Any]:
        """As live(), for slots that keep being recycled while read (a writer racing every
        try): read the values once, and count only the slots live before and after."""
        live = r.slot_epochs(rows) == expected
        picked = np.where(live, values, 0)
        picked = np.where(live & (r.slot_epochs(rows) == expected), picked, 0)
        summed = (exact(picked) if wraps else picked).sum(axis=axis)
        return summed.T if transpose else summed  # type: ignore[no-any-return]

    @staticmethod
    def _live_log(
        r: RingView, now_ns: int, rows: slice, value_index: int | None, per_row: bool
    ) -> npt.NDArray[Any]:
        """A log ring's hits per entry (summed over rows) or per row: an entry counts while it
        holds hits and is younger than the period (core/rings.c's log_counts); read twice, as above."""
        times = r.epochs[rows]
        values = r.values[rows] if value_index is None else r.values[rows, :, value_index : value_index + 1]
        counts = (values[:, :, 0] > 0) & (times >= now_ns - r.bucket_ns)
        picked = np.where(counts[:, :, None], values, 0)
        still = (values[:, :, 0] > 0) & (times >= now_ns - r.bucket_ns)
        if not np.array_equal(counts, still):
            picked = np.where((counts & still)[:, :, None], picked, 0)
        if value_index is not None:
            picked = picked[:, :, 0]
        picked = exact(picked)
        return picked.sum(axis=1 if per_row else 0)  # type: ignore[no-any-return]

    def newest_epoch(self, rows: slice) -> int:
        """The newest bucket epoch any of ``rows`` holds in the finest ring (-1: none)."""
        epochs = self.rings[0].slot_epochs(rows)
        return int(epochs.max()) if epochs.size else -1


def _ring_view(raw: npt.NDArray[np.uint8], g: Geometry, lay: Layout, index: int) -> RingView:
    slot_bytes = lay.slot_words * _W
    first = lay.bucket_words[index]
    r = g.rings[index]
    if lay.compact(index):  # a header (head, total, zeroed, tail), then the counts
        width, header = lay.count_bytes[index], lay.rows_off + lay.ring_words[index] * _W
        heads = np.ndarray(
            (lay.n_rows, 2), np.int64, raw, header + layout.LIMITER_RING_HEAD * _W,
            (lay.row_bytes, (layout.LIMITER_RING_ZEROED - layout.LIMITER_RING_HEAD) * _W),
        )  # fmt: skip
        counts = np.ndarray(
            (lay.n_rows, r.n_buckets, 1), np.dtype(f"<i{width}"), raw, lay.rows_off + first * _W,
            (lay.row_bytes, width, width),
        )  # fmt: skip
        return RingView(index, first, r.bucket_ns, r.n_buckets, heads[:, 0], counts, False, heads)
    start = lay.rows_off + first * _W  # a slot: its epoch word (SLOT_EPOCH), then its values
    epochs = np.ndarray(
        (lay.n_rows, r.n_buckets), np.int64, raw, start + layout.SLOT_EPOCH * _W, (lay.row_bytes, slot_bytes)
    )  # fmt: skip
    values = np.ndarray(
        (lay.n_rows, r.n_buckets, len(g.fields)), np.dtype(g.dtype), raw, start + layout.SLOT_VALUES * _W,
        (lay.row_bytes, slot_bytes, _W),
    )  # fmt: skip
    return RingView(index, first, r.bucket_ns, r.n_buckets, epochs, values, r.log)
