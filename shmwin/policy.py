"""What ``Window`` and ``Limiter`` decide the same way on every backend: the choices, the costs,
the waits, the stats, what a total past int64 does, and how ``add_many``'s batch becomes
per-bucket sums. Pure functions; no I/O, no backend.

The native core applies the same rules to its own fast path (``hit``'s cost, ``on_full``),
and ``lua/hit.lua`` computes the same waits as ``core/rings.c``'s ``timing()``: the tests hold
the three to one scripted sequence (tests/contract/test_architecture.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .errors import TotalOverflowError
from .geometry import Geometry
from .rate import NS_PER_S, LimitStats, Rate

if TYPE_CHECKING:  # numpy is imported by the functions below that read or build an array
    import numpy as np
    import numpy.typing as npt

Number = int | float

ON_FULL = ("raise", "allow", "deny")  # a new key and a full table: KeyTableFullError, admit, refuse
# The default: a request that finds no room is admitted uncounted (a window's add dropped)
# and counted in the table's full_count, which the tools show. Live keys stay exact; raising
# turns a full /dev/shm into HTTP 500s (Flask-Limiter, slowapi), and denying locks out every
# new client. "deny" is the choice for a limit that guards against abuse (logins).
DEFAULT_ON_FULL = "allow"
# A keyed Window's add is a measurement, not a decision: by default a full table raises
# (KeyTableFullError / OutOfSpaceError), after idle keys were reclaimed; "allow" or "deny"
# drop the add instead (counted in full_count).
WINDOW_ON_FULL = "raise"
ON_ERROR = ("raise", "allow", "deny")  # a limiter's backend is away: BackendUnavailableError, admit, refuse
# a Limiter's also: "local", a share of the limit in this host's shared memory (local_share.py)
LIMITER_ON_ERROR = (*ON_ERROR, "local")
WINDOW_ON_ERROR = ("raise", "allow")  # a window's: raise, or drop the add and go on
MIN_PAUSE_NS = 1_000_000  # acquire() never sleeps less than 1 ms between two tries
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def choice(what: str, value: str, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``, else a ValueError naming them."""
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{what} must be one of {tuple(allowed)}, not {value!r}")
    return value


def cost_of(cost: Any, at_least: int) -> int:
    """A cost as an int: a whole number (``2`` or ``2.0``), at least ``at_least`` (1 to count,
    0 to only look). Booleans, fractions, NaN and numbers past int64 are a ValueError, with
    the native core's message (the core checks its own calls by the same rules; a test holds
    the two to one table)."""
    if type(cost) is int and at_least <= cost <= INT64_MAX:
        return cost
    if isinstance(cost, float):
        if math.isfinite(cost) and cost == math.floor(cost) and at_least <= cost < 9e18:
            return int(cost)
    elif not isinstance(cost, bool) and hasattr(cost, "__index__"):
        value = int(cost.__index__())
        if at_least <= value <= INT64_MAX:
            return value
    raise ValueError(f"cost must be a whole number >= {at_least}, not {cost!r}")


def fallback(on_error: str) -> bool:
    """A limiter's verdict while its backend is away (``on_error`` is "allow" or "deny")."""
    return on_error == "allow"


def opening_on_error(on_error: str, shadow: bool) -> str:
    """The ``on_error`` a limiter's backend opens with: a shadow limiter never raises because its
    backend is away, so a server away does not stop its open either (the name is claimed at
    the first call that gets through, as with "allow")."""
    return "allow" if shadow else on_error


def pause_s(wait_ns: int | None, deadline_ns: int | None, now_ns: int) -> float | None:
    """Seconds ``acquire`` sleeps before trying again, or None to give up now.

    ``wait_ns`` is the backend's answer (None: the cost never fits); the pause is cut at
    the deadline, and is never shorter than :data:`MIN_PAUSE_NS` (no spinning)."""
    if wait_ns is None:
        return None
    if deadline_ns is not None:
        left_ns = deadline_ns - now_ns
        if left_ns <= 0:
            return None
        wait_ns = min(wait_ns, left_ns)
    return max(wait_ns, MIN_PAUSE_NS) / NS_PER_S


def limit_stats(rates: Sequence[Rate], used: Sequence[int], reset_ns: Sequence[int]) -> list[LimitStats]:
    """One :class:`LimitStats` per rate, from what a backend's ``check`` answered."""
    return [
        LimitStats(rate, rate.limit, u, max(rate.limit - u, 0), max(r, 0) / NS_PER_S)
        for rate, u, r in zip(rates, used, reset_ns, strict=True)
    ]


def tightest(stats: Sequence[LimitStats]) -> LimitStats:
    """The rate with the least room left (the one that resets last among equals)."""
    return min(stats, key=lambda s: (s.remaining, -s.reset_after))


# -- totals of int64 windows: exact, or an OverflowError -- never a silent wrap ----------------


def may_wrap(values: npt.NDArray[Any]) -> bool:
    """Could numpy's int64 sum of ``values`` pass int64 (and wrap)? Cheap and conservative."""
    import numpy as np
    if values.dtype != np.int64 or values.size < 2:
        return False
    largest = np.abs(values).max()  # INT64_MIN stays negative under abs: caught by the < 0
    return bool(largest < 0 or largest > INT64_MAX // values.size)


def may_wrap_where(values: npt.NDArray[Any], where: npt.NDArray[np.bool_]) -> bool:
    """As :func:`may_wrap`, for the values ``where`` selects (no temporary array)."""
    import numpy as np
    if values.dtype != np.int64 or values.size < 2:
        return False
    largest = max(int(values.max(where=where, initial=0)), -int(values.min(where=where, initial=0)))
    return largest > INT64_MAX // values.size


def exact(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` ready to be summed without wrapping: as Python ints when int64 might wrap."""
    return values.astype(object) if may_wrap(values) else values


def exact_sum(values: npt.NDArray[Any]) -> int | float:
    """The sum of a few values (one ring's buckets): Python ints for integers, never wrapped."""
    if values.dtype.kind in "iuO":
        return int(sum(values.tolist()))
    return float(values.sum())


def int64_total(value: Any, what: str) -> int:
    """An int64 window's total: the exact int, or an OverflowError if it is past int64.

    Decided: raise, not saturate -- a saturated count would read as a real one."""
    total = int(value)
    if not INT64_MIN <= total <= INT64_MAX:
        raise TotalOverflowError(
            f"{what} is {total}, past int64: the window's counts sum beyond what it can return "
            "(use a float64 window for sums this large)"
        )
    return total


# -- add_many's batch: checked, then summed by bucket of every ring ---------------------------
# ``Window.add_many``'s arithmetic: check a numpy batch, and sum it by bucket of every ring.
#
# Pure: it takes the geometry and ``now_ns`` and returns what a backend writes, either one
# exact sum (no stamps) or ``(ring index, epoch, sum)`` items. Sums are exact: int64 sums
# that could pass 2**63 are done in Python ints, so the writer raises OverflowError rather
# than storing a wrapped value.


def values_of(values: npt.ArrayLike, dtype: str) -> npt.NDArray[Any]:
    """The batch as a flat array; TypeError/ValueError for what the window cannot add."""
    import numpy as np
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
    import numpy as np
    stamps = np.asarray(at)
    if stamps.shape != batch.shape or (stamps.size and stamps.dtype.kind not in "iu"):
        raise ValueError("at= must be integer monotonic ns timestamps, one per value")
    return stamps.astype(np.int64, copy=False)


def batch_sum(batch: npt.NDArray[Any], dtype: str) -> Number:
    """The batch's sum, never wrapped: int64 sums that could pass 2**63 are done in Python."""
    import numpy as np
    if dtype == "int64" and batch.size and float(np.abs(batch).max()) * batch.size >= 2**63:
        return sum(int(v) for v in batch.tolist())
    return scalar(batch.sum(), dtype)


def items_by_bucket(
    g: Geometry, now_ns: int, batch: npt.NDArray[Any], stamps: npt.NDArray[np.int64]
) -> list[tuple[int, int, Number]]:
    """Per ring, the batch summed by bucket: ``(ring, epoch, sum)``; a stamp in the future or
    older than the span is a ValueError, before anything is written."""
    import numpy as np
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
