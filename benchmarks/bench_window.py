"""Window benchmarks: shmwin against its peers, measured in the same run, reported as ratios.

    .venv/bin/python benchmarks/bench_window.py [--ops N] [--repeat R]

Every contender runs the same loop shape in 2 forked processes that start together;
aggregate throughput = total ops / slowest process's time; the median of R runs is kept.
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import threading
import time
import uuid

import numpy as np

from shmwin import Window

# -- contenders: each returns seconds spent on n ops -------------------------------------------


def shmwin_add(n: int, name: str) -> float:
    w = Window.attach(name)
    add = w.add
    add()  # claim the stripe outside the timed loop
    t = time.perf_counter()
    for _ in range(n):
        add()
    elapsed = time.perf_counter() - t
    w.close()
    return elapsed


def prometheus_inc(n: int, _: str) -> float:
    from prometheus_client import CollectorRegistry, Counter  # imported after the env var is set

    inc = Counter("bench", "bench", registry=CollectorRegistry()).inc
    t = time.perf_counter()
    for _ in range(n):
        inc()
    return time.perf_counter() - t


_MP_VALUE = None


def mp_value_locked(n: int, _: str) -> float:
    value = _MP_VALUE
    lock = value.get_lock()
    t = time.perf_counter()
    for _ in range(n):
        with lock:
            value.value += 1
    return time.perf_counter() - t


def python_floor(n: int, _: str) -> float:
    buf = mmap.mmap(-1, 64)
    cells, clock = memoryview(buf).cast("q"), time.monotonic_ns
    t = time.perf_counter()
    for _ in range(n):
        clock()
        cells[1] += 1
    elapsed = time.perf_counter() - t
    cells.release()
    return elapsed


# -- harness --------------------------------------------------------------------------------------


def _child(fn, n, arg, barrier, out, slot):
    barrier.wait()
    out[slot] = fn(n, arg)


def aggregate(fn, n: int, arg: str = "", procs: int = 2, repeat: int = 3) -> float:
    """Median over ``repeat`` runs of total ops/s of ``procs`` forked processes."""
    ctx = mp.get_context("fork")
    rates = []
    for _ in range(repeat):
        barrier, out = ctx.Barrier(procs), ctx.Array("d", procs, lock=False)
        ps = [ctx.Process(target=_child, args=(fn, n, arg, barrier, out, i)) for i in range(procs)]
        for p in ps:
            p.start()
        for p in ps:
            p.join()
        rates.append(procs * n / max(out))
    return statistics.median(rates)


def single_ns(fn, n: int, arg: str = "", repeat: int = 3) -> float:
    return min(fn(n, arg) for _ in range(repeat)) / n * 1e9


def bench_total(repeat: int) -> tuple[float, float]:
    """µs per total() over 3600 buckets x 64 claimed stripes, and per bare numpy masked sum."""
    name = f"bench-total-{uuid.uuid4().hex[:8]}"
    w = Window(name, span=3600, buckets=3600, fields=("ok",), stripes=64)
    try:
        barrier = threading.Barrier(64)

        def claim():
            w.add()
            barrier.wait()  # 64 live threads: all 64 stripes claimed

        threads = [threading.Thread(target=claim) for _ in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(w.stripe_owners()) == 64
        rng = np.random.default_rng(1)
        epochs = rng.integers(0, 3600, size=(64, 3600))
        values = rng.integers(0, 100, size=(64, 3600))
        lo = 1800

        def shm():
            return w.total()

        def bare():
            return np.where(epochs >= lo, values, 0).sum()

        return _per_call_us(shm, repeat), _per_call_us(bare, repeat)
    finally:
        w.close()
        w.unlink()


def _per_call_us(fn, repeat: int, calls: int = 300) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls * 1e6)
    return best


def bench_add_many(n: int) -> list[tuple[str, float]]:
    """Events/s into a 3-resolution window: a loop of add(), add_many() now, add_many() stamped."""
    name = f"bench-many-{uuid.uuid4().hex[:8]}"
    w = Window(name, resolutions=("1m/1s", "1h/1m", "24h/1h"), fields=("req",))
    try:
        add = w.add
        loop_n = min(n, 300_000)
        t = time.perf_counter()
        for _ in range(loop_n):
            add(1, "req")
        looped = loop_n / (time.perf_counter() - t)
        values = np.ones(n, dtype=np.int64)
        t = time.perf_counter()
        w.add_many(values, "req")
        now_batch = n / (time.perf_counter() - t)
        ages = np.random.default_rng(2).integers(0, min(time.monotonic_ns(), 86_000 * 10**9), size=n)
        stamps = time.monotonic_ns() - ages
        t = time.perf_counter()
        w.add_many(values, "req", at=stamps)
        stamped = n / (time.perf_counter() - t)
        assert w.total("req", last="24h") == loop_n + 2 * n, "lost events"
        return [
            ("loop of add()", looped),
            ("add_many(values)", now_batch),
            ("add_many(values, at=stamps)", stamped),
        ]
    finally:
        w.close()
        w.unlink()


def main() -> None:
    global _MP_VALUE
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ops", type=int, default=300_000, help="ops per process per run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, r = args.ops, args.repeat
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="shmwin-bench-prom-")
    _MP_VALUE = mp.Value("q", 0)
    striped = f"bench-s-{uuid.uuid4().hex[:8]}"
    locked = f"bench-l-{uuid.uuid4().hex[:8]}"
    ws = Window(striped, span="1h", buckets=60, fields=("ok",))
    wl = Window(locked, span="1h", buckets=60, fields=("ok",), mode="locked")
    try:
        print(f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, "
              f"{n:,} ops/process, median of {r}")  # fmt: skip
        print("\n## 2 processes, aggregate adds/s")
        s_rate = aggregate(shmwin_add, n, striped, repeat=r)
        p_rate = aggregate(prometheus_inc, n, repeat=r)
        l_rate = aggregate(shmwin_add, n, locked, repeat=r)
        v_rate = aggregate(mp_value_locked, n, repeat=r)
        assert ws.total() == 2 * n * r + 2 * r and wl.total() == 2 * n * r + 2 * r, "lost counts!"
        rows = [
            ("shmwin striped add()", s_rate, p_rate, "prometheus_client mp Counter.inc()", 1.5),
            ("shmwin locked add()", l_rate, v_rate, "mp.Value + lock, += 1", 1.0),
        ]
        print("| shmwin | adds/s | peer | peer/s | ratio | target |")
        print("| --- | ---: | --- | ---: | ---: | ---: |")
        for label, mine, peer, peer_label, target in rows:
            ok = "✓" if mine / peer >= target else "✗"
            ratio = f"{mine / peer:.2f}×"
            print(f"| {label} | {mine:,.0f} | {peer_label} | {peer:,.0f} | {ratio} | ≥{target}× {ok} |")
        print("\n## 1 process, ns per add()")
        floor = single_ns(python_floor, n, repeat=r)
        print("| call | ns/op | × Python floor |")
        print("| --- | ---: | ---: |")
        for label, value in [
            ("Python floor: monotonic_ns() + memoryview += 1", floor),
            ("shmwin striped add()", single_ns(shmwin_add, n, striped, repeat=r)),
            ("shmwin locked add()", single_ns(shmwin_add, n, locked, repeat=r)),
        ]:
            print(f"| {label} | {value:.0f} | {value / floor:.2f}× |")
        print("\n## total() over 3600 buckets x 64 stripes (all claimed)")
        mine_us, bare_us = bench_total(r)
        ok = "✓" if mine_us / bare_us <= 3 else "✗"
        print("| call | µs | ratio | target |")
        print("| --- | ---: | ---: | ---: |")
        print(f"| bare numpy masked sum, same shape | {bare_us:.0f} | 1.00× | |")
        print(f"| shmwin total() | {mine_us:.0f} | {mine_us / bare_us:.2f}× | ≤3× {ok} |")
        print("\n## batch ingest: 1,000,000 events into resolutions 1m/1s, 1h/1m, 24h/1h (1 process)")
        rows = bench_add_many(1_000_000)
        print("| call | events/s | × loop of add() |")
        print("| --- | ---: | ---: |")
        for label, rate in rows:
            print(f"| {label} | {rate:,.0f} | {rate / rows[0][1]:,.0f}× |")
    finally:
        for w in (ws, wl):
            w.close()
            w.unlink()


if __name__ == "__main__":
    ctypes.CDLL(None)  # fail early on a platform without a C library to load
    main()
