"""What a window is *for*, when shmwin built it for something, and what that shows.

A breaker, a shedder and an adaptive limiter are made of ordinary windows and limiters. The
part that makes one records its role in the segment (``Geometry.role``, a word of the
shared-memory header, part of the geometry on Redis), so the inspector (``shmwin
ls/show/watch``) and the Prometheus export read it rather than guess from fields or names,
and read each one here without a lock and without writing (a shedder's in-flight window is
counted over live processes without clearing the keys of dead ones, which its workers do):

    breaker       a Breaker's counts: fields (accepts, failures, drops), unkeyed
    shedder       a Shedder's window: fields (passes, rt_us, drops), unkeyed
    in-flight     an InFlight's window (a shedder's ``NAME.flying``): keyed by process
    adaptive      an AdaptiveLimiter's limiter: rates in units of its scale, beside ``NAME.health``
    health        its own ``NAME.health`` window (fields ok, error)
    decisions     a limiter's ``NAME.decisions`` (:mod:`shmwin.front`): hits admitted,
                  rejected, and admitted near the limit, over its longest period
    fixed-window  limits' fixed windows of a ``shm://`` storage (``PREFIX.fixed.P``): each key's
                  row holds its window's start and count; shown: the count while the window
                  is live (0 after), as limits would read it
    sliding-counter  limits' sliding window counters (``PREFIX.sliding.P``): each key's row
                  holds a window index and two counts; shown: limits' weighted count now
                  (previous x the part of its window still inside the period + current,
                  floored), the number limits compares with the limit
    concurrency   a Concurrency's holders (``shmwin.Concurrency``): each key's row holds one
                  entry per holding process; shown: the slots of each key held now by live
                  processes (read under the key's lock, as ``count()``), and the limit
    token-bucket  a TokenBucket's keys: each key's row holds its GCRA arrival time; shown: the
                  whole tokens its bucket holds now, for the keys whose bucket is not full
    moving-log    limits' moving windows (``PREFIX.moving.L.P``): each key's hit times, in its
                  row and in chunks of the segment's chunk heap; shown: the hits of the last
                  period (read under each key's lock by the core), what limits compares with L
    lease         a two-tier limiter's host tier (``shm+redis://``): each key's row holds the
                  lease of hits the host took from Redis; shown: the leases live now and the
                  hits they hold unspent, the hits served locally, and the round trips to
                  Redis (leases taken, refusals), all keys and the keys that served most
    distribution  a Distribution's buckets of values (``shmwin.Distribution``, a shedder's
                  ``NAME.rt``); shown: per resolution the count, sum, min, max and p50, p90,
                  p99 over its span, and (keyed) the keys with the most values
    counter-cache Django's cache of int counters (``shmwin.integrations.django``): each key's row
                  holds a value and its expiry; shown: the live values, the keys with most
    fixed-starts  the start records of an older shmwin's fixed windows (``PREFIX.fixedstart.P``):
                  their values are times, not counts, so the tools show how many keys hold
                  one and never sum them

The counter roles' rows hold state, not buckets: the tools read each key's value here
(lock-free, generation-checked) and never through a window's bucket sums.

Settings a segment does not record -- a breaker's k and protection, a shedder's CPU threshold
and cool-off, an adaptive limiter's policy -- are each process's own; what is shown uses the
defaults.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from ..backends.shm.roles import ENGINES, ConcurrencyEngine, LeaseEngine
from ..errors import ShmwinError
from ..rate import NS_PER_S, to_ns

ROLES = ("breaker", "shedder", "in-flight", "adaptive", "health", "decisions", "fixed-window",
         "sliding-counter", "moving-log", "concurrency", "token-bucket", "fixed-starts", "lease",
         "distribution", "counter-cache")  # fmt: skip
UNSUMMED = ("fixed-starts",)  # roles whose values the tools never add up
# per-key state: values read by counter_values()
COUNTERS = ("fixed-window", "sliding-counter", "moving-log", "concurrency", "token-bucket", "counter-cache")
TOP_KEYS = 10
# what a counter role's value per key is (else limits' sliding counter's "weighted count")
VALUE_OF = {"fixed-window": "count in the live window", "moving-log": "hits in the last period",
            "counter-cache": "live value"}  # fmt: skip


def role_of(w: Any) -> str | None:
    """``w``'s role (one of :data:`ROLES`) as its segment records it, or None for a plain
    window or limiter (and a Redis limiter's front, which has no window view)."""
    if not hasattr(w, "series"):
        return None
    return str(w.geometry.role) or None


def role_view(w: Any, role: str, cpu: Any = None) -> dict[str, Any] | None:
    """What ``w`` shows in its ``role``, as plain values (None: not one after all).

    breaker: ``drop_ratio``, ``accepts``, ``failures``, ``drops``, ``total`` over the window;
    shedder: see :func:`shedder_view`; in-flight: ``in_flight`` and ``processes`` ``[(pid, n)]``;
    adaptive: :func:`shmwin.overload.adaptive.describe`; health: ``of``, the limiter's name.
    """
    from ..overload import adaptive, breaker, inflight

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
    if role == "decisions":
        from ..front import SUFFIX
        from ..front import read_decisions as read

        counts = read(w, w.name)._asdict()
        return {"of": w.name[: -len(SUFFIX)], **counts, "period_s": w.span_ns / NS_PER_S}
    if role in COUNTERS:
        return counters_view(w, role)
    if role == "fixed-starts":
        return {"records": len(w.keys()), "counts": w.name.replace(".fixedstart.", ".fixed.", 1)}
    if role == "lease":
        return leases_view(w)
    if role == "distribution":
        return distribution_view(w)
    return None


def distribution_view(w: Any, top: int = TOP_KEYS, key: Any = None) -> dict[str, Any]:
    """A distribution's resolutions (count, sum, min, max, p50/p90/p99) and busiest keys:
    :func:`shmwin.backends.shm.roles.distribution.view`."""
    from ..backends.shm.roles.distribution import DistributionEngine, view
    from ..geometry import resolution_name

    return view(DistributionEngine(w), [resolution_name(r) for r in w.geometry.rings], top, key)


def leases_view(w: Any, top: int = TOP_KEYS) -> dict[str, Any]:
    """A two-tier limiter's host tier: per key its lease words, read under the key's lock by the
    core (``lease_get``); ``live`` leases (unexpired, hits left) and the ``held`` hits they have
    unspent, ``served`` hits and ``round_trips`` (``leases`` taken + ``refusals``) over the
    segment's life, and the ``top`` keys by hits served, ``[key, {granted, spent, expires_s,
    served, leases, refusals}]``."""
    engine = LeaseEngine(w)
    now = engine.now_ns()
    rows: list[tuple[Any, dict[str, Any]]] = []
    for key, words in engine.values(now):
        lease_id, granted, spent, deadline_ns, *_, served, leases, refusals = words
        live = lease_id > 0 and now <= deadline_ns and spent < granted
        rows.append((key, {
            "granted": granted if live else 0, "spent": spent if live else 0,
            "expires_s": (deadline_ns - now) / NS_PER_S if live else 0.0,
            "served": served, "leases": leases, "refusals": refusals,
        }))  # fmt: skip
    rows.sort(key=lambda kv: kv[1]["served"], reverse=True)
    leases, refusals = sum(v["leases"] for _, v in rows), sum(v["refusals"] for _, v in rows)
    return {
        "limit": w.geometry.rings[0].limit,
        "period_s": w.geometry.bucket_ns / NS_PER_S,
        "keys": len(rows),
        "live": sum(1 for _, v in rows if v["granted"]),
        "held": sum(v["granted"] - v["spent"] for _, v in rows),
        "served": sum(v["served"] for _, v in rows),
        "leases": leases,
        "refusals": refusals,
        "round_trips": leases + refusals,
        "top": rows[: max(top, 0)],
    }


def decisions_of(w: Any) -> dict[str, Any] | None:
    """What a limiter or token bucket decided (its ``NAME.decisions`` window, see
    :mod:`shmwin.front`), as :func:`role_view` shows it; None if it keeps none."""
    from ..front import open_decisions as open_window
    from ..front import read_decisions as read

    try:
        tally = open_window(w.name, 1, create=False, clock=getattr(w, "_clock_arg", None))
    except (ShmwinError, OSError, ValueError):
        return None
    if tally is None:
        return None
    try:
        return {**read(tally, w.name)._asdict(), "period_s": tally.span_ns / NS_PER_S}
    finally:
        tally.close()


def counter_values(w: Any, role: str) -> list[tuple[Any, int]]:
    """``(key, value)`` of every live key of a counter role's segment, at the window's clock:
    a fixed window's count while it is live, a sliding counter's weighted count, a moving
    window's hits in the last period, a token bucket's tokens left (only the keys whose bucket
    is not full)."""
    engine = ENGINES[role](w)  # the role's reader: concurrency's counts holders now, over live processes
    return engine.values(engine.now_ns())


def counters_view(w: Any, role: str, top: int = TOP_KEYS) -> dict[str, Any]:
    """A counter role's segment: its period, its live keys, the sum of their values, and the
    ``top`` keys by value (``[key, value]``, largest first). A token bucket's: its rate and
    burst, the keys whose bucket is not full, the tokens taken from them (``total``), and
    the ``top`` keys by tokens left, fewest first."""
    if role == "token-bucket":
        return tokens_view(w, top)
    found = [(key, v) for key, v in counter_values(w, role) if v > 0]
    found.sort(key=lambda kv: kv[1], reverse=True)
    if role == "concurrency":
        return {
            "limit": ConcurrencyEngine(w).limit(),  # in force: changed live, maybe (shmwin set)
            "idle_s": w.geometry.bucket_ns / NS_PER_S,
            "value": "holders",
            "keys": len(found),
            "total": sum(v for _, v in found),
            "top": found[: max(top, 0)],
        }
    ring = w.geometry.rings[0]
    limit = {"limit": ring.limit} if role == "moving-log" else {}  # one segment per limit
    return {
        **limit,
        # a counter cache's: its longest timeout (its ring's limit)
        "period_s": (ring.limit if role == "counter-cache" else ring.bucket_ns) / NS_PER_S,
        "value": VALUE_OF.get(role, "weighted count"),
        "keys": len(found),
        "total": sum(v for _, v in found),
        "top": found[: max(top, 0)],
    }


def tokens_view(w: Any, top: int = TOP_KEYS) -> dict[str, Any]:
    """A token bucket's segment (see :func:`counters_view`)."""
    from ..geometry import token_rate_of

    rate, burst = token_rate_of(w.geometry)
    found = sorted(counter_values(w, "token-bucket"), key=lambda kv: kv[1])
    return {
        "rate": str(rate),
        "burst": burst,
        "interval_s": w.geometry.bucket_ns / NS_PER_S,
        "value": "tokens left",
        "keys": len(found),
        "total": sum(burst - v for _, v in found),
        "top": found[: max(top, 0)],
    }


def shedder_view(w: Any, cpu: Any = None) -> dict[str, Any]:
    """A shedder's inputs, read now from its window ``w`` and its ``NAME.flying``:

    - ``in_flight`` on the host over live processes, and per process (None: no ``NAME.flying``);
    - ``passes`` and ``drops`` over the window;
    - ``max_pass`` (per bucket) and ``min_rt_ms`` (None: nothing served; the shortest response,
      from ``NAME.rt``) over its completed buckets, and the ``max_in_flight`` they give before
      the overload factor;
    - ``recent_drops``: drops within the last cool-off. A worker that dropped is hot for a
      cool-off after its last overloaded CPU reading, so some worker is hot while this is > 0;
    - ``cpu``: host millicpu from ``cpu()`` (None when not given or not measured yet), and
      the ``overload_factor`` it gives (what ``max_in_flight`` is multiplied by while hot).
    """
    from ..overload import inflight, shedder
    from ..window import Window

    processes = None
    try:
        with Window.attach(w.name + shedder.FLYING_SUFFIX, ready_timeout=0.5) as flying:
            processes = inflight.live_counts(flying) if inflight.is_inflight(flying) else None
    except (ShmwinError, OSError, ValueError):
        pass  # removed, or never made: in flight unknown
    max_pass, min_rt_ms = shedder.capacity(w)
    try:  # the real minimum, from its NAME.rt, as the shedder reads it (an older one's: the mean)
        from ..distribution import Distribution

        with Distribution.attach(w.name + shedder.RT_SUFFIX, ready_timeout=0.5) as rt:
            min_rt_ms = shedder.min_rt_ms_of(rt)
    except (ShmwinError, OSError, ValueError):
        pass
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


__all__ = [
    "COUNTERS", "ROLES", "counter_values", "counters_view", "role_of", "role_view", "shedder_view",
    "tokens_view",
]  # fmt: skip
