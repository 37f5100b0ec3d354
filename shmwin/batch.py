"""``Window.add_many``'s arithmetic: check a numpy batch, and sum it by bucket of every ring.

Pure: it takes the geometry and ``now_ns`` and returns what a backend writes, either one
exact sum (no stamps) or ``(ring index, epoch, sum)`` items. Sums are exact: int64 sums
that could pass 2**63 are done in Python ints, so the writer raises OverflowError rather
than storing a wrapped value.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .geometry import Geometry

Number = int | float


def values_of(values: npt.ArrayLike, dtype: str) -> npt.NDArray[Any]:
    """The batch as a flat array; TypeError/ValueError for what the window cannot add."""
    batch = np.asarray(values)
    if batch.ndim != 1:
        batch = batch.reshape(-1)
    if dtype == "int64" and batch.size and batch.dtype.kind not in "iub":
        raise TypeError(f"add_many() takes integers for an int64 window, not {batch.dtype}")
    if batch.dtype.kind not in "iubf":
        raise TypeError(f"add_many() takes numbers, not {batch.dtype}")
    if batch.dtype.kind == "f" and batch.size and not np.isfinite(batch).all():
        raise ValueError("add_many() takes finite numbers (no NaN or infinity)")
    return batch


def stamps_of(at: npt.ArrayLike, batch: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
    stamps = np.asarray(at)
    if stamps.shape != batch.shape or (stamps.size and stamps.dtype.kind not in "iu"):
        raise ValueError("at= must be integer monotonic ns timestamps, one per value")
    return stamps.astype(np.int64, copy=False)


def exact_sum(batch: npt.NDArray[Any], dtype: str) -> Number:
    """The batch's sum, never wrapped: int64 sums that could pass 2**63 are done in Python."""
    if dtype == "int64" and batch.size and float(np.abs(batch).max()) * batch.size >= 2**63:
        return sum(int(v) for v in batch.tolist())
    return scalar(batch.sum(), dtype)


def items_by_bucket(
    g: Geometry, now_ns: int, batch: npt.NDArray[Any], stamps: npt.NDArray[np.int64]
) -> list[tuple[int, int, Number]]:
    """Per ring, the batch summed by bucket: ``(ring, epoch, sum)``; a stamp in the future or
    older than the span is a ValueError, before anything is written."""
    oldest_ns = max(now_ns - g.span_ns, -1)  # a monotonic clock never reads below 0
    if stamps.size and (stamps.max() > now_ns or stamps.min() <= oldest_ns):
        raise ValueError("at= holds timestamps in the future, or older than the window's span")
    exact_in_float = g.dtype == "float64" or (
        batch.size == 0 or float(np.abs(batch).max()) * batch.size < 2**53
    )
    items = []
    for index, r in enumerate(g.rings):
        now_epoch = now_ns // r.bucket_ns
        ages = now_epoch - stamps // r.bucket_ns  # 0 = the current bucket; >= n_buckets: gone
        if exact_in_float:
            sums = np.bincount(ages, weights=batch, minlength=r.n_buckets)[: r.n_buckets]
        else:  # Python ints: a sum past int64 is then an OverflowError in the core, not a wrap
            inside = ages < r.n_buckets
            sums = np.zeros(r.n_buckets, object)
            np.add.at(sums, ages[inside], batch[inside].astype(object))
        for age in np.flatnonzero(sums):
            items.append((index, now_epoch - int(age), scalar(sums[age], g.dtype)))
    return items


def scalar(x: Any, dtype: str) -> Number:
    return int(x) if dtype == "int64" else float(x)
