"""What the inspector and the exporters show: read-only snapshots of windows.

Everything here reads without taking a lock (a worker never waits on the inspector)
and never writes. A segment that cannot be read is reported with the reason instead
of raising. The same functions read shared-memory windows and limiters and, where it
can answer, the Redis backend's (``backend="redis://..."``).

Every ring is labelled in one style, ``"<span>/<bucket>"`` ("1m/1s"); a limiter's ring
is labelled by its rate's period ("1m/6s" for "5/minute" in 10 buckets), and its rate
is given beside it. Non-finite values of float windows come out as the strings "nan",
"inf" and "-inf" in snapshots (JSON has no NaN).
"""

from __future__ import annotations

import fnmatch
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import local_share
from ..backends.shm import owners
from ..backends.shm.roles import series as series_segment
from ..backends.shm.segment import PREFIX, SHM_DIR, names, namespace, path_of
from ..clock import host_clock, host_monotonic_ns
from ..errors import GeometryMismatchError, ShmwinError
from ..geometry import token_rate_of
from ..rate import NS_PER_S, Rate, format_ns
from . import attached as _attached
from . import redis_scan
from .redis_scan import REDIS_SCAN_KEYS as REDIS_SCAN_KEYS  # the tools import them from here
from .redis_scan import redis_keys as redis_keys
from .redis_scan import redis_names as redis_names
from .roles import (
    COUNTERS,
    UNSUMMED,
    counter_values,
    counters_view,
    decisions_of,
    leases_view,
    role_of,
    role_view,
)

GLOB_CHARS = "*?["


@dataclass
class Info:
    """One line of ``shmwin ls``."""

    name: str
    kind: str = "?"
    role: str | None = None  # what shmwin built it for (ROLES), None for a plain window or limiter
    fields: list[str] = field(default_factory=list)
    resolutions: list[str] = field(default_factory=list)
    rates: list[str] = field(default_factory=list)  # a limiter's rates, "5/minute"
    mode: str = "?"
    nbytes: int = 0  # the mapped size of the segment
    allocated_bytes: int = 0  # what it takes in /dev/shm (st_blocks), extensions included
    keys: int | None = None
    full: int | None = None  # requests that met a full key table (keyed), whatever on_full answered
    capacity: int | None = None
    stripes_in_use: int | None = None
    stripes: int | None = None
    creator_pid: int = 0
    creator_alive: bool = False
    attached: int | None = None  # live processes that map it (None: not looked)
    attached_pids: list[int] = field(default_factory=list)
    attached_complete: bool = True  # False: some processes could not be checked...
    attached_reason: str = ""  # ...and why
    age_s: float = 0.0
    idle_s: float | None = None
    span_s: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class ShmUsage:
    """``/dev/shm`` as a whole: what shmwin's windows take and what is left."""

    windows: int
    windows_bytes: int
    used_bytes: int
    free_bytes: int
    size_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# -- opening -----------------------------------------------------------------------------------


def open_window(name: str, backend: str | None = None) -> Any:
    """Attach for reading: a Window (either kind), or on Redis a RedisWindow or RedisLimiter.
    Raises ShmwinError (or FileNotFoundError) with the reason."""
    from ..window import Window  # imported late: ``shmwin ls`` of junk needs no native core

    if backend is None:
        w = Window.attach(name, ready_timeout=0.5)
        if clock_of(w) is not time.time_ns:
            return w
        w.close()  # written with the wall clock (limits' storages): read with it too
        return Window.attach(name, ready_timeout=0.5, clock=time.time_ns)
    try:
        return Window.attach(name, backend=backend)
    except GeometryMismatchError:  # the name holds a limiter, or a token bucket
        from ..limiter import Limiter, TokenBucket

        try:
            return Limiter.attach(name, backend=backend)
        except GeometryMismatchError:
            try:
                return TokenBucket.attach(name, backend=backend)
            except GeometryMismatchError:
                redis_scan.refuse_two_tier(backend, name)
                raise


def clock_of(w: Any) -> Callable[[], int]:
    """The clock a window's writers read, as its header says: ``time.time_ns`` for a segment
    written with the wall clock (``shm://`` storages for limits), else the host's monotonic
    clock (:func:`shmwin.clock.host_clock`)."""
    meta = getattr(w, "meta", None)  # Redis windows have none: the server's time
    return time.time_ns if getattr(meta, "clock", "monotonic") == "wall" else host_clock()


def select(patterns: Iterable[str] | None, available: Iterable[str]) -> list[str]:
    """The names ``patterns`` pick (exact names, or globs such as ``api-*``), in order, once
    each; every name when ``patterns`` is None. Exact names are kept even when absent, so
    that opening them says why; a glob that matches nothing is a ``LookupError``."""
    pool = sorted(available)
    picked: dict[str, None] = {}
    for pattern in pool if patterns is None else patterns:
        if any(c in pattern for c in GLOB_CHARS):
            matched = fnmatch.filter(pool, pattern)
            if not matched:
                raise LookupError(f"no window matches {pattern!r}")
            picked.update(dict.fromkeys(matched))
        else:
            picked[pattern] = None
    return list(picked)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in GLOB_CHARS)


# -- ls ----------------------------------------------------------------------------------------


def info(name: str) -> Info:
    """Describe one segment; unreadable ones come back with ``error`` set."""
    metrics = series_segment.peek(name)
    if metrics is not None:  # prometheus_client's values of an app (docs/metrics.md)
        return Info(name, kind="metrics", role="series", mode="series", nbytes=metrics["total_bytes"],
                    keys=metrics["series"], capacity=metrics["max_series"],
                    full=metrics["full_count"])  # fmt: skip
    try:
        w = open_window(name)
    except (ShmwinError, OSError) as exc:
        return Info(name, nbytes=_file_size(name), error=f"{type(exc).__name__}: {exc}")
    try:
        return _info(name, w)
    except (ShmwinError, OSError, ValueError, OverflowError) as exc:  # junk met while reading
        return Info(name, nbytes=_file_size(name), error=f"{type(exc).__name__}: {exc}")
    finally:
        w.close()


def _info(name: str, w: Any) -> Info:
    g, now_ns = w.geometry, host_monotonic_ns()  # creation times are the host's monotonic, always
    live = [o for o in w.stripe_owners() if o[2]]
    return Info(
        name=name,
        kind=g.kind,
        role=role_of(w),
        fields=list(g.fields),
        resolutions=ring_labels(w),
        rates=[str(r) for r in limiter_rates(w)] or token_rates(w),
        mode=g.mode,
        nbytes=w.nbytes,
        keys=len(w.keys()) if g.keyed else None,
        full=w.full_count() if g.keyed else None,
        capacity=g.capacity or None,
        stripes_in_use=len(live) if g.mode == "striped" else None,
        stripes=g.n_stripes if g.mode == "striped" else None,
        creator_pid=w.meta.creator_pid,
        creator_alive=owners.pid_alive(w.meta.creator_pid),
        age_s=(now_ns - w.meta.created_mono_ns) / NS_PER_S,
        idle_s=_idle_s(w, clock_of(w)()),
        span_s=g.span_ns / NS_PER_S,
    )


def infos(selected: Iterable[str] | None = None, who: bool = True) -> list[Info]:
    """:func:`info` of each window (every one by default), with the bytes each takes in
    /dev/shm and, if ``who``, the processes that have it open (one pass over /proc)."""
    rows = [info(name) for name in (names() if selected is None else selected)]
    sizes = allocated_bytes([r.name for r in rows])
    for r in rows:
        r.allocated_bytes = sizes.get(r.name, 0)
    if who:
        me = os.getpid()  # this process maps nothing now, but never counts itself
        found = _attached.attached_many(r.name for r in rows)
        for r in rows:
            a = found[r.name]
            r.attached_pids = [p for p in a.pids if p != me]
            r.attached = len(r.attached_pids)
            r.attached_complete, r.attached_reason = a.complete, a.reason
    return rows


def allocated_bytes(selected: Iterable[str]) -> dict[str, int]:
    """Bytes each window takes in /dev/shm (``st_blocks * 512``, not its apparent size)."""
    wanted = {os.path.basename(path_of(n)): n for n in selected}
    out = dict.fromkeys(wanted.values(), 0)
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return out
    for entry in entries:
        name = wanted.get(entry.name)
        if name is None:
            continue
        try:
            out[name] += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue  # removed meanwhile
    return out


def shm_usage(rows: list[Info]) -> ShmUsage:
    """The /dev/shm filesystem's size, use and free space, and what ``rows`` take of it."""
    try:
        st = os.statvfs(SHM_DIR)
        size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
    except OSError:
        size = free = used = 0
    return ShmUsage(len(rows), sum(r.allocated_bytes for r in rows), used, free, size)


def _idle_s(w: Any, now_ns: int) -> float | None:
    """Seconds since the newest write, at least (None: never written). ``last_write_ns`` is
    never earlier than the newest write, which is what makes ``gc`` safe."""
    newest = w.last_write_ns()
    return None if newest is None else max(now_ns - newest, 0) / NS_PER_S


def _file_size(name: str) -> int:
    try:
        return os.stat(path_of(name), follow_symlinks=False).st_size
    except (OSError, ValueError):
        return 0


def shm_file_prefix() -> str:
    """What every segment file of this namespace starts with in /dev/shm."""
    return PREFIX + namespace()


# -- labels ------------------------------------------------------------------------------------


def ring_labels(w: Any) -> list[str]:
    """Each ring as "<span>/<bucket>", finest first; a limiter's span is its rate's period."""
    return [f"{format_ns(span)}/{format_ns(bucket)}" for span, bucket in _spans(w)]


def limiter_rates(w: Any) -> list[Rate]:
    """The rates of a limiter in force (empty for a window): on shared memory, the live ones."""
    g = geometry_of(w)
    if g.kind != "limiter":
        return []
    live = live_of(w)
    if live is not None:
        g = live.pop("geometry")
    return [Rate(r.limit, r.bucket_ns if r.log else r.bucket_ns * (r.n_buckets - 1)) for r in g.rings]


def live_of(w: Any) -> dict[str, Any] | None:
    """A shared-memory limiter's, token bucket's or concurrency's live limits
    (backends/shm/live.py): ``changes`` made since its segment was created (a move makes a new
    one: 1), when the last was (``changed``: Unix seconds, None: never), and its ``geometry``
    with the limits in force. None for anything else."""
    from ..backends.shm import ShmWindow, live

    backend = getattr(w, "_backend", None)
    live_roles = ("token-bucket", "concurrency")  # a limiter's kind, or these roles
    if not isinstance(backend, ShmWindow) or not (backend.geometry.kind == "limiter" or role_of(w) in live_roles):  # noqa: E501
        return None
    gen, changed_ns, _ = live.generation(backend)
    changes = gen & ~live.LIVE_MOVED
    return {"changes": changes, "changed": changed_ns / NS_PER_S if changes else None,
            "moved": bool(gen & live.LIVE_MOVED), "geometry": live.live_geometry(backend)}  # fmt: skip


def token_rates(w: Any) -> list[str]:
    """A token bucket's rate and burst, as ``ls`` shows them ("10/second burst 20"); else []."""
    g = geometry_of(w)
    if g.role != "token-bucket":
        return []
    rate, burst = token_rate_of(g)
    return [f"{rate} burst {burst}"]


def is_token_front(w: Any) -> bool:
    """A TokenBucket (what a Redis token bucket opens as: no window view)."""
    return hasattr(w, "burst") and not hasattr(w, "series")


def is_limiter_front(w: Any) -> bool:
    """A Limiter (what a Redis limiter opens as: no window view), not a Window."""
    return hasattr(w, "stats_all") and not hasattr(w, "series")


def geometry_of(w: Any) -> Any:
    """A Window's geometry; a Limiter's too (it has no public one: its backend's is read)."""
    g = getattr(w, "geometry", None)
    return g if g is not None else w._backend.geometry


def _spans(w: Any) -> list[tuple[int, int]]:
    """(span ns, bucket ns) per ring; an exact limiter's (a log of hit times): 1 ns."""
    g = geometry_of(w)
    if g.kind == "limiter":
        return [(r.bucket_ns, 1) if r.log else (r.bucket_ns * (r.n_buckets - 1), r.bucket_ns)
                for r in g.rings]  # fmt: skip
    return [(r.span_ns, r.bucket_ns) for r in g.rings]


def ring_for(w: Any, last: str | None) -> int:
    """The ring a read over ``last`` uses (Redis windows have one)."""
    pick = getattr(w, "resolution_for", None)
    return 0 if pick is None else int(pick(last))


# -- show / export -----------------------------------------------------------------------------


def snapshot(
    w: Any, key: str | None = None, last: str | None = None, top: int = 10, cpu: Any = None
) -> dict[str, Any]:
    """:func:`window_snapshot`, and for a limiter on a remote backend (or its host tier or local
    share) whether this host is on its local share (``fallback``: local_share.fallback_status)."""
    out = window_snapshot(w, key, last, top, cpu)
    if out.get("kind") == "limiter" or out.get("role") == "lease":
        name = out["name"].removesuffix(local_share.SUFFIX)
        status = local_share.fallback_status(name)
        if status is not None:
            out["fallback"] = status
    return out


def window_snapshot(
    w: Any, key: str | None = None, last: str | None = None, top: int = 10, cpu: Any = None
) -> dict[str, Any]:
    """Totals, rates and series per field for each ring (or only over ``last``); for a keyed
    window its ``top`` busiest keys; for a limiter, where those keys stand against each rate.
    A breaker, shedder or adaptive limiter also gets its :func:`role_view` under its role's
    name (``cpu``: a callable giving host millicpu or None, for a shedder's)."""
    if is_token_front(w):
        return _redis_tokens_snapshot(w, key, top)
    if is_limiter_front(w):
        return _redis_limiter_snapshot(w, key, top)
    g = w.geometry
    labels, rates = ring_labels(w), limiter_rates(w)
    out: dict[str, Any] = {"name": w.name, "kind": g.kind, "fields": list(g.fields), "key": key}
    role = out["role"] = role_of(w)
    if g.kind == "limiter" or role == "token-bucket":  # what it decided, if it keeps that
        out["decisions"] = decisions_of(w)
    live = live_of(w)
    if live is not None:  # its rates as they are now, and when they last changed (shmwin set)
        live.pop("geometry")
        out["live"] = live
    if role == "lease":  # a two-tier limiter's host tier: each key's lease, no buckets to sum
        view = out[role] = leases_view(w, top)
        out["resolutions"], out["keys"] = [], view["keys"]
        top_keys = view.pop("top")
        if key is not None:
            out["lease"]["key"] = next((v for k, v in top_keys if key_text(k) == key), None)
        out["top_field"], out["top"] = "served", [[key_text(k), v["served"]] for k, v in top_keys]
        return out
    if role == "distribution":  # buckets of bins, not sums: the role's own reading
        from .roles import distribution_view

        view = out[role] = distribution_view(w, top, key)
        view["top"] = [[key_text(k), *rest] for k, *rest in view.get("top", [])]
        out["resolutions"] = []
        out["keys"], out["top"] = view.get("keys"), []  # the view keeps its count: its lines say it
        return out
    if role in COUNTERS:  # per-key state: each key's value, no buckets to sum
        view = out[role] = counters_view(w, role, top)
        out["resolutions"] = []
        if key is None:
            out["keys"], out["top_field"] = view["keys"], g.fields[0]
            out["top"] = [[key_text(k), v] for k, v in view.pop("top")]
        else:
            view.pop("top")
            idle = view["burst"] if role == "token-bucket" else 0  # a key not shown: a full bucket
            out["value"] = next((v for k, v in counter_values(w, role) if k == key), idle)
        return out
    if role is not None:
        out[role] = role_view(w, role, cpu)
    if role in UNSUMMED:  # bookkeeping whose values are not counts: nothing to add up
        out["resolutions"] = []
        return out
    rows = []
    for i in [ring_for(w, last)] if last else range(len(g.rings)):
        row: dict[str, Any] = {"resolution": labels[i], "last": last or labels[i].partition("/")[0]}
        if rates:
            row.update(rate=str(rates[i]), limit=rates[i].limit)
        row["totals"] = {f: finite(v) for f, v in w.totals(last=last, key=key, resolution=i).items()}
        row["rates"] = {f: finite(w.rate(f, last=last, key=key, resolution=i)) for f in g.fields}
        row["series"] = (
            {}
            if g.rings[i].log
            else {  # an exact limiter keeps times, not buckets
                f: [finite(v) for v in w.series(f, key=key, resolution=i).tolist()] for f in g.fields
            }
        )
        rows.append(row)
    out["resolutions"] = rows
    if g.keyed and key is None:
        out["keys"] = len(w.keys())
        out["full"] = w.full_count()
        out["top_field"], busiest = _busiest(w, top)
        if rates:
            now_ns = clock_of(w)()
            out["top"] = [limiter_key(w, k, now_ns) for k, _ in busiest]
        else:
            out["top"] = [[key_text(k), finite(v)] for k, v in busiest]
    elif rates and key is not None:
        out["stats"] = limiter_key(w, key, clock_of(w)())
    return out


def _busiest(w: Any, n: int) -> tuple[str, list[tuple[Any, Any]]]:
    """The ``n`` busiest keys by the first field that any key has counts of."""
    for f in w.geometry.fields:
        found = w.top(n, f) if n else []
        if found:
            return f, found
    return w.geometry.fields[0], []


def limiter_key(w: Any, key: Any, now_ns: int) -> dict[str, Any]:
    """Where ``key`` stands against each rate of a limiter: used, remaining, and seconds until
    its oldest counted hit is forgotten (what ``Limiter.stats_all`` says, read lock-free from
    the buckets; ``now_ns`` is the window's clock just before the read)."""
    stats = []
    for i, (rate, label) in enumerate(zip(limiter_rates(w), ring_labels(w), strict=True)):
        if w.geometry.rings[i].log:  # exact: its hit times, each leaving 1 ns after one period
            entries, now_ns = w._backend.log_entries(i, key)
            reset_ns = min((t for t, _ in entries), default=now_ns - rate.period_ns - 1) + rate.period_ns + 1
            stats.append(_stat(rate, label, sum(h for _, h in entries), max(reset_ns - now_ns, 0) / NS_PER_S))
            continue
        bucket_ns = w.geometry.rings[i].bucket_ns
        series = w.series(key=key, resolution=i).tolist()
        used = int(sum(series))
        oldest = next((age for age, hits in enumerate(series) if hits), None)
        reset_ns = 0 if oldest is None else (now_ns // bucket_ns + 1 + oldest) * bucket_ns - now_ns
        stats.append(_stat(rate, label, used, max(reset_ns, 0) / NS_PER_S))
    return {"key": key_text(key), "rates": stats}


def _stat(rate: Rate, label: str, used: int, reset_s: float) -> dict[str, Any]:
    return {"rate": str(rate), "resolution": label, "limit": rate.limit, "used": used,
            "remaining": max(rate.limit - used, 0), "reset_s": round(reset_s, 3)}  # fmt: skip


def _redis_limiter_snapshot(lim: Any, key: str | None, top: int) -> dict[str, Any]:
    """A RedisLimiter: its rates, and where the ``top`` keys with the most hits stand (keys
    are found with SCAN, at most :data:`REDIS_SCAN_KEYS` of them)."""
    labels, rates, live = ring_labels(lim), limiter_rates(lim), lim._backend.live_view()  # + last change
    out: dict[str, Any] = {"name": lim.name, "kind": "limiter", "fields": ["hits"], "key": key, "live": live}
    out["resolutions"] = [
        {"resolution": label, "last": label.partition("/")[0], "rate": str(r), "limit": r.limit}
        for label, r in zip(labels, rates, strict=True)
    ]

    def entry(k: str) -> dict[str, Any]:
        found = zip(lim.stats_all(k), labels, strict=True)
        return {"key": k, "rates": [_stat(s.rate, label, s.used, s.reset_after) for s, label in found]}

    if key is not None:
        out["stats"] = entry(key)
        return out
    keys = redis_keys(lim.url, lim.name)
    entries = [entry(k) for k in keys]
    entries.sort(key=lambda e: (-e["rates"][-1]["used"], e["key"]))
    out["keys"] = sum(1 for e in entries if any(r["used"] for r in e["rates"]))
    out["top"] = [e for e in entries if any(r["used"] for r in e["rates"])][:top]
    return out


def _redis_tokens_snapshot(tb: Any, key: str | None, top: int) -> dict[str, Any]:
    """A Redis token bucket: its rate and burst, and the tokens left of the ``top`` keys whose
    bucket is not full (keys found with SCAN, at most :data:`REDIS_SCAN_KEYS`), as a shared
    memory one shows (``roles.tokens_view``)."""
    out: dict[str, Any] = {"name": tb.name, "kind": "window", "fields": ["tokens"], "key": key}
    out["role"], out["resolutions"] = "token-bucket", []
    found = sorted(((k, tb.stats(k).remaining) for k in redis_keys(tb.url, tb.name)), key=lambda kv: kv[1])
    found = [(k, v) for k, v in found if v < tb.burst]
    view = out["token-bucket"] = {
        "rate": str(tb.rate), "burst": tb.burst, "interval_s": geometry_of(tb).bucket_ns / NS_PER_S,
        "value": "tokens left", "keys": len(found), "total": sum(tb.burst - v for _, v in found),
    }  # fmt: skip
    if key is not None:
        out["value"] = tb.stats(key).remaining
        return out
    out["keys"], out["top_field"] = view["keys"], "tokens"
    out["top"] = [[k, v] for k, v in found[: max(top, 0)]]
    return out


def key_text(key: Any) -> str:
    """A key as text: bytes that are not UTF-8 are kept distinct as ``\\xNN`` escapes."""
    return key if isinstance(key, str) else bytes(key).decode("utf-8", "backslashreplace")


def finite(value: Any) -> Any:
    """A plain number for JSON: ints stay ints, non-finite floats become "nan"/"inf"/"-inf"."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


# -- Redis -------------------------------------------------------------------------------------

def redis_info(name: str, url: str) -> Info:
    """Describe one window or limiter kept on Redis (no segment: no size, stripes or creator)."""
    try:
        w = open_window(name, url)
    except (ShmwinError, OSError, ValueError) as exc:
        return Info(name, error=f"{type(exc).__name__}: {exc}")
    try:
        labels, g = ring_labels(w), geometry_of(w)
        if is_token_front(w):
            role, rates = "token-bucket", token_rates(w)
            return Info(name, kind="window", role=role, fields=["tokens"], rates=rates, mode="redis")
        if is_limiter_front(w):
            rates = [str(r) for r in limiter_rates(w)]
            return Info(name, kind="limiter", fields=["hits"], resolutions=labels, rates=rates, mode="redis")
        return Info(
            name, kind=g.kind, role=role_of(w), fields=list(g.fields), resolutions=labels, mode="redis",
            keys=len(w.keys()) if g.keyed else None, capacity=g.capacity or None, span_s=g.span_ns / NS_PER_S,
        )  # fmt: skip
    finally:
        w.close()
