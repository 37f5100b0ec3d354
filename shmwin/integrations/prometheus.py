"""A prometheus_client collector that reads shmwin windows straight from shared memory.

    from prometheus_client import REGISTRY
    from shmwin.integrations.prometheus import ShmwinCollector
    REGISTRY.register(ShmwinCollector())                    # every window on the host
    REGISTRY.register(ShmwinCollector(["api", "login-*"]))  # or these (names or globs)
    REGISTRY.register(ShmwinCollector(["routes"], top_keys=20))  # and its 20 busiest keys

Each scrape attaches, reads lock-free and detaches: no per-process files, nothing
that grows when workers are recycled (prometheus_client's multiprocess mode keeps a
file per pid), and a window that disappears simply stops being exported.
``shmwin export --format prometheus`` is this collector rendered by
``generate_latest``: one renderer for both.

Every family is a gauge (a sliding window goes down as well as up: no counters, and
no ``_total`` suffix). Labels, always in this order and style:

    window       the window's name
    resolution   "<span>/<bucket>" of one ring, e.g. "1m/1s"; a limiter's span is its rate's period
    field        a field of the window ("hits" for a limiter)
    key          one of the ``top_keys`` busiest keys (opt-in, 0 by default, at most 1000)
    outcome      a breaker's calls: accepted, failed or dropped (``shmwin_breaker_requests``)

Families: ``shmwin_window_value`` (the field's sum over the ring's span) and
``shmwin_window_rate_per_second``, per key ``shmwin_key_value`` and
``shmwin_key_rate_per_second``; ``shmwin_limiter_limit``; ``shmwin_window_keys``
(live keys), ``shmwin_window_size_bytes`` (bytes taken in /dev/shm),
``shmwin_window_info`` (kind, mode, dtype; value 1) and ``shmwin_window_readable``
(0 for a segment that cannot be read: ``shmwin ls`` says why). Breakers, shedders and
adaptive limiters (:mod:`shmwin.inspector.roles`) add ``shmwin_breaker_drop_ratio``,
``shmwin_breaker_requests`` (``outcome``: accepted, failed, dropped), ``shmwin_shedder_in_flight``,
``shmwin_shedder_passes``, ``shmwin_shedder_drops``, ``shmwin_shedder_min_rt_seconds``,
``shmwin_shedder_max_in_flight``, ``shmwin_adaptive_limit`` and ``shmwin_adaptive_factor``; a
limiter's decisions window, ``shmwin_limiter_decisions`` (``outcome``: admitted, rejected,
near_limit; labelled with the limiter's name); a Concurrency ``shmwin_concurrency_limit`` and
``shmwin_concurrency_holders`` (all keys, and per key for the ``top_keys`` keys with the most
holders); a two-tier limiter's host tier (role "lease", ``shm+redis://``)
``shmwin_lease_round_trips`` (``kind``: lease, refusal), ``shmwin_lease_served`` (hits served
locally) and ``shmwin_lease_held`` (``what``: leases, hits); a limiter on a remote backend with
``on_error="local"``, once its processes on this host met the backend away (its
``NAME.local.away`` record), ``shmwin_fallback_active`` (1 while this host enforces its local
share) and ``shmwin_fallback_since_seconds`` (Unix time the latest run of it began), labelled
with the limiter's name.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

from .. import local_share
from ..backends.shm.segment import names as shm_names
from ..errors import ShmwinError, WindowNotFoundError
from ..inspector import snapshots
from ..inspector.roles import COUNTERS, UNSUMMED, counters_view, role_of, role_view
from ..rate import format_ns

MAX_TOP_KEYS = 1000
_READ_ERRORS = (ShmwinError, OSError, ValueError, OverflowError)  # what one unreadable window raises

_WINDOW, _RES, _FIELD, _KEY = "window", "resolution", "field", "key"
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "shmwin_window_value": (
        "Sum of a field over the span of one resolution of a window (a limiter: hits counted).",
        (_WINDOW, _RES, _FIELD),
    ),
    "shmwin_window_rate_per_second": (
        "Per-second rate of a field over the span of one resolution of a window.",
        (_WINDOW, _RES, _FIELD),
    ),
    "shmwin_key_value": (
        "Sum of a field over the span of one resolution, for one of the busiest keys (opt-in).",
        (_WINDOW, _RES, _FIELD, _KEY),
    ),
    "shmwin_key_rate_per_second": (
        "Per-second rate of a field over one resolution, for one of the busiest keys (opt-in).",
        (_WINDOW, _RES, _FIELD, _KEY),
    ),
    "shmwin_limiter_limit": ("Hits a limiter allows per period (the resolution's span).", (_WINDOW, _RES)),
    "shmwin_window_keys": ("Keys with counts inside the window (keyed windows and limiters).", (_WINDOW,)),
    "shmwin_window_full_requests": (
        "Requests that met a full key table (no row for a new key), whatever on_full answered.",
        (_WINDOW,),
    ),
    "shmwin_window_size_bytes": ("Bytes the window takes in /dev/shm, extensions included.", (_WINDOW,)),
    "shmwin_window_info": (
        "A window's kind, write mode and value type (always 1).",
        (_WINDOW, "kind", "mode", "dtype"),
    ),
    "shmwin_window_readable": (
        "1 if the window's segment could be read, 0 if not (see shmwin ls).",
        (_WINDOW,),
    ),
    "shmwin_breaker_drop_ratio": (
        "Probability a breaker drops a call now, from its window (with k 1.5 and protection 5).",
        (_WINDOW,),
    ),
    "shmwin_breaker_requests": (
        "Calls in a breaker's window by outcome (accepted, failed, dropped; their sum is the total).",
        (_WINDOW, "outcome"),
    ),
    "shmwin_shedder_in_flight": ("Requests a shedder's live processes are running now.", (_WINDOW,)),
    "shmwin_shedder_passes": ("Requests a shedder's processes served over its window.", (_WINDOW,)),
    "shmwin_shedder_drops": ("Requests a shedder dropped over its window.", (_WINDOW,)),
    "shmwin_shedder_min_rt_seconds": (
        "Shortest response time served in the completed buckets of a shedder's window "
        "(none: nothing served).",
        (_WINDOW,),
    ),
    "shmwin_shedder_max_in_flight": (
        "Requests in flight a shedder lets in while the host is hot: max pass x min RT "
        "(before the overload factor).",
        (_WINDOW,),
    ),
    "shmwin_adaptive_limit": (
        "Hits an adaptive limiter allows per period now (its configured limit x the health factor).",
        (_WINDOW, _RES),
    ),
    "shmwin_adaptive_factor": (
        "Share of its configured rate an adaptive limiter allows now (1: all of it).",
        (_WINDOW,),
    ),
    "shmwin_limiter_decisions": (
        "A limiter's hits over its longest period, by outcome: admitted, rejected, or near_limit "
        "(admitted with at most a fifth of a limit left; also counted as admitted). In shadow mode "
        "what enforcement would have done.",
        (_WINDOW, "outcome"),
    ),
    "shmwin_concurrency_limit": ("Holders a Concurrency allows per key at once.", (_WINDOW,)),
    "shmwin_lease_round_trips": (
        "A two-tier limiter's round trips to Redis from this host: leases taken, refusals.",
        (_WINDOW, "kind"),
    ),
    "shmwin_lease_served": ("Hits a two-tier limiter's host served from its leases.", (_WINDOW,)),
    "shmwin_lease_held": (
        "Leases a two-tier limiter's host holds now (live), and their unspent hits.",
        (_WINDOW, "what"),
    ),
    "shmwin_fallback_active": (
        "1 while this host's processes enforce their local share of a limiter whose backend is "
        "away (on_error='local'), else 0.",
        (_WINDOW,),
    ),
    "shmwin_fallback_since_seconds": (
        "Unix time the latest run of a limiter's local share on this host began (on_error='local').",
        (_WINDOW,),
    ),
    "shmwin_distribution": (
        "A distribution's values over the span of one resolution: quantiles (relative error as the "
        "distribution's), count and sum (exact).",
        (_WINDOW, _RES),
    ),
    "shmwin_distribution_min": (
        "Least value of a distribution over one resolution's span (exact).",
        (_WINDOW, _RES),
    ),
    "shmwin_distribution_max": (
        "Greatest value of a distribution over one resolution's span (exact).",
        (_WINDOW, _RES),
    ),
    "shmwin_concurrency_holders": (
        "Slots a Concurrency's live processes hold now: all keys, or one key (the top_keys keys).",
        (_WINDOW, _KEY),
    ),
}
OUTCOMES = (("accepted", "accepts"), ("failed", "failures"), ("dropped", "drops"))


class ShmwinCollector(Collector):
    """Gauges of every window (or of ``names``: names or globs), read at each scrape.

    ``top_keys`` busiest keys of keyed windows get series of their own (0: none); each one
    is ``resolutions x fields x 2`` series, so keep it small. ``backend`` reads a Redis
    server's windows instead of this host's.
    """

    def __init__(self, names: Iterable[str] | None = None, *, top_keys: int = 0, backend: str | None = None):
        if isinstance(top_keys, bool) or not isinstance(top_keys, int) or not 0 <= top_keys <= MAX_TOP_KEYS:
            raise ValueError(f"top_keys must be an int in 0..{MAX_TOP_KEYS}, not {top_keys!r}")
        if isinstance(names, str):  # one name or glob, not its characters
            names = [names]
        self._names = None if names is None else list(names)
        self._top_keys = top_keys
        self._backend = backend

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families, without samples: registering never reads a window."""
        yield from _families().values()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        families = _families()
        available = shm_names() if self._backend is None else snapshots.redis_names(self._backend)
        selected = [n for n in available if _matches(n, self._names)]
        sizes = snapshots.allocated_bytes(selected) if self._backend is None else {}
        for name in selected:
            if self._backend is None and _is_metrics_segment(name):
                continue  # an app's prometheus_client values: its MultiProcessCollector exports them
            try:
                w = snapshots.open_window(name, self._backend)
            except WindowNotFoundError:
                continue  # gone: it simply stops being exported
            except _READ_ERRORS:
                families["shmwin_window_readable"].add_metric([name], 0)
                continue
            # each window's samples are gathered apart and kept only if all of it reads: one
            # window that fails midway (junk, a sum past int64) is readable 0, the rest scrape
            mine = _families()
            try:
                _add_window(mine, w, self._top_keys, sizes.get(name))
            except _READ_ERRORS:
                families["shmwin_window_readable"].add_metric([name], 0)
                continue
            finally:
                w.close()
            for family_name, family in mine.items():
                families[family_name].samples.extend(family.samples)
        if self._backend is None:  # a limiter asked for by its name: its host's record says its fallback
            chosen = set(selected)
            for name in available:
                limiter = name.removesuffix(local_share.AWAY_SUFFIX)
                if limiter != name and name not in chosen and _matches(limiter, self._names):
                    _add_fallback(families, limiter)
        yield from (f for f in families.values() if f.samples)


def exposition(names: Iterable[str] | None = None, *, top_keys: int = 0, backend: str | None = None) -> str:
    """What a scrape of :class:`ShmwinCollector` returns (text format 0.0.4)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(ShmwinCollector(names, top_keys=top_keys, backend=backend))
    return generate_latest(registry).decode()


COUNTER_FAMILIES = frozenset({"shmwin_window_full_requests"})  # exported as counters (``_total``)


def _families() -> dict[str, GaugeMetricFamily]:
    out: dict[str, Any] = {}
    for name, (text, labels) in FAMILIES.items():
        kind: Any = CounterMetricFamily if name in COUNTER_FAMILIES else GaugeMetricFamily
        if name == "shmwin_distribution":  # quantile samples, _count and _sum (prometheus_summary.py)
            kind = SummaryMetricFamily
        out[name] = kind(name, text, labels=labels)
    return out


def _is_metrics_segment(name: str) -> bool:
    from ..backends.shm.roles import series

    return name.endswith(series.SUFFIX) and series.peek(name) is not None


def _matches(name: str, patterns: list[str] | None) -> bool:
    return patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _add_fallback(families: dict[str, GaugeMetricFamily], limiter: str) -> None:
    status = local_share.fallback_status(limiter)
    if status is not None:
        families["shmwin_fallback_active"].add_metric([limiter], int(status["active"]))
        families["shmwin_fallback_since_seconds"].add_metric([limiter], status["since"])


def _add_window(families: dict[str, GaugeMetricFamily], w: Any, top_keys: int, size: int | None) -> None:
    name = w.name
    families["shmwin_window_readable"].add_metric([name], 1)
    if snapshots.is_token_front(w):  # a Redis token bucket: its burst only
        families["shmwin_limiter_limit"].add_metric([name, str(w.rate)], w.burst)
        return
    if snapshots.is_limiter_front(w):  # a Redis limiter: its limits only
        for label, rate in zip(snapshots.ring_labels(w), snapshots.limiter_rates(w), strict=True):
            families["shmwin_limiter_limit"].add_metric([name, label], rate.limit)
        return
    if name.endswith(local_share.AWAY_SUFFIX):  # a limiter's record of its backend away
        _add_fallback(families, name.removesuffix(local_share.AWAY_SUFFIX))
    g = w.geometry
    families["shmwin_window_info"].add_metric([name, g.kind, g.mode, g.dtype], 1)
    if size is not None:
        families["shmwin_window_size_bytes"].add_metric([name], size)
    labels = snapshots.ring_labels(w)
    role = role_of(w)
    if role in UNSUMMED:  # bookkeeping (times, not counts): no limits or sums to show
        families["shmwin_window_keys"].add_metric([name], len(w.keys()))
        return
    if role == "lease":  # a two-tier limiter's host tier: leases, hits served, round trips
        view = role_view(w, role)
        assert view is not None
        families["shmwin_window_keys"].add_metric([name], view["keys"])
        families["shmwin_lease_round_trips"].add_metric([name, "lease"], view["leases"])
        families["shmwin_lease_round_trips"].add_metric([name, "refusal"], view["refusals"])
        families["shmwin_lease_served"].add_metric([name], view["served"])
        families["shmwin_lease_held"].add_metric([name, "leases"], view["live"])
        families["shmwin_lease_held"].add_metric([name, "hits"], view["held"])
        return
    if role == "distribution":  # a summary per resolution, min and max (prometheus_summary.py)
        from .prometheus_summary import add_distribution

        add_distribution(families, w, labels)
        return
    if role == "concurrency":  # holders now: all keys ("" key), and the busiest keys'
        held = counters_view(w, role, top_keys)
        families["shmwin_window_keys"].add_metric([name], held["keys"])
        families["shmwin_window_full_requests"].add_metric([name], w.full_count())
        families["shmwin_concurrency_limit"].add_metric([name], held["limit"])
        families["shmwin_concurrency_holders"].add_metric([name, ""], float(held["total"]))
        for key, value in held["top"]:
            families["shmwin_concurrency_holders"].add_metric([name, snapshots.key_text(key)], float(value))
        return
    if role in COUNTERS:  # per-key state: the keys counting, their sum, the busiest keys' values
        counters = counters_view(w, role, top_keys)
        label, field = format_ns(w.geometry.bucket_ns), g.fields[0]  # the period
        if role == "token-bucket":  # the keys below a full bucket, tokens taken, each key's tokens left
            label = counters["rate"]
            families["shmwin_limiter_limit"].add_metric([name, label], counters["burst"])
        families["shmwin_window_keys"].add_metric([name], counters["keys"])
        families["shmwin_window_full_requests"].add_metric([name], w.full_count())
        families["shmwin_window_value"].add_metric([name, label, field], float(counters["total"]))
        if "limit" in counters:  # a moving window's segment is one limit's
            families["shmwin_limiter_limit"].add_metric([name, label], counters["limit"])
        for key, value in counters["top"]:
            text = snapshots.key_text(key)
            families["shmwin_key_value"].add_metric([name, label, field, text], float(value))
        return
    for label, rate in zip(labels, snapshots.limiter_rates(w), strict=False):  # no rates: a window
        families["shmwin_limiter_limit"].add_metric([name, label], rate.limit)
    keys: list[tuple[str, Any]] = []
    if g.keyed:
        families["shmwin_window_keys"].add_metric([name], len(w.keys()))
        families["shmwin_window_full_requests"].add_metric([name], w.full_count())
        seen: set[str] = set()
        for key, _ in w.top(top_keys, g.fields[0]) if top_keys else ():
            text = snapshots.key_text(key)
            if text in seen:  # spelled alike (b"abc" and "abc"): each its own series, by its repr
                text = repr(key)
            if text not in seen:
                seen.add(text)
                keys.append((text, key))
    view = role_view(w, role) if role else None
    if role and view is not None:
        _add_role(families, name, role, view, labels)
    for i, label in enumerate(labels):
        for f in g.fields:
            families["shmwin_window_value"].add_metric([name, label, f], float(w.total(f, resolution=i)))
            rate = w.rate(f, last=None, resolution=i)
            families["shmwin_window_rate_per_second"].add_metric([name, label, f], rate)
            for text, key in keys:
                value = float(w.total(f, key=key, resolution=i))
                families["shmwin_key_value"].add_metric([name, label, f, text], value)
                rate = w.rate(f, last=None, key=key, resolution=i)
                families["shmwin_key_rate_per_second"].add_metric([name, label, f, text], rate)


def _add_role(
    families: dict[str, GaugeMetricFamily], name: str, role: str, view: dict[str, Any], labels: list[str]
) -> None:
    """A breaker's drop ratio and calls, a shedder's inputs, an adaptive limiter's limits now."""
    if role == "breaker":
        families["shmwin_breaker_drop_ratio"].add_metric([name], view["drop_ratio"])
        for outcome, count in OUTCOMES:
            families["shmwin_breaker_requests"].add_metric([name, outcome], view[count])
    elif role == "shedder":
        if view["in_flight"] is not None:
            families["shmwin_shedder_in_flight"].add_metric([name], view["in_flight"])
        families["shmwin_shedder_passes"].add_metric([name], view["passes"])
        families["shmwin_shedder_drops"].add_metric([name], view["drops"])
        if view["min_rt_ms"] is not None:
            families["shmwin_shedder_min_rt_seconds"].add_metric([name], view["min_rt_ms"] / 1000)
        families["shmwin_shedder_max_in_flight"].add_metric([name], view["max_in_flight"])
    elif role == "decisions":
        for outcome in ("admitted", "rejected", "near_limit"):
            families["shmwin_limiter_decisions"].add_metric([view["of"], outcome], view[outcome])
    elif role == "adaptive":
        for label, limit in zip(labels, view["effective"], strict=True):
            families["shmwin_adaptive_limit"].add_metric([name, label], limit)
        families["shmwin_adaptive_factor"].add_metric([name], view["factor"])


# prometheus_client's own metrics in shared memory (issue 29, part 2): shmwin.integrations.prometheus_shm
from .prometheus_shm import MultiProcessCollector as MultiProcessCollector  # noqa: E402
from .prometheus_shm import mark_process_dead as mark_process_dead  # noqa: E402
from .prometheus_shm import multiprocess as multiprocess  # noqa: E402
from .prometheus_shm import reset as reset  # noqa: E402
from .prometheus_shm import value_class as value_class  # noqa: E402
from .prometheus_summary import Summary as Summary  # noqa: E402  (windowed quantiles, docs/distribution.md)
