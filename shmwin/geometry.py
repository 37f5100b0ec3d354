"""What a constructor's arguments ask for: spans, buckets, resolutions and rates -> a Geometry.

The one place user arguments become a :class:`~shmwin.layout.Geometry`, and back: ``Window``
and ``Limiter`` call it for every backend, and nothing below it parses arguments. Also the
other question about rings every backend asks: which ring, and how many of its buckets, a
read over ``last`` uses (:func:`pick_ring`).
"""

from __future__ import annotations

from collections.abc import Sequence

from .duration import Duration, format_ns, to_ns
from .layout import MAX_BUCKETS, MAX_LOG_ENTRIES, Geometry, Ring, default_capacity
from .rate import Rate
from .ring import buckets_for

DEFAULT_BUCKETS = 20  # a limiter's buckets per period: refusals come at most P/20 early
DEFAULT_LOG_ENTRIES = 1024  # an exact limiter's hit times per key and rate (at most its limit)
DEFAULT_STRIPES = 64  # a striped window's rows for writers: one per process, up to this many


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


def rates_of(g: Geometry) -> list[Rate]:
    """A limiter's rates, read back from its geometry (the inverse of :func:`limiter_geometry`)."""
    return [Rate(r.limit, r.bucket_ns if r.log else r.bucket_ns * (r.n_buckets - 1)) for r in g.rings]


def pick_ring(
    rings: Sequence[Ring], last: Duration | None, resolution: str | int | None = None
) -> tuple[int, int]:
    """``(ring index, k)``: a read over ``last`` sums the last ``k`` buckets of that ring.

    The ring is the one ``resolution`` names ("1h/1m" or an index), else the finest one
    (``rings`` are finest first) whose span covers ``last``, else -- ``last=None`` -- the
    longest. ``k`` rounds up (a read is never narrower than asked); a ``last`` longer than
    the ring is a ``ValueError``.
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
