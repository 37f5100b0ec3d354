"""Role "distribution": a window whose slots are ``format.DIST_SLOT`` (epoch, count, sum, min,
max) and whose rows end with every bucket's bins (``core/distribution.c`` writes them). Here
the read side: numpy views of those words over every row, and a lock-free merge of the live
buckets of one ring -- the bins added, counts and sums added, min and max taken.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....errors import ShmwinError
from ....geometry import BIN_OVER, BIN_UNDER, BIN_ZERO, FIRST_LOG_BIN, Sketch, expected_epochs
from ...contract import Key
from .. import format as _words
from .base import RoleEngine

if TYPE_CHECKING:  # numpy is imported where a distribution's views are built or read, not by import shmwin
    import numpy as np
    import numpy.typing as npt

_SLOT_WORDS = _words.DIST_SLOT_BYTES // _words.WORD_BYTES


@dataclass(frozen=True)
class Merged:
    """The live buckets of one ring, merged: what every reading of a distribution starts from."""

    count: int
    sum: float
    min: float  # +inf when count is 0
    max: float  # -inf when count is 0
    bins: npt.NDArray[np.int64]
    now_ns: int


@dataclass(frozen=True)
class _RingWords:
    slots: npt.NDArray[np.int64]  # (rows, buckets, 5): epoch, count, sum, min, max (the last three: bits)
    bins: npt.NDArray[np.uint32]  # (rows, buckets, bins)
    bucket_ns: int
    n_buckets: int


class DistributionEngine(RoleEngine):
    role = "distribution"

    def __init__(self, window: Any):
        import numpy as np
        super().__init__(window)
        w = self.window
        g, lay = w.geometry, w._lay
        sketch = g.sketch
        assert sketch is not None  # the geometry's check: a distribution has one
        self.sketch: Sketch = sketch
        heap = w._raw[lay.rows_off : lay.rows_off + lay.n_rows * lay.row_bytes]
        rows = heap.reshape(lay.n_rows, lay.row_bytes)
        self._rings = []
        at = lay.bins_word * _words.WORD_BYTES
        for i, r in enumerate(g.rings):
            first = lay.bucket_words[i] * _words.WORD_BYTES
            slots = rows[:, first : first + r.n_buckets * _words.DIST_SLOT_BYTES].view(np.int64)
            bins = rows[:, at : at + r.n_buckets * lay.bin_stride].view(np.uint32)
            at += r.n_buckets * lay.bin_stride
            self._rings.append(_RingWords(
                slots.reshape(lay.n_rows, r.n_buckets, _SLOT_WORDS),
                bins.reshape(lay.n_rows, r.n_buckets, -1)[:, :, : sketch.n_bins], r.bucket_ns, r.n_buckets,
            ))  # fmt: skip

    def drop_views(self) -> None:
        """Let go of this engine's views of the mapping (before the window closes: an export
        left would keep the mapping, and the segment's memory, until the GC came by)."""
        self._rings = []

    @property
    def native_record(self) -> Callable[..., None]:
        """The core's ``record(value, /, key=None)`` itself: the front binds it, so that a
        record is one native call with no Python frame in between."""
        return self._core.record  # type: ignore[attr-defined,no-any-return]

    def record_many(
        self, values: npt.NDArray[np.float64], at: npt.NDArray[np.int64] | None, key: Key | None
    ) -> None:
        """A checked batch in one native call (``core/distribution.c``, section "record_many")."""
        self._core.record_many(values, at, key)  # type: ignore[attr-defined]

    def merged(self, ring_index: int, k: int, key: Key | None, completed: bool = False) -> Merged:
        """The last ``k`` buckets of ring ``ring_index`` for ``key`` (keyed, None: every key),
        merged; lock-free. ``completed``: the ``k`` buckets before the current, partial one.
        A key whose row moved while read is read again."""
        w = self.window
        for _ in range(100):
            w._check_open()
            r = self._rings[ring_index]
            now_ns = int(w._clock())
            rows, generation = w._rows_for(key)
            at_ns = now_ns - r.bucket_ns if completed else now_ns
            merged = _merge(r, rows, min(k, r.n_buckets - 1) if completed else k, at_ns)
            if generation is None or w._keys is None or w._keys.generation(rows.start) == generation:
                return merged
        raise ShmwinError(f"key {key!r} kept moving while it was read")

    def values(self, now_ns: int) -> list[tuple[Key | None, Any]]:  # type: ignore[override]
        """``(key, merged over the longest ring)`` of every key holding values (the tools');
        an unkeyed distribution's one row: key None."""
        spans = [r.n_buckets * r.bucket_ns for r in self._rings]
        longest = spans.index(max(spans))
        out: list[tuple[Key | None, Any]] = []
        keys: list[Key | None] = [*self.all_keys()] if self.window.geometry.keyed else [None]
        for key in keys:
            m = self.merged(longest, self._rings[longest].n_buckets, key)
            if m.count:
                out.append((key, m))
        return out


TOOL_QUANTILES = (0.5, 0.9, 0.99)


def view(engine: DistributionEngine, labels: list[str], top: int, key: Key | None = None) -> dict[str, Any]:
    """What the tools show (``shmwin show/watch``, the Prometheus export): per resolution its
    count, sum, min, max and p50/p90/p99 over the whole span (``key``: that key's; keyed, None:
    every key merged), and for a keyed distribution its ``top`` keys by count over the longest
    resolution, ``[key, count, p50, p99]``."""
    rows = []
    for i, (label, r) in enumerate(zip(labels, engine._rings, strict=True)):
        m = engine.merged(i, r.n_buckets, key)
        qs = quantiles_of(engine.sketch, m.bins, TOOL_QUANTILES, m.min, m.max)
        lo, hi = (m.min, m.max) if m.count else (None, None)
        shown = {
            f"p{round(q * 100)}": None if m.count == 0 else v for q, v in zip(TOOL_QUANTILES, qs, strict=True)
        }
        rows.append({"resolution": label, "count": m.count, "sum": m.sum, "min": lo, "max": hi, **shown})
    out: dict[str, Any] = {"resolutions": rows, "relative_error": engine.sketch.relative_error}
    if engine.window.geometry.keyed and key is None:
        spans = [r.n_buckets * r.bucket_ns for r in engine._rings]
        longest = spans.index(max(spans))
        found: list[tuple[Key, int, float, float]] = []
        for k in engine.all_keys():
            m = engine.merged(longest, engine._rings[longest].n_buckets, k)
            if m.count:
                p50, p99 = quantiles_of(engine.sketch, m.bins, (0.5, 0.99), m.min, m.max)
                found.append((k, m.count, p50, p99))
        found.sort(key=lambda row: -row[1])
        out["keys"], out["top"] = len(found), [list(row) for row in found[:top]]
    return out


def _merge(r: _RingWords, rows: slice, k: int, now_ns: int) -> Merged:
    """Merge the live slots of ``rows``. Liveness is read before and after the words are
    copied: a slot recycled meanwhile (its writer stamped a new epoch on it) is left out, and
    an epoch never comes back, so a slot live at both reads was never recycled in between."""
    import numpy as np
    expected = expected_epochs(now_ns // r.bucket_ns, r.n_buckets, k)
    live = np.nonzero(r.slots[rows, :, 0] == expected)
    words = r.slots[rows][live]  # copies, of the live slots only
    bins = r.bins[rows][live]
    kept = (r.slots[rows, :, 0] == expected)[live]
    words, bins = words[kept], bins[kept]
    floats = words[:, 2:5].view(np.float64)
    return Merged(
        int(words[:, 1].sum()), float(floats[:, 0].sum()), float(floats[:, 1].min(initial=np.inf)),
        float(floats[:, 2].max(initial=-np.inf)), bins.astype(np.int64).sum(axis=0), now_ns,
    )  # fmt: skip


def quantiles_of(
    sketch: Sketch, bins: npt.NDArray[np.int64], qs: tuple[float, ...], lo: float, hi: float
) -> list[float]:
    """The quantiles ``qs`` of merged ``bins``, each clamped to the exact ``[lo, hi]``.

    The rank of q among n values is ``floor(q * (n - 1))`` (0-based: numpy's method="lower"),
    counted over the bins' own total, which a write cut by a kill may leave one ahead of the
    count. Rank 0 is the exact minimum and rank n - 1 the exact maximum; a rank in the UNDER
    (OVER) bin answers the minimum (maximum). NaN when the bins are empty."""
    import numpy as np
    total = int(bins.sum())
    if total == 0:
        return [math.nan for _ in qs]
    order = value_order(sketch)
    cum = np.cumsum(bins[order])
    reps = sketch.values()[order]
    out = []
    for q in qs:
        rank = math.floor(q * (total - 1))
        at = int(np.searchsorted(cum, rank, side="right"))
        b = int(order[at])
        if rank == 0 or b == BIN_UNDER:
            v = lo
        elif rank == total - 1 or b == BIN_OVER:
            v = hi
        else:
            v = float(reps[at])
        out.append(min(max(v, lo), hi))
    return out


def value_order(sketch: Sketch) -> npt.NDArray[np.intp]:
    """The bins in the order of their values: ZERO, UNDER, the log bins, OVER."""
    import numpy as np
    return np.array([BIN_ZERO, BIN_UNDER, *range(FIRST_LOG_BIN, sketch.n_bins), BIN_OVER], dtype=np.intp)


def check_quantile(q: object) -> float:
    """A quantile: a real number in [0, 1] (numpy's too), as a float; NaN and bools refused."""
    import numpy as np
    if isinstance(q, bool | np.bool_) or not isinstance(q, numbers.Real) or not 0 <= float(q) <= 1:
        raise ValueError(f"a quantile is a number in [0, 1], not {q!r}")
    return float(q)
