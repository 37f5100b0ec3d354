"""What a segment *is*, for every backend, and how a constructor's arguments become one.

:class:`Geometry` (rings, fields, dtype, mode, kind, role) and :class:`Ring` are what two
processes must agree on to share a window; :class:`Meta` the facts of a segment's creation.
Both backends build on them without the shared-memory byte format
(:mod:`shmwin.backends.shm.layout`). Below them, the one place user arguments become a
Geometry, and back: ``Window`` and ``Limiter`` call it for every backend, and nothing below it
parses arguments. Also the other question about rings every backend asks: which ring, and
how many of its buckets, a read over ``last`` uses (:func:`pick_ring`); and, last, the bucket
ring's own arithmetic (which epoch, which slot, which slots are live), drawn in its comment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .rate import Duration, Rate, format_ns, to_ns

if TYPE_CHECKING:  # numpy is imported by the few functions that build an array: a limiter never does
    import numpy as np
    import numpy.typing as npt

# -- the limits and enumerations every backend shares ----------------------------------------
# Geometry's own: the layers above the backends never import a byte format. Shared memory's format
# (backends/shm/format.py) checks that it holds each of them as this value (its check()).
MAX_FIELDS = 16
FIELD_NAME_BYTES = 32
MAX_RINGS = 8
MAX_BUCKETS = 1_000_000
MAX_LOG_ENTRIES = 4096  # entries of a log ring
MAX_STRIPES = 1024
MAX_CAPACITY = 50_000_000
MAX_SPAN_NS = 1 << 60  # a ring's span (and two buckets more): readings stop at clock.MAX_NOW_NS
MAX_CONCURRENCY = 1024  # holders per key at most
CONC_HOLDER_BYTES = 16  # a holder's room in a concurrency row: sizes a Concurrency's defaults
# a keyed segment's index and locks, which a geometry's sizes are computed from
MAX_KEY_LOCKS = 64
INDEX_MIN_SLOTS = 64  # index entries at level 0 (a power of two)
FIRST_KEY_LOCK = 2  # keyed row r: lock FIRST_KEY_LOCK + r % (n_locks - FIRST_KEY_LOCK)
DTYPES = ("int64", "float64")
MODES = ("striped", "locked")
KINDS = ("window", "limiter")
# what shmwin made a segment for ("" = a plain window or limiter); see shmwin.inspector.roles
ROLES = ("", "fixed-starts", "breaker", "shedder", "in-flight", "adaptive", "health", "fixed-window",
         "sliding-counter", "decisions", "moving-log", "concurrency", "token-bucket", "lease",
         "distribution", "series", "counter-cache")  # fmt: skip
DIST_FIELDS = ("count", "sum", "min", "max")  # a distribution's slot, after its epoch

DEFAULT_BUCKETS = 20  # a limiter's buckets per period: refusals come at most P/20 early
DEFAULT_LOG_ENTRIES = 1024  # an exact limiter's hit times per key and rate (at most its limit)
DEFAULT_STRIPES = 64  # a striped window's rows for writers: one per process, up to this many

_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Ring:
    """One bucket ring: ``n_buckets`` buckets of ``bucket_ns``; ``limit`` for limiters.

    A *log* ring (limiters only) keeps hit times instead: ``n_buckets`` entries of
    ``(time ns, hits)``, and ``bucket_ns`` is the period; see "Log rings" in _core.c."""

    bucket_ns: int
    n_buckets: int
    limit: int = 0
    log: bool = False

    @property
    def span_ns(self) -> int:
        return self.bucket_ns if self.log else self.bucket_ns * self.n_buckets

    def __str__(self) -> str:
        per = format_ns(self.bucket_ns)
        text = f"log of {self.n_buckets} per {per}" if self.log else f"{self.n_buckets}x{per}"
        return f"{text} limit={self.limit}" if self.limit else text


# a distribution's bins per bucket (core/distribution.c places values by Sketch.bin_of's formula)
BIN_ZERO, BIN_UNDER, BIN_OVER, FIRST_LOG_BIN = 0, 1, 2, 3  # v == 0; 0 < v < low; v > high; the log bins
MAX_BINS = 1 << 16
MAX_RANGE_RATIO = 1e300  # a distribution's high / low at most: its bin arithmetic never overflows


@dataclass(frozen=True)
class Sketch:
    """A distribution's bins (DDSketch's): relative error ``a`` over ``[low, high]``. Log bin i
    holds ``[low g**i, low g**(i+1))``, g = (1 + a) / (1 - a), and answers ``low g**i 2g / (g + 1)``,
    within ``a`` of each of its values; three more count zero, under ``low`` and over ``high``."""

    relative_error: float = 0.01
    low: float = 1e-6
    high: float = 1e5  # 1 us .. 27.8 h when values are seconds

    def __post_init__(self) -> None:
        a, low, high = self.relative_error, self.low, self.high
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, low, high)):
            raise ValueError(f"relative_error, low and high are numbers, not {(a, low, high)!r}")
        if not 1e-5 <= a <= 0.5:
            raise ValueError(f"relative_error is 1e-5 .. 0.5 (0.01 is 1 %), not {a!r}")
        if not (math.isfinite(low) and math.isfinite(high) and 0 < low < high):
            raise ValueError(f"the value range needs 0 < low < high, both finite, not ({low!r}, {high!r})")
        if high / low > MAX_RANGE_RATIO:  # v / low, the bins' values: finite for every v <= high
            raise ValueError(f"the value range ({low!r}, {high!r}) spans more than {MAX_RANGE_RATIO:g} "
                             "(high / low): narrow it")  # fmt: skip
        if self.n_bins > MAX_BINS:
            raise ValueError(f"relative_error={a} over [{low}, {high}] needs {self.n_bins} bins per bucket "
                             f"(at most {MAX_BINS}): widen the error or narrow the range")  # fmt: skip

    @property
    def gamma(self) -> float:
        return (1 + self.relative_error) / (1 - self.relative_error)

    @property
    def n_log(self) -> int:
        return max(1, math.ceil((math.log(self.high) - math.log(self.low)) / math.log(self.gamma)))

    @property
    def n_bins(self) -> int:
        return FIRST_LOG_BIN + self.n_log

    def bin_of(self, value: float) -> int:
        """The bin of one value, as the core places it (ValueError for what it refuses)."""
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"a distribution records finite values >= 0, not {value!r}")
        if value == 0 or value < self.low or value > self.high:
            return BIN_ZERO if value == 0 else BIN_UNDER if value < self.low else BIN_OVER
        i = math.floor(math.log(value / self.low) * (1 / math.log(self.gamma)))
        return FIRST_LOG_BIN + min(max(i, 0), self.n_log - 1)

    def values(self) -> npt.NDArray[np.float64]:
        """What each bin answers with (UNDER and OVER: NaN, the reader clamps to min and max)."""
        import numpy as np
        g, out = self.gamma, np.full(self.n_bins, np.nan)
        out[BIN_ZERO] = 0.0
        out[FIRST_LOG_BIN:] = self.low * g ** np.arange(self.n_log) * (2 * g / (g + 1))
        return out

    def __str__(self) -> str:
        return f"{self.relative_error:g} over [{self.low:g}, {self.high:g}]"


@dataclass(frozen=True)
class Geometry:
    """What two processes must agree on to share a segment."""

    rings: tuple[Ring, ...]
    fields: tuple[str, ...]
    dtype: str = "int64"
    mode: str = "striped"
    n_stripes: int = 64
    capacity: int = 0
    kind: str = "window"
    role: str = ""  # ROLES: what shmwin made it for, when the tools must know ("" = plain)
    sketch: Sketch | None = None  # role "distribution": its bins; else None
    # role "concurrency": the holder entries of a key's row, the most processes holding a key
    # at once (0: one per process stripe); else 0
    holders: int = 0

    def __post_init__(self) -> None:
        _check_geometry(self)

    @property
    def bucket_ns(self) -> int:
        return self.rings[0].bucket_ns

    @property
    def n_buckets(self) -> int:
        return self.rings[0].n_buckets

    @property
    def span_ns(self) -> int:
        """The longest span of any ring."""
        return max(r.span_ns for r in self.rings)

    @property
    def keyed(self) -> bool:
        return self.capacity > 0

    # -- what the shared-memory backend derives from a keyed geometry (its key table) --

    @property
    def key_slots(self) -> int:
        """Index entries at level 0 (keyed), else 0."""
        return INDEX_MIN_SLOTS if self.capacity else 0

    @property
    def index_levels(self) -> int:
        """Index levels: the last one holds ``capacity`` keys at a load of at most 1/4."""
        if not self.capacity:
            return 0
        levels = 1
        while (INDEX_MIN_SLOTS << (levels - 1)) < 4 * self.capacity:
            levels += 1
        return levels

    @property
    def n_key_locks(self) -> int:
        return MAX_KEY_LOCKS if self.capacity else 0

    @property
    def n_locks(self) -> int:
        return FIRST_KEY_LOCK + self.n_key_locks

    @property
    def idle_ns(self) -> int:
        """After this long without a write, every bucket of a row is stale."""
        return max(r.span_ns for r in self.rings)

    def __str__(self) -> str:
        if len(self.rings) == 1:
            parts = [f"span={format_ns(self.span_ns)}", f"buckets={self.rings[0]}"]
        else:
            parts = [f"rings=({', '.join(str(r) for r in self.rings)})"]
        parts += [f"fields=({','.join(self.fields)})", f"dtype={self.dtype}", f"mode={self.mode}"]
        if self.mode == "striped":
            parts.append(f"stripes={self.n_stripes}")
        if self.capacity:
            parts.append(f"capacity={self.capacity}")
        if self.kind != "window":
            parts.append(f"kind={self.kind}")
        if self.role:
            parts.append(f"role={self.role}")
        if self.sketch is not None:
            parts.append(f"relative_error={self.sketch}")
        return " ".join(parts)


def _check_geometry(g: Geometry) -> None:
    if not 1 <= len(g.rings) <= MAX_RINGS:
        raise ValueError(f"a segment has 1..{MAX_RINGS} rings, not {len(g.rings)}")
    for ring in g.rings:
        if not 1 <= ring.n_buckets <= MAX_BUCKETS:
            raise ValueError(f"buckets must be 1..{MAX_BUCKETS}, not {ring.n_buckets}")
        log_ok = g.kind == "limiter" or g.role == "moving-log"  # a limiter's, or limits' moving window's
        if ring.log and (not log_ok or ring.n_buckets > MAX_LOG_ENTRIES):
            raise ValueError(f"a log ring belongs to a limiter and keeps 1..{MAX_LOG_ENTRIES} times")
        if ring.bucket_ns <= 0:
            raise ValueError("bucket width must be positive")
        if ring.bucket_ns * (ring.n_buckets + 2) > MAX_SPAN_NS:  # room for epoch maths past any reading
            raise ValueError(f"a ring spans at most 2**60 ns (36 years), not {format_ns(ring.span_ns)}")
        if ring.limit < 0:
            raise ValueError("a limit cannot be negative")
    if not 1 <= len(g.fields) <= MAX_FIELDS:
        raise ValueError(f"a window has 1..{MAX_FIELDS} fields, not {len(g.fields)}")
    for name in g.fields:
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise ValueError(f"field name {name!r} must be an identifier (letters, digits, _)")
        if len(name.encode()) >= FIELD_NAME_BYTES:
            raise ValueError(f"field name {name!r} is longer than {FIELD_NAME_BYTES - 1} bytes")
    if len(set(g.fields)) != len(g.fields):
        raise ValueError(f"field names must be unique: {g.fields}")
    if g.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, not {g.dtype!r}")
    if g.mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {g.mode!r}")
    if g.kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {g.kind!r}")
    if g.role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, not {g.role!r}")
    if not 0 <= g.capacity <= MAX_CAPACITY:
        raise ValueError(f"capacity must be 0..{MAX_CAPACITY}, not {g.capacity}")
    if g.mode == "striped" and not 1 <= g.n_stripes <= MAX_STRIPES:
        raise ValueError(f"stripes must be 1..{MAX_STRIPES}, not {g.n_stripes}")
    if g.mode == "locked" and g.n_stripes != 0 and not (g.keyed and g.role == "concurrency"):
        raise ValueError("a locked window has no stripes")  # but a concurrency's: one per process
    if g.role == "concurrency" and not (g.keyed and 1 <= g.n_stripes <= MAX_STRIPES):
        raise ValueError(f"a concurrency segment is keyed, with 1..{MAX_STRIPES} process stripes")
    if not 0 <= g.holders <= (MAX_STRIPES if g.role == "concurrency" else 0):
        raise ValueError(f"a concurrency row holds 1..{MAX_STRIPES} holder entries, not {g.holders}")
    if g.role == "concurrency" and not (len(g.rings) == 1 and 1 <= g.rings[0].limit <= MAX_CONCURRENCY):
        raise ValueError(f"a concurrency limit is 1..{MAX_CONCURRENCY} holders per key")
    if g.keyed and g.mode != "locked":
        raise ValueError("a keyed window (capacity > 0) is written under per-key locks: mode='locked'")
    if (g.role == "distribution") != (g.sketch is not None):
        raise ValueError("a distribution's segment, and it alone, has a sketch (its bins)")
    dist_shape = (DIST_FIELDS, "float64", "locked", "window")
    if g.sketch is not None and (g.fields, g.dtype, g.mode, g.kind) != dist_shape:
        raise ValueError(f"a distribution is a locked float64 window of the fields {DIST_FIELDS}")


@dataclass(frozen=True)
class Meta:
    """Facts about a segment's creation, for the inspector."""

    creator_pid: int
    created_real_ns: int
    created_mono_ns: int
    boot_id: bytes
    hash_key: bytes = bytes(16)
    clock: str = "monotonic"  # what the writers' clock reads (CLOCKS): "wall" for limits' storages


# -- from a constructor's arguments ----------------------------------------------------------


def window_geometry(
    span: Duration | None,
    buckets: int | None,
    resolutions: tuple[str, ...] | list[str] | str | None,
    fields: tuple[str, ...] | list[str] | str,
    dtype: str,
    mode: str | None,
    stripes: int | None,
    capacity: int | None,
    keyed: bool = False,
) -> Geometry:
    """The geometry a ``Window`` constructor asks for, validated (``stripes=None``: the
    default). A window is keyed when ``keyed`` or a ``capacity`` is given; ``capacity=None``
    then means "grow as keys come"."""
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)):
        raise ValueError(f"capacity must be an int or None, not {capacity!r}")
    keyed = bool(keyed) or bool(capacity)
    if mode is None:
        mode = "locked" if keyed else "striped"
    if resolutions is None:
        rings: tuple[Ring, ...] = (ring_of(60 if span is None else span, 60 if buckets is None else buckets),)
    elif span is not None or buckets is not None:
        raise ValueError("give either span and buckets, or resolutions, not both")
    else:
        rings = resolution_rings(resolutions)
    g = Geometry(
        rings,
        (fields,) if isinstance(fields, str) else tuple(fields),
        dtype,
        mode,
        (DEFAULT_STRIPES if stripes is None else stripes) if mode == "striped" else 0,
        capacity if keyed and capacity else 0,
    )
    return with_capacity(g, None) if keyed and not capacity else g


def with_capacity(g: Geometry, capacity: int | None) -> Geometry:
    """``g`` keyed for ``capacity`` keys; None: as many as the address budget maps (the key
    table then grows as keys come: memory follows the keys in use)."""
    probe = Geometry(g.rings, g.fields, g.dtype, "locked", 0, 1, g.kind)
    return Geometry(g.rings, g.fields, g.dtype, "locked", 0,
                    default_capacity(probe) if capacity is None else capacity, g.kind)  # fmt: skip


def limiter_geometry(
    rates: list[Rate], buckets: int, capacity: int | None, exact: bool | int = False
) -> Geometry:
    """One ring per rate, each ``buckets + 1`` slots: the current bucket and ``buckets``
    whole ones before it, so a hit is forgotten between P and P + P/buckets after it.

    ``exact``: each rate is a log ring instead, of ``min(limit, entries)`` hit times
    (``entries``: ``exact`` if an int, else DEFAULT_LOG_ENTRIES), so a hit is forgotten
    exactly P after it while a key's hits in the period have at most that many times."""
    if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= MAX_BUCKETS - 1:
        raise ValueError(f"buckets must be 1..{MAX_BUCKETS - 1}, not {buckets!r}")
    if not isinstance(exact, int) or (not isinstance(exact, bool) and not 1 <= exact <= MAX_LOG_ENTRIES):
        raise ValueError(
            f"exact must be True, False or a number of times 1..{MAX_LOG_ENTRIES}, not {exact!r}"
        )
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive int or None (grow as keys come), not {capacity!r}")
    rings = []
    entries = DEFAULT_LOG_ENTRIES if exact is True else int(exact)
    for rate in rates:
        if entries:
            rings.append(Ring(rate.period_ns, min(rate.limit, entries), rate.limit, log=True))
            continue
        if rate.period_ns % buckets:
            raise ValueError(f"buckets={buckets} does not divide {rate} into whole nanoseconds")
        rings.append(Ring(rate.period_ns // buckets, buckets + 1, rate.limit))
    return with_capacity(Geometry(tuple(rings), ("hits",), "int64", "locked", 0, 1, "limiter"), capacity)


DEFAULT_MAX_KEYS = 1 << 24  # capacity=None: as many keys as this, or as the address-space budget holds
ADDRESS_BUDGET_BYTES = 1 << 36  # the most address space (not memory) one keyed segment maps


def default_capacity(g: Geometry) -> int:
    """``capacity=None``: the most keys a segment of this geometry maps within the address
    budget (never memory: only keys in use are reserved), at most DEFAULT_MAX_KEYS. A key's
    address space is bounded from above here -- a 128-byte key header, its rings' slots and
    a 512-byte share of the index copies -- without the byte layout itself (the layout's
    exact row is never larger)."""
    head_slots = 2 if g.kind == "limiter" else 1
    slots = sum(head_slots + r.n_buckets for r in g.rings)
    per_key = 128 + 8 * slots * (1 + len(g.fields)) + 64 + 512
    return max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))


def rates_of(g: Geometry) -> list[Rate]:
    """A limiter's rates, read back from its geometry (the inverse of :func:`limiter_geometry`)."""
    return [Rate(r.limit, r.bucket_ns if r.log else r.bucket_ns * (r.n_buckets - 1)) for r in g.rings]


TOKEN_ROLE = "token-bucket"


def token_geometry(rate: Rate, burst: int, capacity: int | None) -> Geometry:
    """A token bucket's segment: a keyed window of one ring of ``burst`` buckets of the emission
    interval T = ceil(period / limit) ns (whole ns: rounded up, a token never comes back early),
    whose rows hold the GCRA state (``format.TOKEN_STATE``); the ring's span burst x T is
    a key's idle time, its limit the rate's limit."""
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BUCKETS:
        raise ValueError(f"burst must be a whole number of tokens 1..{MAX_BUCKETS}, not {burst!r}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive int or None (grow as keys come), not {capacity!r}")
    interval_ns = -(-rate.period_ns // rate.limit)
    if interval_ns * (burst + 2) > MAX_SPAN_NS:
        raise ValueError(f"a bucket of {burst} tokens of {format_ns(interval_ns)} spans more than 2**60 ns")
    ring = Ring(interval_ns, burst, rate.limit)
    g = with_capacity(Geometry((ring,), ("tokens",), "int64", "locked", 0, 1), capacity)
    return Geometry(g.rings, g.fields, g.dtype, g.mode, g.n_stripes, g.capacity, g.kind, TOKEN_ROLE)


def token_rate_of(g: Geometry) -> tuple[Rate, int]:
    """A token bucket's ``(rate, burst)``, read back from its geometry: of the periods in
    ((T - 1) x limit, T x limit], which all round up to its emission interval T, the roundest
    ("3/second", not "3/1000000002ns")."""
    ring = g.rings[0]
    shortest_ns = (ring.bucket_ns - 1) * ring.limit + 1
    for unit_ns in (86_400 * 10**9, 3_600 * 10**9, 60 * 10**9, 10**9, 10**6, 10**3, 1):
        if (period_ns := -(-shortest_ns // unit_ns) * unit_ns) <= ring.bucket_ns * ring.limit:
            return Rate(ring.limit, period_ns), ring.n_buckets
    raise AssertionError("unreachable: 1 ns is a unit")


LEASE_ROLE = "lease"


def lease_geometry(rates: list[Rate], capacity: int | None) -> Geometry:
    """A two-tier limiter's host tier (``shm+redis://``): a keyed window of one ring of one
    bucket of the longest period, whose rows hold each key's lease (``format.LEASE_STATE``);
    the ring's span is a key's idle time, its limit the tightest rate's limit."""
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive int or None (grow as keys come), not {capacity!r}")
    ring = Ring(max(r.period_ns for r in rates), 1, min(r.limit for r in rates))
    g = with_capacity(Geometry((ring,), ("hits",), "int64", "locked", 0, 1), capacity)
    return Geometry(g.rings, g.fields, g.dtype, g.mode, g.n_stripes, g.capacity, g.kind, LEASE_ROLE)


def pick_ring(
    rings: Sequence[Ring], last: Duration | None, resolution: str | int | None = None
) -> tuple[int, int]:
    """``(ring index, k)``: a read over ``last`` sums the last ``k`` buckets of that ring.

    The ring is the one ``resolution`` names ("1h/1m" or an index), else the finest one
    (``rings`` are finest first) whose span covers ``last``, else -- ``last=None`` -- the
    longest. ``k`` rounds up (the read drops the oldest if it began before now - ``last``:
    ``window.within_last``); a ``last`` longer than the ring is a ``ValueError``.
    """
    if resolution is None and last is None and len(rings) == 1:
        return 0, 1 if rings[0].log else rings[0].n_buckets  # the common case, first
    if resolution is not None:
        index = resolution_index(rings, resolution)
    elif last is None:
        index = max(range(len(rings)), key=lambda i: rings[i].span_ns)
    else:
        last_ns = to_ns(last, "last")
        covering = [i for i, r in enumerate(rings) if r.span_ns >= last_ns]
        index = covering[0] if covering else max(range(len(rings)), key=lambda i: rings[i].span_ns)
    r = rings[index]
    if r.log:  # an exact limiter's hit times: one period, read whole
        if last is not None and to_ns(last, "last") > r.bucket_ns:
            raise ValueError(f"last={last!r} is longer than this limiter's period ({format_ns(r.bucket_ns)})")
        return index, 1
    if last is None:
        return index, r.n_buckets
    return index, buckets_for(to_ns(last, "last"), r.bucket_ns, r.n_buckets)  # raises: too long


def resolution_index(rings: Sequence[Ring], resolution: str | int) -> int:
    """The index of the ring ``resolution`` names: "1h/1m", or an index."""
    if isinstance(resolution, int) and not isinstance(resolution, bool) and 0 <= resolution < len(rings):
        return resolution
    if isinstance(resolution, str):
        wanted = parse_resolution(resolution)
        for i, r in enumerate(rings):
            if (r.bucket_ns, r.n_buckets) == (wanted.bucket_ns, wanted.n_buckets):
                return i
    names = [resolution_name(r) for r in rings]
    raise ValueError(f"no resolution {resolution!r}; this window has {names}")


def resolution_name(r: Ring) -> str:
    """ "1m/1s": a ring's span and bucket width."""
    return f"{format_ns(r.span_ns)}/{format_ns(r.bucket_ns)}"


def parse_resolution(spec: str) -> Ring:
    """ "1h/1m" -> a ring of 60 one-minute buckets."""
    span, sep, bucket = spec.partition("/") if isinstance(spec, str) else ("", "", "")
    if not sep:
        raise ValueError(f"resolution {spec!r} is not 'span/bucket', e.g. '1m/1s', '1h/1m', '24h/1h'")
    span_ns, bucket_ns = to_ns(span.strip(), "resolution span"), to_ns(bucket.strip(), "resolution bucket")
    if span_ns % bucket_ns:
        raise ValueError(f"resolution {spec!r}: the bucket does not divide the span")
    return Ring(bucket_ns, span_ns // bucket_ns)


def resolution_rings(specs: tuple[str, ...] | list[str] | str) -> tuple[Ring, ...]:
    if isinstance(specs, str):
        specs = (specs,)
    rings = sorted((parse_resolution(spec) for spec in specs), key=lambda r: (r.bucket_ns, r.n_buckets))
    if not rings:
        raise ValueError("resolutions must name at least one 'span/bucket'")
    if len({r.bucket_ns for r in rings}) != len(rings):
        raise ValueError(f"two resolutions share a bucket width: {list(specs)}")
    return tuple(rings)


def ring_of(span: Duration, buckets: int, limit: int = 0) -> Ring:
    """A ring of ``buckets`` whole-nanosecond buckets covering ``span``."""
    span_ns = to_ns(span, "span")
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets <= 0:
        raise ValueError(f"buckets must be a positive int, not {buckets!r}")
    if span_ns % buckets:
        raise ValueError(
            f"buckets={buckets} does not divide span={span!r} ({span_ns} ns) into whole "
            "nanosecond-wide buckets"
        )
    return Ring(span_ns // buckets, buckets, limit)


# -- the bucket ring: pure arithmetic of integers and arrays, no shared memory ---------------
# A window of ``n_buckets`` buckets, each ``bucket_ns`` wide, lives in a ring of
# slots. Time ``now_ns`` falls in bucket *epoch* ``now_ns // bucket_ns``, which is
# stored in slot ``epoch % n_buckets`` together with its epoch number, so a reader
# can tell a live bucket from one left over from an earlier lap::
#
#     n_buckets = 5, bucket = 1 s, now = 12.4 s  ->  now_epoch = 12, slot 2
#
#       slot:     0      1      2      3      4
#       epoch:  [10]   [11]   [12]   [ 8]   [ 9]
#                             ^ current (partial, filling now)
#       live for total(last=5 s):  epochs 8..12  (every slot)
#       live for total(last=2 s):  epochs 11..12 (slots 1, 2)
#       at now = 13.0 s the writer finds epoch 8 in slot 3, sees it is stale
#       (8 != 13), zeroes it and stamps 13: the window has slid by one bucket.
#
# A slot whose epoch is not the one ``expected_epochs`` names for it is skipped
# by readers (stale, never written, or written by a process whose clock already
# moved into the next bucket). A gap longer than the span leaves every slot
# stale, so the window reads as empty without anyone clearing it.
#
# Granularity: ``total(last=k buckets)`` counts events from the start of bucket
# ``now_epoch - k + 1`` to now, i.e. a period between ``(k - 1) * bucket`` and
# ``k * bucket`` long. Events older than ``k`` buckets are never counted; events
# up to one bucket width younger than that may already have dropped out.

# a slot never written (or emptied): below every window; stamped at creation and by reset()
EMPTY_EPOCH = -(1 << 63)


def epoch_of(now_ns: int, bucket_ns: int) -> int:
    """The bucket number that ``now_ns`` falls in."""
    return now_ns // bucket_ns


def slot_of(epoch: int, n_buckets: int) -> int:
    """The ring slot that holds bucket ``epoch``."""
    return epoch % n_buckets


def buckets_for(last_ns: int, bucket_ns: int, n_buckets: int) -> int:
    """How many buckets (the current one included) cover the last ``last_ns``.

    Rounds up, so a request is never narrower than asked; more than the ring
    holds is a ``ValueError``.
    """
    if last_ns <= 0:
        raise ValueError("last must be positive")
    k = -(-last_ns // bucket_ns)
    if k > n_buckets:
        raise ValueError(
            f"last={last_ns / 1e9:g}s is longer than the window's span ({n_buckets * bucket_ns / 1e9:g}s)"
        )
    return k


NO_EPOCH = -1  # in expected_epochs(): this slot holds no bucket of the requested range


def expected_epochs(now_epoch: int, n_buckets: int, k: int) -> npt.NDArray[np.int64]:
    """Per slot, the one epoch it may hold to count among the last ``k`` buckets.

    Slot ``i`` can only hold epochs congruent to ``i`` mod ``n_buckets``, and just one
    of those lies in ``(now_epoch - n_buckets, now_epoch]``; slots outside the last ``k``
    get ``NO_EPOCH``. Readers then test liveness with a single ``==``.
    """
    import numpy as np
    slots = np.arange(n_buckets, dtype=np.int64)
    epochs = now_epoch - (now_epoch - slots) % n_buckets
    epochs[(epochs <= now_epoch - k) | (epochs < 0)] = NO_EPOCH
    return epochs


def slots_oldest_first(now_epoch: int, n_buckets: int, k: int) -> npt.NDArray[np.intp]:
    """Slot indices of the last ``k`` buckets, oldest first, the current one last."""
    import numpy as np
    first = now_epoch - k + 1
    return np.arange(first, now_epoch + 1, dtype=np.int64) % n_buckets
