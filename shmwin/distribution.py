"""Distribution: a named windowed distribution of float values (latencies, sizes), shared by
every process on the host, with quantiles of a bounded relative error and an exact count,
sum, min and max.

``Distribution`` is a thin front over a shared-memory window of role "distribution": each
bucket of each resolution holds (count, sum, min, max) and DDSketch's log bins
(``geometry.Sketch``). ``record`` is the native core's own method (one call, one lock, every
resolution); reads merge the live buckets of the finest resolution covering ``last=`` in
numpy, lock-free, and answer from the merged bins. See docs/distribution.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from . import backends
from .backends.contract import Closing, Key, Of
from .backends.options import Creating, Opening, spelled_out
from .backends.shm.roles.distribution import DistributionEngine, Merged, check_quantile, quantiles_of
from .errors import GeometryMismatchError
from .geometry import (
    BIN_OVER,
    BIN_UNDER,
    BIN_ZERO,
    DIST_FIELDS,
    FIRST_LOG_BIN,
    Geometry,
    Sketch,
    pick_ring,
    resolution_rings,
)
from .rate import Duration

if TYPE_CHECKING:  # numpy: imported by record_many and the reads, never by record or import shmwin
    import numpy as np
    import numpy.typing as npt
    from typing_extensions import Unpack

DEFAULT_RESOLUTIONS = ("1m/1s", "1h/1m", "24h/1h")
DEFAULT_RELATIVE_ERROR, DEFAULT_LOW, DEFAULT_HIGH = Sketch().relative_error, Sketch().low, Sketch().high
DEFAULT_CAPACITY = 1024  # keyed: keys at most (each holds its own buckets and bins: see the docs)


@dataclass(frozen=True)
class Summary:
    """One reading of a distribution: what ``shmwin show`` and the Prometheus export print."""

    count: int
    sum: float
    min: float
    max: float
    quantiles: dict[float, float]


def distribution_geometry(
    resolutions: Sequence[str] | str, relative_error: float, value_range: tuple[float, float],
    keyed: bool, capacity: int | None,
) -> Geometry:  # fmt: skip
    """The geometry a ``Distribution`` constructor asks for, validated."""
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive int or None, not {capacity!r}")
    if not isinstance(value_range, (tuple, list)) or len(value_range) != 2:
        raise ValueError(f"value_range is (low, high), not {value_range!r}")
    sketch = Sketch(relative_error, *value_range)
    keyed = keyed or capacity is not None
    cap = (capacity or DEFAULT_CAPACITY) if keyed else 0
    rings = resolution_rings(tuple(resolutions) if not isinstance(resolutions, str) else resolutions)
    return Geometry(rings, DIST_FIELDS, "float64", "locked", 0, cap, "window", "distribution", sketch)


class Shape(TypedDict, total=False):
    """A distribution's keywords beyond its resolutions (``distribution_geometry``'s, and ``on_full``)."""

    relative_error: float
    value_range: tuple[float, float]
    keyed: bool
    capacity: int | None
    on_full: str


SHAPE_DEFAULTS = {"relative_error": DEFAULT_RELATIVE_ERROR, "value_range": (DEFAULT_LOW, DEFAULT_HIGH),
                  "keyed": False, "on_full": "raise"}  # fmt: skip


class Created(Shape, Creating, total=False):
    """``Distribution.create``'s keywords."""


class Opened(Shape, Opening, total=False):
    """``Distribution(...)``'s keywords."""


def _opened(
    name: str, resolutions: Sequence[str] | str, options: Created | Opened, exclusive: bool = False
) -> Any:
    """The backend window of the distribution asked for: made (``exclusive``), or made or attached."""
    asked: dict[str, Any] = {**SHAPE_DEFAULTS, **options}
    want = distribution_geometry(resolutions, asked.pop("relative_error"), asked.pop("value_range"),
                                 asked.pop("keyed"), asked.pop("capacity", None))  # fmt: skip
    return backends.open("window", name, want, exclusive=exclusive, **asked)  # on_full and the store's


class Distribution(Closing):
    """A windowed distribution shared by name: ``record(v)``, then quantiles over ``last=``.

    ``Distribution(name, ...)`` creates it or attaches to it if it exists with the same
    geometry (else :class:`GeometryMismatchError`); ``Distribution.attach(name)`` reads the
    geometry from the segment. Values are finite and >= 0; quantiles are within
    ``relative_error`` of the exact ones for values in ``value_range``; count, sum, min and
    max are exact. With ``keyed=True`` every call takes ``key=`` (``capacity`` keys at most).
    """

    @spelled_out(Opened, SHAPE_DEFAULTS)
    def __init__(
        self, name: str, resolutions: Sequence[str] | str = DEFAULT_RESOLUTIONS, **options: Unpack[Opened]
    ):
        self._bind(_opened(name, resolutions, options))

    @classmethod
    @spelled_out(Created, SHAPE_DEFAULTS)
    def create(
        cls, name: str, resolutions: Sequence[str] | str = DEFAULT_RESOLUTIONS, **options: Unpack[Created]
    ) -> Distribution:
        """Create a new distribution; :class:`WindowExistsError` if the name is taken."""
        self = cls.__new__(cls)
        self._bind(_opened(name, resolutions, options, exclusive=True))
        return self

    @classmethod
    @spelled_out(Opening)
    def attach(cls, name: str, **options: Unpack[Opening]) -> Distribution:
        """Attach to an existing distribution, its geometry read from the segment."""
        self = cls.__new__(cls)
        self._bind(backends.open("window", name, None, **options))
        return self

    def _bind(self, opened: Any) -> None:
        try:
            if opened.geometry.role != "distribution":
                g = opened.geometry
                raise GeometryMismatchError(f"{opened.name!r} is not a distribution (role {g.role!r}): [{g}]")
            self._engine = DistributionEngine(opened)
        except BaseException:  # closed, and removed if this very open made it (all or none)
            backends.discard(opened)
            raise
        self._backend = opened
        self.name: str = opened.name
        self._g: Geometry = opened.geometry
        # the hot path is the native core's own method: record(value, key=None)
        self.record = self._engine.native_record  # type: ignore[method-assign]

    # -- writing ------------------------------------------------------------------

    def record(self, value: float, key: Key | None = None) -> None:  # replaced by the core's in _bind
        """Record one value (finite, >= 0) now, in every resolution: one native call."""
        self._engine.native_record(value, key=key)

    def record_many(
        self, values: npt.ArrayLike, at: npt.ArrayLike | None = None, key: Key | None = None
    ) -> None:
        """Record a batch in one call, under one lock: ``values`` (array-like of numbers), optionally
        stamped ``at`` (whole ns on this distribution's clock, one per value, no later than now and
        inside the oldest bucket a resolution still keeps; a resolution whose buckets no longer
        reach a stamp skips it).
        Every value and stamp is checked before anything is stored (ValueError)."""
        import numpy as np
        v = np.ascontiguousarray(_numbers(values, "values"), dtype=np.float64).reshape(-1)
        stamps = None if at is None else _stamps(at)
        self._engine.record_many(v, stamps, key)

    # -- reading ------------------------------------------------------------------

    def _merged(self, last: Duration | None, key: Key | None, completed: bool = False) -> Merged:
        index, k = pick_ring(self._g.rings, last)
        if key is not None and not self._g.keyed:
            raise ValueError(f"distribution {self.name!r} is not keyed")
        return self._engine.merged(index, k, key, completed)

    def quantile(self, q: float, last: Duration | None = None, key: Key | None = None) -> float:
        """The ``q``-quantile (0 <= q <= 1) of the values of the last ``last`` (default: the
        longest resolution), within the relative error for values in range; NaN if none."""
        return self.quantiles((q,), last, key)[0]

    def quantiles(
        self, qs: Sequence[float], last: Duration | None = None, key: Key | None = None
    ) -> list[float]:
        """Several quantiles from one reading (see :meth:`quantile`)."""
        wanted = tuple(check_quantile(q) for q in qs)
        m = self._merged(last, key)
        return quantiles_of(self._g.sketch, m.bins, wanted, m.min, m.max)  # type: ignore[arg-type]

    def count(self, last: Duration | None = None, key: Key | None = None) -> int:
        """Values recorded in the last ``last``: exact."""
        return self._merged(last, key).count

    def sum(self, last: Duration | None = None, key: Key | None = None) -> float:
        """Their sum: exact as a window's float sums are (float64 additions)."""
        return self._merged(last, key).sum

    def mean(self, last: Duration | None = None, key: Key | None = None) -> float:
        """sum / count; NaN if no value."""
        m = self._merged(last, key)
        return m.sum / m.count if m.count else math.nan

    def min(self, last: Duration | None = None, key: Key | None = None) -> float:
        """The least value recorded in the last ``last``: exact; NaN if none."""
        m = self._merged(last, key)
        return m.min if m.count else math.nan

    def max(self, last: Duration | None = None, key: Key | None = None) -> float:
        """The greatest: exact; NaN if none."""
        m = self._merged(last, key)
        return m.max if m.count else math.nan

    def histogram(
        self, bounds: Sequence[float], last: Duration | None = None, key: Key | None = None
    ) -> list[int]:
        """Cumulative counts of values <= each bound, in order (bounds ascending). A bound
        inside a log bin counts that bin when the bin's value is <= it: off by at most the
        values within the relative error of the bound."""
        b = [float(x) for x in bounds]
        if any(math.isnan(x) for x in b) or b != sorted(b):
            raise ValueError(f"histogram bounds must be ascending numbers, not {list(bounds)!r}")
        m = self._merged(last, key)
        return histogram_of(self._g.sketch, m, b)  # type: ignore[arg-type]

    def summary(
        self, qs: Sequence[float] = (0.5, 0.9, 0.99), last: Duration | None = None, key: Key | None = None,
        completed: bool = False,
    ) -> Summary:  # fmt: skip
        """count, sum, min, max and the quantiles ``qs`` from one reading (the tools').
        ``completed=True`` leaves the current, partial bucket out (as go-zero's shedder reads)."""
        wanted = tuple(check_quantile(q) for q in qs)
        m = self._merged(last, key, completed)
        values = quantiles_of(self._g.sketch, m.bins, wanted, m.min, m.max)  # type: ignore[arg-type]
        lo, hi = (m.min, m.max) if m.count else (math.nan, math.nan)
        return Summary(m.count, m.sum, lo, hi, dict(zip(wanted, values, strict=True)))

    def keys(self) -> list[Key]:
        """Every key (keyed distributions)."""
        return self._engine.all_keys()

    # -- the segment --------------------------------------------------------------

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def relative_error(self) -> float:
        return self._g.sketch.relative_error  # type: ignore[union-attr]

    @property
    def value_range(self) -> tuple[float, float]:
        return self._g.sketch.low, self._g.sketch.high  # type: ignore[union-attr]

    nbytes = Of[int]("nbytes", "_backend", "Bytes of /dev/shm the segment holds.")
    closed = Of[bool]("closed", "_backend", "True once this process has closed the distribution.")

    def close(self) -> None:
        """Detach this process (idempotent); a record or a read after it raises WindowClosedError."""
        with suppress(AttributeError):
            self.__dict__.pop("record", None)  # back to the class's, through the closed core
            self._engine.drop_views()
            self._backend.close()

    def unlink(self) -> bool:
        """Remove the distribution for everyone; True if it existed."""
        return bool(self._backend.unlink())

    def __repr__(self) -> str:
        return f"<shmwin.Distribution {getattr(self, 'name', '?')!r} [{getattr(self, '_g', '?')}]>"


def _numbers(values: npt.ArrayLike, what: str) -> npt.NDArray[Any]:
    """``values`` as an array of real numbers (bools and strings refused, as record() does)."""
    import numpy as np
    arr = np.asarray(values)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"record_many(): {what} are numbers, not {arr.dtype} ({arr.reshape(-1)[:1]!r}...)")
    return arr


def _stamps(at: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """``at`` as int64 ns: whole numbers that fit (a float is truncated nowhere, a uint64 past
    int64 wraps nowhere)."""
    import numpy as np
    arr = _numbers(at, "stamps").reshape(-1)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.floor(arr))):
        raise ValueError("record_many(): stamps are whole nanoseconds")
    if arr.size and arr.max() > np.iinfo(np.int64).max:  # below 0: the core says it is too old
        raise ValueError("record_many(): a stamp is out of range (0 .. 2**63 - 1 ns)")
    return np.ascontiguousarray(arr, dtype=np.int64)


def histogram_of(sketch: Sketch, m: Merged, bounds: list[float]) -> list[int]:
    """Cumulative counts at ``bounds`` from merged bins, the exact min and max deciding the
    bins they can (every value <= max; none < min; UNDER holds values below ``low``)."""
    import numpy as np
    reps = sketch.values()[FIRST_LOG_BIN:]
    log_cum = np.concatenate(([0], np.cumsum(m.bins[FIRST_LOG_BIN:])))
    total = int(m.bins.sum())
    # UNDER's value (values below ``low``): the exact min when that is one of them, else ``low``
    under = m.min if m.count and 0 < m.min < sketch.low else sketch.low
    out = []
    for bound in bounds:
        if m.count and bound >= m.max:
            out.append(total)
            continue
        if bound < 0 or (m.count and bound < m.min):
            out.append(0)
            continue
        n = int(m.bins[BIN_ZERO])
        n += int(m.bins[BIN_UNDER]) if bound >= under else 0
        n += int(log_cum[int(np.searchsorted(reps, bound, side="right"))])
        n += int(m.bins[BIN_OVER]) if bound >= m.max else 0
        out.append(n)
    return out
