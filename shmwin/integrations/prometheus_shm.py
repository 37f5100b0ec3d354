"""prometheus_client's metrics, every process's, in one shared-memory segment: no files.

    import shmwin.integrations.prometheus as shp
    shp.multiprocess("myapp")          # before metrics are created: values live in /dev/shm
    ...                                # Counter, Gauge, Histogram, Summary as usual
    shp.MultiProcessCollector(registry, "myapp")   # every process's values, merged

It plugs into ``prometheus_client.values.ValueClass``, the seam prometheus_client's own
multiprocess mode uses, and answers as its ``MultiProcessCollector`` does (sample names,
labels, ``pid``, cumulative buckets, every gauge ``multiprocess_mode``). The differences, and
why, are in docs/metrics.md.

Where values live (core/series.c): a counter's, a histogram bucket's or sum's, a summary's
count or sum is ONE cell shared by every process, added to by a lock-free compare-and-swap; a
gauge has a cell per (series, process lifetime), a lifetime being a process slot whose robust
mutex the process holds while it lives, so a scrape tells live from dead from the kernel. A
scrape reads each cell once: its cost follows series, not processes.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import values
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from ..backends.shm.roles import series as S
from ..backends.shm.segment import path_of
from ..errors import MetricMismatchError, SeriesIdentityError, WindowNotFoundError

try:  # part 1's windowed Summary (integrations/prometheus_summary.py), when it is there
    _summary: Any = importlib.import_module(__package__ + ".prometheus_summary")
except ImportError:  # pragma: no cover - until it lands
    _summary = None

LIVE_MODES = frozenset({"liveall", "livemin", "livemax", "livesum", "livemostrecent"})
NO_PID_MODES = frozenset({"min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
                          "livemostrecent"})  # fmt: skip
PidFn = Callable[[], int]
Labels = tuple[tuple[str, str], ...]  # sorted by label name, as prometheus_client keys them
SampleKey = tuple[str, Labels]

_stores: dict[str, S.SeriesStore] = {}  # this process's open metrics segments, by app name


def _store(app: str, **open_kw: Any) -> S.SeriesStore:
    store = _stores.get(app)
    if store is None or store.closed:
        store = _stores[app] = S.SeriesStore.open(app, **open_kw)
    return store


# -- the value class ------------------------------------------------------------------------------


def multiprocess(name: str, process_identifier: PidFn | None = None, **open_kw: Any) -> type:
    """Keep every prometheus_client value created from now on in app ``name``'s segment.

    ``process_identifier``: as prometheus_client's ``MultiProcessValue(process_identifier)``,
    the pid a gauge's values are labelled with (default: the real pid, followed across forks
    natively). ``open_kw``: the segment's capacity when this call creates it, ``max_series=``
    (default 100,000) and ``slots=`` (live processes at once, default 1,024)."""
    cls = value_class(name, process_identifier, **open_kw)
    values.ValueClass = cls
    return cls


def value_class(name: str, process_identifier: PidFn | None = None, **open_kw: Any) -> type:
    """The ValueClass :func:`multiprocess` installs, without installing it."""
    store = _store(name, **open_kw)

    class ShmwinValue:
        """prometheus_client's value class: each call returns a native SeriesValue."""

        _multiprocess = True

        def __new__(cls, typ: str, metric_name: str, name: str, labelnames: Iterable[str],
                    labelvalues: Iterable[str], help_text: str, multiprocess_mode: str = "",
                    **kwargs: Any) -> Any:  # fmt: skip
            mode = multiprocess_mode if typ == "gauge" else ""
            return make_value(store, process_identifier, typ, metric_name, name, list(labelnames),
                              list(labelvalues), help_text, mode)  # fmt: skip

    ShmwinValue.__qualname__ = f"ShmwinValue[{name}]"
    return ShmwinValue


def _identity(typ: str, mode: str, metric_name: str, name: str, labels: dict[str, str],
              help_text: str) -> bytes:  # fmt: skip
    for label, value in labels.items():
        if not isinstance(value, str) or not isinstance(label, str):
            raise SeriesIdentityError(f"{name}: label {label!r}={value!r} is not text")
    try:
        text = json.dumps([typ, mode, metric_name, name, labels, help_text], sort_keys=True)
        return text.encode("utf-8")
    except (TypeError, UnicodeEncodeError) as exc:  # a lone surrogate, a non-str name
        raise SeriesIdentityError(f"{name}: its identity cannot be stored: {exc}") from None


def _check_meaning(store: S.SeriesStore, typ: str, mode: str, name: str, labelnames: list[str]) -> None:
    """One sample name, one meaning in the whole app: a meta entry per name records (as a hash
    in its pid word) the type, gauge mode and label names the first process gave it."""
    meaning = json.dumps([typ, mode, labelnames]).encode()
    digest = store.hash(meaning) & ((1 << 63) - 1)
    record, _ = store.insert(json.dumps(["meta", name]).encode(), S.META, 0, digest)
    if record[5] != digest:
        raise MetricMismatchError(
            f"metric {name!r} is already in metrics segment {store.name!r} with another type, gauge mode "
            f"or label names than {typ} {mode + ' ' if mode else ''}{labelnames}: one name, one meaning "
            f"in every process (shp.reset() starts the segment afresh)")


def make_value(store: S.SeriesStore, pid_fn: PidFn | None, typ: str, metric_name: str, name: str,
               labelnames: list[str], labelvalues: list[str], help_text: str, mode: str) -> Any:  # fmt: skip
    """The native value of one series: a shared cell, or (a gauge) this lifetime's cell."""
    if len(labelnames) != len(labelvalues):
        raise ValueError(f"{name}: {len(labelnames)} label names, {len(labelvalues)} values")
    labels = dict(zip(labelnames, labelvalues, strict=True))
    identity = _identity(typ, mode, metric_name, name, labels, help_text)
    _check_meaning(store, typ, mode, name, labelnames)
    if typ != "gauge":
        record, _ = store.insert(identity, S.SHARED)
        return store.value(record[2], None, None, 0)
    binder = _LifetimeBinder(store, identity, pid_fn, mode in LIVE_MODES)
    cell, pid = binder(None)
    return store.value(cell, binder, pid_fn, pid)


@dataclass
class _LifetimeBinder:
    """A gauge's way to this process lifetime's cell: called by the native value after a fork
    (or when process_identifier answers another pid), and once at creation.

    A live-mode gauge's entry belongs to a process slot, not to a lifetime: the next lifetime of
    the slot adopts it (zeroed), since a dead lifetime's live gauges are never read again. So
    recycled workers cost live-mode gauges nothing, and a scrape reads at most slots x series of
    them. Other modes keep every lifetime's value, as prometheus_client keeps every pid's file.
    (With a process_identifier, pids are the caller's: entries are per pid, never adopted.)"""

    store: S.SeriesStore
    identity: bytes
    pid_fn: PidFn | None
    live_mode: bool

    def __call__(self, _value: Any) -> tuple[int, int]:
        pid = int(self.pid_fn()) if self.pid_fn is not None else os.getpid()
        slot, lifetime = self.store.lifetime(os.getpid())
        if self.live_mode and self.pid_fn is None:
            key = self.identity + f"\nslot {slot}".encode()
        else:
            key = self.identity + f"\n{lifetime} {pid}".encode()
        record, made = self.store.insert(key, S.LIFETIME, lifetime, pid)
        if not made and record[4] != lifetime:  # the slot's entry, a dead lifetime's: ours now
            self.store.adopt(record[0], lifetime, pid)
        return record[2], pid


# -- the collector ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Series:
    offset: int
    per_lifetime: bool  # a gauge's cell of one process lifetime (else shared by every process)
    typ: str
    mode: str
    metric_name: str
    name: str
    labels: Labels
    help: str


def _parse(record: S.Record, key: bytes) -> _Series | None:
    offset, kind = record[0], record[1]
    if kind == S.META:
        return None
    typ, mode, metric_name, name, labels, help_text = json.loads(key.split(b"\n", 1)[0])
    return _Series(offset, kind == S.LIFETIME, typ, mode, metric_name, name, tuple(sorted(labels.items())),
                   help_text)  # fmt: skip


class _Directory:
    """A scraper's view of one segment: each entry parsed once (the directory only grows), its
    cells read at every scrape in one native pass."""

    def __init__(self, store: S.SeriesStore):
        self.store = store
        self.inode = os.fstat(store.segment.fd).st_ino if store.segment.fd >= 0 else 0
        self.end = 0
        self.series: list[_Series] = []
        self.offsets: list[int] = []

    def refresh(self) -> None:
        self.end, new = self.store.entries(self.end)
        for record, key in new:
            s = _parse(record, key)
            if s is not None:
                self.series.append(s)
                self.offsets.append(s.offset)

    def read(self) -> Iterator[tuple[_Series, float, float, int]]:
        """Every series with its value, stamp and writer's pid; live modes: live lifetimes only."""
        self.refresh()
        for s, (value, stamp, live, pid) in zip(self.series, self.store.read(self.offsets), strict=True):
            if live or (s.per_lifetime and s.mode not in LIVE_MODES):
                yield s, value, stamp, pid


def _stale(d: _Directory, app: str) -> bool:
    """Was the app's segment unlinked (and maybe made anew) since d was opened?"""
    try:
        return os.stat(path_of(S.segment_name(app))).st_ino != d.inode
    except FileNotFoundError:
        return True


class MultiProcessCollector(Collector):
    """Every process's values of app ``name``, merged as prometheus_client's
    ``MultiProcessCollector`` merges its files: from any worker, the master or the CLI."""

    def __init__(self, registry: CollectorRegistry | None, name: str, **open_kw: Any):
        self.app = name
        self._open_kw = open_kw
        self._dir: _Directory | None = None
        if registry is not None:
            registry.register(self)

    def _directory(self) -> _Directory | None:
        if self._dir is not None and _stale(self._dir, self.app):
            self._dir = None
        if self._dir is None:
            try:
                store = S.SeriesStore.attach(self.app)
            except WindowNotFoundError:
                return None
            self._dir = _Directory(store)
        return self._dir

    def collect(self) -> Iterator[Metric]:
        d = self._directory()
        if d is not None:
            yield from merge(d.read())
        if _summary is not None and hasattr(_summary, "collect_summaries"):
            yield from _summary.collect_summaries(self.app)


def merge(read: Iterable[tuple[_Series, float, float, int]]) -> list[Metric]:
    """prometheus_client's merge, over series read once each: samples of one metric name
    grouped by label set (first seen first), gauges by mode, histogram buckets cumulated."""
    metrics: dict[str, Metric] = {}
    groups: dict[str, dict[Labels, dict[SampleKey, float]]] = {}
    stamps: dict[SampleKey, float] = {}
    buckets: dict[str, dict[Labels, dict[float, float]]] = {}
    for s, value, stamp, pid in read:
        metric = metrics.get(s.metric_name)
        if metric is None:
            metric = metrics[s.metric_name] = Metric(s.metric_name, s.help, s.typ)
            groups[s.metric_name] = defaultdict(dict)
            buckets[s.metric_name] = defaultdict(lambda: defaultdict(float))
        samples = groups[s.metric_name]
        if s.typ == "gauge":
            _merge_gauge(samples, stamps, s, value, stamp, pid)
        elif s.typ == "histogram" and s.name.endswith("_bucket"):
            bound = next((v for k, v in s.labels if k == "le"), None)
            without_le = tuple(kv for kv in s.labels if kv[0] != "le")
            if bound is not None:
                buckets[s.metric_name][without_le][float(bound)] += value
                samples[without_le]  # the group keeps its first-seen place
                continue
        else:
            group = samples[s.labels]
            group[(s.name, s.labels)] = group.get((s.name, s.labels), 0.0) + value
    for metric_name, metric in metrics.items():
        samples = groups[metric_name]
        for labels, by_le in buckets[metric_name].items():
            total = 0.0
            for le, value in sorted(by_le.items()):
                total += value
                samples[labels][(metric_name + "_bucket", (*labels, ("le", _go_float(le))))] = total
            samples[labels][(metric_name + "_count", labels)] = total
        metric.samples = [Sample(name, dict(labels), value)
                          for group in samples.values()
                          for (name, labels), value in group.items()]  # fmt: skip
    return list(metrics.values())


def _go_float(value: float) -> str:
    """A bucket bound as prometheus_client spells it in ``le``."""
    return str(floatToGoString(value))  # type: ignore[no-untyped-call]


def _merge_gauge(samples: dict[Labels, dict[SampleKey, float]], stamps: dict[SampleKey, float], s: _Series,
                 value: float, stamp: float, pid: int) -> None:  # fmt: skip
    """One lifetime's gauge value into its metric's samples, as its mode says."""
    if s.mode not in NO_PID_MODES:  # all, liveall: one sample per pid
        labels = (*s.labels, ("pid", str(pid)))
        samples[labels][(s.name, labels)] = value
        return
    group, key = samples[s.labels], (s.name, s.labels)
    if s.mode in ("min", "livemin"):
        group[key] = min(group.get(key, value), value)
    elif s.mode in ("max", "livemax"):
        group[key] = max(group.get(key, value), value)
    elif s.mode in ("sum", "livesum"):
        group[key] = group.get(key, 0.0) + value
    elif stamps.get(key, 0.0) < stamp:  # mostrecent: the latest set() wins (an inc()'s stamp is 0)
        group[key] = value
        stamps[key] = stamp


def exposition(app: str) -> str:
    """The text a scrape of app ``app``'s metrics serves (``shmwin export --metrics APP``)."""
    from prometheus_client import generate_latest

    registry = CollectorRegistry()
    collector = MultiProcessCollector(registry, app)
    if collector._directory() is None:
        raise WindowNotFoundError(f"no metrics segment for app {app!r} ({S.segment_name(app)})")
    return generate_latest(registry).decode()


# -- lifecycle ----------------------------------------------------------------------------------------


def mark_process_dead(pid: int, name: str) -> int:
    """Drop the live-mode gauges that ``pid`` wrote (what prometheus_client's
    ``mark_process_dead(pid, path)`` does to its files). Not needed: a dead process's live
    gauges leave the scrape by themselves; kept for gunicorn ``child_exit`` hooks and for
    ``process_identifier`` functions that fake pids. How many entries were dropped."""
    try:
        store = _store(name)
    except WindowNotFoundError:
        return 0
    d = _Directory(store)
    d.refresh()
    live_gauges = [s for s in d.series if s.per_lifetime and s.mode in LIVE_MODES]
    dropped = 0
    for s, (_, _, _, writer) in zip(live_gauges, store.read([s.offset for s in live_gauges]), strict=True):
        if writer == pid:
            store.drop(s.offset)
            dropped += 1
    return dropped


def reset(name: str) -> bool:
    """Remove app ``name``'s metrics segment: every count restarts from zero at the next
    creation. Values made before keep writing to the removed segment, unseen: call it before
    workers start (the gunicorn hooks do, with ``reset_metrics``). True if one was removed."""
    store = _stores.pop(name, None)
    if store is not None:
        store.close()
    return S.unlink(name)


__all__ = ["MultiProcessCollector", "exposition", "mark_process_dead", "merge", "multiprocess", "reset",
           "value_class"]  # fmt: skip
