"""The bins of a :class:`~shmwin.Distribution`: DDSketch's log-scaled bins, as pure arithmetic.

A value ``v`` in ``[low, high]`` falls in log bin ``i = floor(log(v / low) / log(gamma))``,
``gamma = (1 + a) / (1 - a)`` for the relative error ``a``. Bin ``i`` holds the values of
``[low * gamma**i, low * gamma**(i + 1))``, and answers with ``low * gamma**i * 2 * gamma /
(gamma + 1)``, which lies within ``a`` (relative) of every one of them. Three more bins count
what the log bins cannot hold, so that nothing recorded is ever dropped or misplaced::

    bin 0      ZERO   v == 0
    bin 1      UNDER  0 < v < low      answered with the exact minimum (a lower bound)
    bin 2      OVER   v > high         answered with the exact maximum (an upper bound)
    bin 3 + i  the log bins, i = 0 .. n_log - 1

Negative values, NaN and infinities are refused before anything is stored (ValueError).
The native core (``core/distribution.c``) places values by the same formula; everything here
is read-side arithmetic on plain numbers and arrays, with no shared memory (tests hold both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

BIN_ZERO, BIN_UNDER, BIN_OVER, FIRST_LOG_BIN = 0, 1, 2, 3
MAX_BINS = 1 << 16  # bins per bucket at most (2 MiB of address per 8 buckets: a typo's guard)
DEFAULT_RELATIVE_ERROR = 0.01
DEFAULT_LOW, DEFAULT_HIGH = 1e-6, 1e5  # 1 us .. 27.8 h when values are seconds


@dataclass(frozen=True)
class Sketch:
    """A bin layout: relative error ``relative_error`` over ``[low, high]``."""

    relative_error: float = DEFAULT_RELATIVE_ERROR
    low: float = DEFAULT_LOW
    high: float = DEFAULT_HIGH

    def __post_init__(self) -> None:
        a, low, high = self.relative_error, self.low, self.high
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, low, high)):
            raise ValueError(f"relative_error, low and high are numbers, not {(a, low, high)!r}")
        if not 1e-5 <= a <= 0.5:
            raise ValueError(f"relative_error is 1e-5 .. 0.5 (0.01 is 1 %), not {a!r}")
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise ValueError(f"the value range needs 0 < low < high, both finite, not ({low!r}, {high!r})")
        if self.n_bins > MAX_BINS:
            raise ValueError(
                f"relative_error={a} over [{low}, {high}] needs {self.n_bins} bins per bucket "
                f"(at most {MAX_BINS}): widen the error or narrow the range"
            )

    @property
    def gamma(self) -> float:
        return (1 + self.relative_error) / (1 - self.relative_error)

    @property
    def n_log(self) -> int:
        """Log bins: enough that the last one reaches ``high``."""
        return max(1, math.ceil((math.log(self.high) - math.log(self.low)) / math.log(self.gamma)))

    @property
    def n_bins(self) -> int:
        """Bins per bucket: ZERO, UNDER, OVER and the log bins."""
        return FIRST_LOG_BIN + self.n_log

    def bin_of(self, value: float) -> int:
        """The bin of one value (what the core computes; ValueError for what it refuses)."""
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"a distribution records finite values >= 0, not {value!r}")
        if value == 0:
            return BIN_ZERO
        if value < self.low:
            return BIN_UNDER
        if value > self.high:
            return BIN_OVER
        i = math.floor(math.log(value / self.low) * (1 / math.log(self.gamma)))
        return FIRST_LOG_BIN + min(max(i, 0), self.n_log - 1)

    def values(self) -> npt.NDArray[np.float64]:
        """What each bin answers with (UNDER and OVER: NaN, the caller clamps to min/max)."""
        out = np.empty(self.n_bins)
        out[BIN_ZERO], out[BIN_UNDER], out[BIN_OVER] = 0.0, np.nan, np.nan
        g = self.gamma
        out[FIRST_LOG_BIN:] = self.low * g ** np.arange(self.n_log) * (2 * g / (g + 1))
        return out

    def __str__(self) -> str:
        return f"{self.relative_error:g} over [{self.low:g}, {self.high:g}]"


def quantiles_of(
    sketch: Sketch, bins: npt.NDArray[np.int64], qs: tuple[float, ...], lo: float, hi: float
) -> list[float]:
    """The quantiles ``qs`` of merged ``bins``, each clamped to the exact ``[lo, hi]``.

    The rank of q among n values is ``floor(q * (n - 1))`` (0-based: numpy's method="lower"),
    counted over the bins' own total, which a write cut by a kill may leave one ahead of the
    count. Rank 0 is the exact minimum and rank n - 1 the exact maximum. NaN when the bins
    are empty."""
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
    return np.array([BIN_ZERO, BIN_UNDER, *range(FIRST_LOG_BIN, sketch.n_bins), BIN_OVER], dtype=np.intp)


def check_quantile(q: object) -> float:
    if isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 <= q <= 1:
        raise ValueError(f"a quantile is a number in [0, 1], not {q!r}")
    return float(q)
