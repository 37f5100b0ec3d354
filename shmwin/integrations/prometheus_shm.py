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

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import values
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from ..backends.shm.roles import series as S
from ..backends.shm.segment import path_of
from ..errors import MetricMismatchError, SeriesIdentityError, WindowNotFoundError
from .prometheus_scrape import LIVE_MODES, Directory
from .prometheus_summary import collect_summaries

PidFn = Callable[[], int]

_stores: dict[str, S.SeriesStore] = {}  # this process's open metrics segments, by app name


_reset_pending: set[str] = set()  # apps to reset right before this process first opens them


def _store(app: str, **open_kw: Any) -> S.SeriesStore:
    store = _stores.get(app)
    if store is not None and not store.closed and open_kw:
        store.say_capacity(**open_kw)
    if store is None or store.closed:
        if app in _reset_pending:  # a gunicorn master preloading its app: reset before any value
            _reset_pending.discard(app)
            S.unlink(app)
        store = _stores[app] = S.SeriesStore.open(app, **open_kw)
    return store


def reset_before_use(name: str) -> None:
    """Reset app ``name``'s metrics right before this process first opens them (its first
    metric, at the app's import), or at :func:`reset_pending`, whichever comes first. The gunicorn
    hooks ask it when the config is read: a preloaded app (``preload_app = True``) creates its
    metrics in the master before ``on_starting``, and its forked workers must inherit values of
    the fresh segment, not of a removed one."""
    if name not in _stores:
        _reset_pending.add(name)


def reset_pending(cancel: bool = False) -> list[str]:
    """Reset now the apps :func:`reset_before_use` named that no metric opened yet (or forget
    them, ``cancel``): the names of the segments removed."""
    pending, done = sorted(_reset_pending), []
    _reset_pending.clear()
    for name in [] if cancel else pending:
        if reset(name):
            done.append(name)
    return done


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
        try:  # JSON would keep a lone surrogate (escaped), and every later scrape would fail on it
            label.encode("utf-8"), value.encode("utf-8")
        except UnicodeEncodeError:
            raise SeriesIdentityError(f"{name}: label {label!r}={value!r} is not valid Unicode text "
                                      "(a lone surrogate)") from None  # fmt: skip
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
            f"in every process (shp.reset() starts the segment afresh)"
        )


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
    them. Other modes keep one entry per pid, as prometheus_client keeps one file per pid: a
    later process with the same pid (or process_identifier) goes on with its value. (Live modes
    with a process_identifier: one entry per lifetime and pid, never adopted.)"""

    store: S.SeriesStore
    identity: bytes
    pid_fn: PidFn | None
    live_mode: bool

    def __call__(self, _value: Any) -> tuple[int, int]:
        pid = int(self.pid_fn()) if self.pid_fn is not None else os.getpid()
        slot, lifetime = self.store.lifetime(os.getpid())
        by_slot = self.live_mode and self.pid_fn is None
        if by_slot:
            key = self.identity + f"\nslot {slot}".encode()
        elif self.live_mode:
            key = self.identity + f"\n{lifetime} {pid}".encode()
        else:  # one entry per pid, as prometheus_client's file per pid: a pid seen again (a worker
            # index as process_identifier, a reused pid) goes on with its value, never counted twice
            key = self.identity + f"\npid {pid}".encode()
        record, made = self.store.insert(key, S.LIFETIME, lifetime, pid)
        if by_slot and not made and record[4] != lifetime:  # the slot's entry, a dead lifetime's: ours now
            self.store.adopt(record[0], lifetime, pid)
        return record[2], pid


# -- the collector ----------------------------------------------------------------------------------


def _stale(d: Directory, app: str) -> bool:
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
        self._dir: Directory | None = None
        if registry is not None:
            registry.register(self)

    def _directory(self) -> Directory | None:
        if self._dir is not None and _stale(self._dir, self.app):
            self._dir = None
        if self._dir is None:
            try:
                store = S.SeriesStore.attach(self.app)
            except WindowNotFoundError:
                return None
            self._dir = Directory(store)
        return self._dir

    def collect(self) -> Iterator[Metric]:
        d = self._directory()
        if d is not None:
            yield from d.collect()
        yield from collect_summaries(self.app)  # shmwin's windowed Summary (quantiles), if any


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
    d = Directory(store)
    d.refresh()
    live = [d.offsets[s.index] for s in d.series if s.per_lifetime and s.mode in LIVE_MODES]
    read = store.read(live)
    dropped = [offset for offset, (_, _, _, writer) in zip(live, read, strict=True) if writer == pid]
    for offset in dropped:
        store.drop(offset)
    return len(dropped)


def reset(name: str) -> bool:
    """Remove app ``name``'s metrics segment: every count restarts from zero at the next
    creation. Values made before keep writing to the removed segment, unseen: call it before
    workers start (the gunicorn hooks do, with ``reset_metrics``). True if one was removed."""
    store = _stores.pop(name, None)
    if store is not None:
        store.close()
    return S.unlink(name)


__all__ = [
    "MultiProcessCollector",
    "exposition",
    "mark_process_dead",
    "multiprocess",
    "reset",
    "reset_before_use",
    "reset_pending",
    "value_class",
]
