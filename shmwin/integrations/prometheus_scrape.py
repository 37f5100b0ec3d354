"""The scrape of an app's metrics segment: prometheus_client's merge, over cells read once each.

A scraper parses each directory entry once (the directory only grows) into a plan: per metric
name, its samples in prometheus_client's order (label sets first seen first; a histogram's
``_sum``, its buckets by bound, then ``_count``), each naming the cells it sums. A scrape is then
one native pass over the cells (``SeriesStore.read``) and the plan filled in. Counters,
histograms and summaries have one shared cell per series: their samples cost the same whatever
the number of processes. Gauges have a cell per process lifetime (live modes: per process slot,
adopted by the next lifetime), merged by their mode as prometheus_client's
``MultiProcessCollector._accumulate_metrics`` does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from ..backends.shm.roles import series as S
from ..errors import CorruptSegmentError

LIVE_MODES = frozenset({"liveall", "livemin", "livemax", "livesum", "livemostrecent"})
NO_PID_MODES = frozenset({"min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
                          "livemostrecent"})  # fmt: skip
Labels = tuple[tuple[str, str], ...]  # sorted by label name, as prometheus_client keys them


@dataclass(frozen=True)
class Series:
    """One directory entry's identity, as the value class wrote it (prometheus_shm)."""

    index: int  # its place in the scrape's read
    per_lifetime: bool  # a gauge's cell of one process lifetime (else shared by every process)
    typ: str
    mode: str
    metric_name: str
    name: str
    labels: Labels
    help: str


def parse(index: int, record: S.Record, key: bytes, segment: str) -> Series | None:
    if record[1] == S.META:
        return None
    try:
        typ, mode, metric_name, name, labels, help_text = json.loads(key.split(b"\n", 1)[0])
        return Series(index, record[1] == S.LIFETIME, str(typ), str(mode), str(metric_name), str(name),
                      tuple(sorted((str(k), str(v)) for k, v in labels.items())), str(help_text))  # fmt: skip
    except (ValueError, TypeError, AttributeError) as exc:  # junk where an identity was written
        raise CorruptSegmentError(f"metrics segment {segment!r}: the entry at {record[0]} holds no "
                                  f"series identity ({exc})") from None  # fmt: skip


@dataclass
class _Family:
    """One metric name's samples, in order: (sample name, labels, the cells summed); for a
    histogram's buckets the running total is taken instead (cumulative, then ``_count``)."""

    name: str
    help: str
    typ: str
    fixed: list[tuple[str, dict[str, str], list[int], bool]] = field(default_factory=list)
    gauges: list[Series] = field(default_factory=list)


_GO_FLOAT: dict[float, str] = {}


def _go_float(value: float) -> str:
    """A bucket bound as prometheus_client spells it in ``le`` (cached: bounds repeat)."""
    text = _GO_FLOAT.get(value)
    if text is None:
        text = _GO_FLOAT[value] = str(floatToGoString(value))  # type: ignore[no-untyped-call]
    return text


def plan(series: list[Series]) -> list[_Family]:
    """The families and their samples, in prometheus_client's order, for these entries."""
    families: dict[str, _Family] = {}
    groups: dict[str, dict[Labels, dict[tuple[str, Labels], list[int]]]] = {}
    buckets: dict[str, dict[Labels, dict[float, list[int]]]] = {}
    for s in series:
        fam = families.get(s.metric_name)
        if fam is None:
            fam = families[s.metric_name] = _Family(s.metric_name, s.help, s.typ)
            groups[s.metric_name], buckets[s.metric_name] = {}, {}
        if s.typ == "gauge":
            fam.gauges.append(s)
            continue
        le = next((v for k, v in s.labels if k == "le"), None) if s.typ == "histogram" else None
        if le is not None:
            without_le = tuple(kv for kv in s.labels if kv[0] != "le")
            groups[s.metric_name].setdefault(without_le, {})  # the group keeps its first-seen place
            buckets[s.metric_name].setdefault(without_le, {}).setdefault(float(le), []).append(s.index)
        else:
            groups[s.metric_name].setdefault(s.labels, {}).setdefault((s.name, s.labels), []).append(s.index)
    for name, fam in families.items():
        for labels, samples in groups[name].items():
            fam.fixed += [(sname, dict(slabels), cells, False) for (sname, slabels), cells in samples.items()]
            by_bound = buckets[name].get(labels)
            if by_bound:
                for bound, cells in sorted(by_bound.items()):
                    bucket_labels = dict((*labels, ("le", _go_float(bound))))
                    fam.fixed.append((name + "_bucket", bucket_labels, cells, True))
                fam.fixed.append((name + "_count", dict(labels), [], True))
    return list(families.values())


def fill(families: list[_Family], cells: list[tuple[float, float, bool, int]]) -> Iterator[Metric]:
    """The metrics of one scrape: the plan with this read's values."""
    for fam in families:
        metric = Metric(fam.name, fam.help, fam.typ)
        running = 0.0
        samples = metric.samples
        for name, labels, indexes, cumulative in fam.fixed:
            value = 0.0
            for i in indexes:
                value += cells[i][0]
            if cumulative:  # a bucket adds to the running total; _count is the total
                running = running + value if indexes else running
                samples.append(Sample(name, labels, running))
                if not indexes:
                    running = 0.0
            else:
                samples.append(Sample(name, labels, value))
        if fam.gauges:
            samples += _gauge_samples(fam.gauges, cells)
        yield metric


def _gauge_samples(gauges: list[Series], cells: list[tuple[float, float, bool, int]]) -> list[Sample]:
    """One gauge family's samples, merged by its mode (one mode per name: the value class holds
    every process to it). Dead lifetimes are left out in the live modes."""
    merged: dict[tuple[str, Labels], float] = {}
    stamps: dict[tuple[str, Labels], float] = {}
    for s in gauges:
        value, stamp, live, pid = cells[s.index]
        mode = s.mode
        if not live and mode in LIVE_MODES:
            continue
        if mode not in NO_PID_MODES:  # all, liveall: one sample per pid
            merged[(s.name, (*s.labels, ("pid", str(pid))))] = value
            continue
        key = (s.name, s.labels)
        if mode in ("min", "livemin"):
            merged[key] = min(merged.get(key, value), value)
        elif mode in ("max", "livemax"):
            merged[key] = max(merged.get(key, value), value)
        elif mode in ("sum", "livesum"):
            merged[key] = merged.get(key, 0.0) + value
        elif stamps.get(key, 0.0) < stamp:  # mostrecent: the latest set() wins (an inc()'s stamp is 0)
            merged[key] = value
            stamps[key] = stamp
    return [Sample(name, dict(labels), value) for (name, labels), value in merged.items()]


class Directory:
    """A scraper's view of one segment (see the module's docstring)."""

    def __init__(self, store: S.SeriesStore):
        self.store = store
        self.inode = os.fstat(store.segment.fd).st_ino if store.segment.fd >= 0 else 0
        self.end = 0
        self.series: list[Series] = []
        self.offsets: list[int] = []
        self.families: list[_Family] = []

    def refresh(self) -> None:
        self.end, new = self.store.entries(self.end)
        for record, key in new:
            s = parse(len(self.series), record, key, self.store.name)
            if s is not None:
                self.series.append(s)
                self.offsets.append(record[0])
        if new:
            self.families = plan(self.series)

    def collect(self) -> Iterator[Metric]:
        self.refresh()
        return fill(self.families, self.store.read(self.offsets))
