"""What a window is *for*, when shmwin built it for something, and what that shows.

A breaker, a shedder and an adaptive limiter are made of ordinary windows and limiters. The
inspector (``shmwin ls/show/watch``) and the Prometheus export tell them apart by their
fields and by their neighbours' names, and read them here without a lock and without
writing (a shedder's in-flight window is counted over live processes without clearing the
keys of dead ones, which its workers do):

    breaker    a Breaker's counts: fields (accepts, failures, drops), unkeyed
    shedder    a Shedder's window: fields (passes, rt_us, drops), unkeyed
    in-flight  a shedder's ``NAME.flying`` (keyed, one field "flying"; any InFlight)
    adaptive   an AdaptiveLimiter's limiter: rates in units of 1000, beside ``NAME.health``
    health     that ``NAME.health`` window (fields ok, error)
    fixed-starts  the start records of limits' fixed windows (``PREFIX.fixedstart.P``): their
               values are times, not counts, so the tools show how many keys hold one and never
               sum them. This role is written in the segment's header (``Geometry.role``).

A segment records fields, not purposes: a window of yours with a breaker's fields is taken
for a breaker. Settings it does not record -- a breaker's k and protection, a shedder's CPU
threshold and cool-off, an adaptive limiter's policy -- are each process's own; what is
shown uses the defaults.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict
from typing import Any

from .duration import NS_PER_S, to_ns
from .errors import ShmwinError
from .segment import path_of

ROLES = ("breaker", "shedder", "in-flight", "adaptive", "health", "fixed-starts")
UNSUMMED = ("fixed-starts",)  # roles whose values the tools never add up


def role_of(w: Any) -> str | None:
    """``w``'s role (one of :data:`ROLES`), or None for a plain window or limiter."""
    from . import adaptive, breaker, inflight, shedder

    if not hasattr(w, "series"):  # a Redis limiter's front: a limiter, nothing more
        return None
    recorded = getattr(w.geometry, "role", "")
    if recorded:  # the header says it
        return str(recorded)
    if breaker.is_breaker(w):
        return "breaker"
    if getattr(w, "url", ""):  # the others live in this host's shared memory only
        return None
    g, name = w.geometry, w.name
    if shedder.is_shedder(w):
        return "shedder"
    if inflight.is_inflight(w):
        return "in-flight"
    if g.kind == "limiter" and _exists(name + adaptive.HEALTH_SUFFIX):
        return "adaptive" if _in_units(g) else None
    if name.endswith(adaptive.HEALTH_SUFFIX) and tuple(g.fields) == adaptive.HEALTH_FIELDS:
        limiter = name[: -len(adaptive.HEALTH_SUFFIX)]
        return "health" if _exists(limiter) and _adaptive_limiter(limiter) else None
    return None


def _in_units(g: Any) -> bool:
    """A limiter's rates in an adaptive limiter's units (whole multiples of its scale)."""
    from .adaptive import DEFAULT_SCALE

    return g.kind == "limiter" and all(r.limit % DEFAULT_SCALE == 0 for r in g.rings)


def _adaptive_limiter(name: str) -> bool:
    from .window import Window

    try:
        with Window.attach(name, ready_timeout=0.5) as w:
            return _in_units(w.geometry)
    except (ShmwinError, OSError, ValueError):
        return False


def role_view(w: Any, role: str, cpu: Any = None) -> dict[str, Any] | None:
    """What ``w`` shows in its ``role``, as plain values (None: not one after all).

    breaker: ``drop_ratio``, ``accepts``, ``failures``, ``drops``, ``total`` over the window;
    shedder: see :func:`shedder_view`; in-flight: ``in_flight`` and ``processes`` ``[(pid, n)]``;
    adaptive: :func:`shmwin.adaptive.describe`; health: ``of``, the limiter's name.
    """
    from . import adaptive, breaker, inflight

    if role == "breaker":
        stats = asdict(breaker.stats_of(w))
        return {**stats, "k": breaker.K, "protection": breaker.PROTECTION, "window_s": w.span_ns / NS_PER_S}
    if role == "shedder":
        return shedder_view(w, cpu)
    if role == "in-flight":
        found = inflight.live_counts(w)
        return {"in_flight": sum(n for _, n in found), "processes": found}
    if role == "adaptive":
        return adaptive.describe(w.name)
    if role == "health":
        return {"of": w.name[: -len(adaptive.HEALTH_SUFFIX)]}
    if role == "fixed-starts":
        return {"records": len(w.keys()), "counts": w.name.replace(".fixedstart.", ".fixed.", 1)}
    return None


def shedder_view(w: Any, cpu: Any = None) -> dict[str, Any]:
    """A shedder's inputs, read now from its window ``w`` and its ``NAME.flying``:

    - ``in_flight`` on the host over live processes, and per process (None: no ``NAME.flying``);
    - ``passes`` and ``drops`` over the window;
    - ``max_pass`` (per bucket) and ``min_rt_ms`` (None: nothing served) over its completed
      buckets, and the ``max_in_flight`` they give before the overload factor;
    - ``recent_drops``: drops within the last cool-off. A worker that dropped is hot for a
      cool-off after its last overloaded CPU reading, so some worker is hot while this is > 0;
    - ``cpu``: host millicpu from ``cpu()`` (None when not given or not measured yet), and
      the ``overload_factor`` it gives (what ``max_in_flight`` is multiplied by while hot).
    """
    from . import inflight, shedder
    from .window import Window

    processes = None
    try:
        with Window.attach(w.name + shedder.FLYING_SUFFIX, ready_timeout=0.5) as flying:
            processes = inflight.live_counts(flying) if inflight.is_inflight(flying) else None
    except (ShmwinError, OSError, ValueError):
        pass  # removed, or never made: in flight unknown
    max_pass, min_rt_ms = shedder.capacity(w)
    totals = w.totals()
    cool_off_ns = to_ns(shedder.DEFAULT_COOL_OFF, "cool_off")
    recent = w.series("drops")[-math.ceil(cool_off_ns / w.bucket_ns) :]
    reading = None if cpu is None else cpu()
    overload = shedder.overload_factor(reading or 0, shedder.DEFAULT_CPU_THRESHOLD)
    return {
        "in_flight": None if processes is None else sum(n for _, n in processes),
        "processes": processes,
        "passes": int(totals["passes"]),
        "drops": int(totals["drops"]),
        "max_pass": max_pass,
        "min_rt_ms": min_rt_ms,
        "max_in_flight": shedder.max_flight_of(max_pass, min_rt_ms, w.bucket_ns),
        "cpu": reading,
        "cpu_threshold": shedder.DEFAULT_CPU_THRESHOLD,
        "overload_factor": None if reading is None else overload,
        "recent_drops": int(recent.sum()),
        "cool_off_s": cool_off_ns / NS_PER_S,
        "window_s": w.span_ns / NS_PER_S,
        "bucket_s": w.bucket_ns / NS_PER_S,
    }


def _exists(name: str) -> bool:
    try:
        return os.path.lexists(path_of(name))
    except ValueError:  # not a name a window can have
        return False


__all__ = ["ROLES", "role_of", "role_view", "shedder_view"]
