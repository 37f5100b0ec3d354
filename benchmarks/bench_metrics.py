"""prometheus_client's metrics in shmwin's shared memory against prometheus_client's own modes.

    .venv/bin/python benchmarks/bench_metrics.py [--quick]

1 process: ns per ``Counter.inc()`` and ``Histogram.observe()`` (10 buckets) with
prometheus_client's single-process values (MutexValue), its multiprocess values (mmap files)
and shmwin's (``shp.value_class``), interleaved, median over rounds. Targets: shmwin's inc()
<= 1.1x the single-process inc(), >= 3x faster than the multiprocess one.

Scrape: 50 families x 10 label sets (35 counters, 10 livesum gauges, 5 histograms of 10
buckets) written by every lifetime of 16 processes, each recycled 4 times (64 lifetimes), then
``generate_latest`` of a registry holding the collector, median of several scrapes.
prometheus_client's workload runs ``mark_process_dead`` for every dead pid, as its gunicorn
recipe does. shmwin's is also run at 640 lifetimes (16 x 40). Targets: >= 20x faster than
MultiProcessCollector at 64; at 640, <= 1.2x its own time at 64.

Bytes: /dev/shm (shmwin) or the directory's files (prometheus_client), st_blocks x 512, for
1,000 series of one type written by one process, per series; and each workload's total above.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

from _harness import fresh_loop, no_gc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client import multiprocess as pc_mp

import shmwin.integrations.prometheus as shp

FORK = mp.get_context("fork")
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)  # and +Inf: 10 buckets
LABELS = [f"v{i}" for i in range(10)]


# -- 1 process: inc() and observe() ------------------------------------------------------------------


def _metrics(value_class: object, tag: str) -> tuple[Counter, Histogram]:
    values.ValueClass = value_class
    counter = Counter(f"c_{tag}", "help", registry=None)
    return counter, Histogram(f"h_{tag}", "help", buckets=BUCKETS, registry=None)


def bench_calls(n: int, rounds: int, app: str, pc_dir: str) -> dict[str, dict[str, float]]:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = pc_dir
    contenders = {
        "prometheus_client, 1 process": _metrics(values.MutexValue, "single"),
        "prometheus_client, multiprocess (files)": _metrics(values.MultiProcessValue(), "files"),
        "shmwin (shared memory)": _metrics(shp.value_class(app), "shm"),
    }
    values.ValueClass = values.MutexValue
    out: dict[str, dict[str, list[float]]] = {name: {"inc": [], "observe": []} for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        if r % 2:
            order.reverse()
        for name, (counter, histogram) in order:
            inc_loop, observe_loop = fresh_loop("call"), fresh_loop("call_arg")
            inc, observe = counter.inc, histogram.observe
            out[name]["inc"].append(no_gc(lambda f=inc_loop, i=inc: f(i, None, n)) / n * 1e9)  # type: ignore[misc]
            out[name]["observe"].append(no_gc(lambda f=observe_loop, o=observe: f(o, 0.3, n)) / n * 1e9)  # type: ignore[misc]
    return {name: {op: statistics.median(v) for op, v in ops.items()} for name, ops in out.items()}


# -- scrape: 50 families x 10 label sets over many lifetimes ------------------------------------------


def _families(tag: str) -> list[tuple[str, object]]:
    fams: list[tuple[str, object]] = []
    fams += [("c", Counter(f"{tag}_c{i}", "help", ["v"], registry=None)) for i in range(35)]
    fams += [("g", Gauge(f"{tag}_g{i}", "help", ["v"], multiprocess_mode="livesum", registry=None))
             for i in range(10)]  # fmt: skip
    fams += [("h", Histogram(f"{tag}_h{i}", "help", ["v"], buckets=BUCKETS, registry=None)) for i in range(5)]
    return fams


def _lifetime(fams: list[tuple[str, object]]) -> None:
    for kind, metric in fams:
        for v in LABELS:
            child = metric.labels(v)  # type: ignore[attr-defined]
            if kind == "c":
                child.inc()
            elif kind == "g":
                child.set(1)
            else:
                child.observe(0.2)
    os._exit(0)


def _write_lifetimes(fams: list[tuple[str, object]], procs: int, recycles: int,
                     on_dead: Callable[[int], None]) -> None:  # fmt: skip
    for _ in range(recycles):
        wave = [FORK.Process(target=_lifetime, args=(fams,)) for _ in range(procs)]
        for p in wave:
            p.start()
        for p in wave:
            p.join()
            assert p.exitcode == 0
            on_dead(p.pid)


def _scrape_time(registry: CollectorRegistry, times: int) -> tuple[float, float]:
    """Median seconds of the collector's collect() alone, and of generate_latest (the text)."""
    collector = next(iter(registry._collector_to_names))  # the one collector registered
    collect, text = [], []
    for _ in range(times):
        t = time.perf_counter()
        list(collector.collect())
        collect.append(time.perf_counter() - t)
        t = time.perf_counter()
        generate_latest(registry)
        text.append(time.perf_counter() - t)
    return statistics.median(collect), statistics.median(text)


def _dir_bytes(path: str) -> int:
    return sum(os.stat(os.path.join(path, f)).st_blocks * 512 for f in os.listdir(path))


def _shm_bytes(app: str) -> int:
    return os.stat(f"/dev/shm/shmwin.{app}.metrics").st_blocks * 512


def bench_scrape(procs: int, recycles: int, times: int) -> dict[str, object]:
    out: dict[str, object] = {}
    pc_dir = tempfile.mkdtemp(prefix="bench-prom-")
    try:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = pc_dir
        values.ValueClass = values.MultiProcessValue()
        fams = _families("pc")
        _write_lifetimes(fams, procs, recycles, lambda pid: pc_mp.mark_process_dead(pid, pc_dir))
        registry = CollectorRegistry()
        pc_mp.MultiProcessCollector(registry, pc_dir)
        out["pc_64"] = _scrape_time(registry, times)
        out["pc_64_bytes"] = _dir_bytes(pc_dir)
        out["pc_64_files"] = len(os.listdir(pc_dir))
    finally:
        shutil.rmtree(pc_dir)
    for lifetimes, label in ((recycles, "64"), (recycles * 10, "640")):
        app = f"bench-metrics-{uuid.uuid4().hex[:8]}"
        try:
            values.ValueClass = shp.value_class(app)
            fams = _families("shm")
            _write_lifetimes(fams, procs, lifetimes, lambda pid: None)
            registry = CollectorRegistry()
            shp.MultiProcessCollector(registry, app)
            _scrape_time(registry, 1)  # the scraper parses each entry once: its first scrape
            out[f"shm_{label}"] = _scrape_time(registry, times)
            out[f"shm_{label}_bytes"] = _shm_bytes(app)
        finally:
            values.ValueClass = values.MutexValue
            shp.reset(app)
    return out


# -- bytes per series ----------------------------------------------------------------------------------------


def _one_type(kind: str, series: int) -> list[Callable[[], None]]:
    tag = f"b{kind}{uuid.uuid4().hex[:6]}"
    if kind == "counter":
        m = Counter(tag, "help", ["v"], registry=None)
        return [m.labels(str(i)).inc for i in range(series)]
    if kind == "gauge":
        m = Gauge(tag, "help", ["v"], multiprocess_mode="livesum", registry=None)
        return [lambda i=i: m.labels(str(i)).set(1) for i in range(series)]
    m = Histogram(tag, "help", ["v"], buckets=BUCKETS, registry=None)
    return [lambda i=i: m.labels(str(i)).observe(0.2) for i in range(series)]


def bench_bytes(series: int) -> dict[str, tuple[float, float]]:
    out = {}
    for kind in ("counter", "gauge", "histogram"):
        pc_dir = tempfile.mkdtemp(prefix="bench-prom-")
        app = f"bench-bytes-{uuid.uuid4().hex[:8]}"
        try:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = pc_dir
            values.ValueClass = values.MultiProcessValue()
            for write in _one_type(kind, series):
                write()
            pc = _dir_bytes(pc_dir) / series
            values.ValueClass = shp.value_class(app)
            empty = _shm_bytes(app)
            for write in _one_type(kind, series):
                write()
            out[kind] = (pc, (_shm_bytes(app) - empty) / series)
        finally:
            values.ValueClass = values.MutexValue
            shutil.rmtree(pc_dir)
            shp.reset(app)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n, rounds, times = (20_000, 3, 2) if args.quick else (200_000, 9, 7)
    app = f"bench-calls-{uuid.uuid4().hex[:8]}"
    pc_dir = tempfile.mkdtemp(prefix="bench-prom-")
    try:
        calls = bench_calls(n, rounds, app, pc_dir)
    finally:
        shutil.rmtree(pc_dir)
        shp.reset(app)
    single, files, shm = (calls[k] for k in calls)
    print("| values | inc() ns | observe() ns |\n| --- | --- | --- |")
    for name, v in calls.items():
        print(f"| {name} | {v['inc']:.0f} | {v['observe']:.0f} |")
    print(f"\nshmwin inc(): {shm['inc'] / single['inc']:.2f}x the 1-process inc() (target <= 1.1x), "
          f"{files['inc'] / shm['inc']:.1f}x faster than multiprocess (target >= 3x); observe(): "
          f"{shm['observe'] / single['observe']:.2f}x and {files['observe'] / shm['observe']:.1f}x\n")
    scrape = bench_scrape(16, 4, times)
    print("| scrape, 50 families x 10 label sets | lifetimes | collect() ms | text ms | bytes |")
    print("| --- | --- | --- | --- | --- |")
    rows = (("prometheus_client MultiProcessCollector", "pc_64", "64"),
            ("shmwin MultiProcessCollector", "shm_64", "64"),
            ("shmwin MultiProcessCollector", "shm_640", "640"))  # fmt: skip
    for label, key, lifetimes in rows:
        collect, text = scrape[key]  # type: ignore[misc]
        files = f" ({scrape['pc_64_files']} files)" if key == "pc_64" else ""
        size = f"{scrape[key + '_bytes']:,}{files}"
        print(f"| {label} | {lifetimes} | {collect * 1e3:.1f} | {text * 1e3:.1f} | {size} |")
    (pc_c, pc_t), (s64_c, s64_t), (s640_c, s640_t) = (
        scrape[k] for k in ("pc_64", "shm_64", "shm_640")  # type: ignore[misc]
    )
    print(f"\nat 64 lifetimes shmwin scrapes {pc_t / s64_t:.1f}x faster, text and all (collect(): "
          f"{pc_c / s64_c:.1f}x; target >= 20x); 640 lifetimes take {s640_t / s64_t:.2f}x the 64's time "
          f"(collect(): {s640_c / s64_c:.2f}x; target <= 1.2x)\n")
    print("| bytes per series (1,000 series, 1 process) | prometheus_client files | shmwin /dev/shm |")
    print("| --- | --- | --- |")
    for kind, (pc, shm_b) in bench_bytes(1000).items():
        label = "histogram, 10 buckets" if kind == "histogram" else kind
        print(f"| {label} | {pc:,.0f} | {shm_b:,.0f} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
