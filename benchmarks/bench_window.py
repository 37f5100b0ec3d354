"""Window benchmarks: shmwin's add() against the floor and its peers, same run, ratios.

    .venv/bin/python benchmarks/bench_window.py [--quick] [--json FILE]

1 process: ns per add(), each sample beside a sample of the floor (a loop calling only
time.monotonic_ns()), medians over rounds. 2 processes: forked at a barrier, aggregate =
total ops / the slower process's time, median over rounds, contenders interleaved.
Method: benchmarks/_harness.py; results and prose: benchmarks/README.md (scripts/bench).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
import uuid

import _harness
import numpy as np
from _harness import Contender, FloorPairs, Loop, Target, fresh_loop, interleaved, ns, per_sec

from shmwin import Window

# option: (what it sizes, --quick, full)
SIZES: _harness.Sizes = {
    "ops": ("2 processes: ops per process per run", 30_000, 300_000),
    "repeat": ("2 processes: rounds", 1, 5),
    "single-ops": ("1 process: calls per sample", 30_000, 200_000),
    "single-repeat": ("1 process: rounds", 3, 9),
}

# -- 2-process contenders: each process runs loop(n) -> (seconds, 0) ------------------------------


def shmwin_add(name: str) -> Loop:
    def run(n: int) -> tuple[float, int]:
        w = Window.attach(name)
        add = w.add
        add()  # claim this process's stripe outside the timed loop
        t = time.perf_counter()
        for _ in range(n):
            add()
        elapsed = time.perf_counter() - t
        w.close()
        return elapsed, 0

    return run


def prometheus_inc(n: int) -> tuple[float, int]:
    from prometheus_client import CollectorRegistry, Counter  # imported after the env var is set

    inc = Counter("bench", "bench", registry=CollectorRegistry()).inc
    t = time.perf_counter()
    for _ in range(n):
        inc()
    return time.perf_counter() - t, 0


def mp_value_locked(value) -> Loop:  # type: ignore[no-untyped-def]
    def run(n: int) -> tuple[float, int]:
        lock = value.get_lock()
        t = time.perf_counter()
        for _ in range(n):
            with lock:
                value.value += 1
        return time.perf_counter() - t, 0

    return run


# -- 1 process ----------------------------------------------------------------------------------


def bench_single(n: int, rounds: int) -> tuple[dict[str, object], float]:
    """ns per add() of a striped and a locked window, each beside the floor."""
    pairs = FloorPairs(n)
    windows = {
        mode: Window(f"bench-1p-{mode[0]}-{uuid.uuid4().hex[:8]}", span="1h", buckets=60, mode=mode)
        for mode in ("striped", "locked")
    }
    try:
        loops = {mode: fresh_loop("call") for mode in windows}
        adds = {mode: w.add for mode, w in windows.items()}
        for mode in windows:  # warm-up, untimed: claims the stripe, specialises the loop
            loops[mode](adds[mode], None, n // 10 + 1)
        pairs.floor_sample()
        for _ in range(rounds):
            for mode in windows:
                pairs.take(mode, _sampler(loops[mode], adds[mode], n))
        expected = n // 10 + 1 + rounds * n
        for mode, w in windows.items():
            assert w.total() == expected, f"{mode} window lost counts: {w.total()} != {expected}"
        return {mode: pairs.result(mode) for mode in windows}, pairs.all_floor_ns()
    finally:
        for w in windows.values():
            w.close()
            w.unlink()


def _sampler(loop, fn, n: int):  # type: ignore[no-untyped-def]
    return lambda: loop(fn, None, n) / n * 1e9


# -- total() and batch ingest (no native-core target; kept as regression checks) ----------------


def bench_total(repeat: int, calls: int) -> tuple[float, float, int]:
    """µs per total() over 3600 buckets x 64 stripes, each claimed by a live process, and per
    bare numpy masked sum; and how many stripes were claimed."""
    name = f"bench-total-{uuid.uuid4().hex[:8]}"
    w = Window(name, span=3600, buckets=3600, fields=("ok",), stripes=64)
    ctx = mp.get_context("fork")
    ready, done = ctx.Barrier(65), ctx.Event()
    procs = [ctx.Process(target=_claim_stripe, args=(name, ready, done)) for _ in range(64)]
    try:
        for p in procs:
            p.start()
        ready.wait(60)  # 64 live processes, one stripe each
        claimed = len(w.stripe_owners())
        rng = np.random.default_rng(1)
        epochs = rng.integers(0, 3600, size=(64, 3600))
        values = rng.integers(0, 100, size=(64, 3600))
        lo = 1800

        def shm() -> object:
            return w.total()

        def bare() -> object:
            return np.where(epochs >= lo, values, 0).sum()

        mine, theirs = _per_call_us(shm, repeat, calls), _per_call_us(bare, repeat, calls)
        assert w.total() == 64, f"total() of 64 adds: {w.total()}"
        return mine, theirs, claimed
    finally:
        done.set()
        for p in procs:
            p.join()
        w.close()
        w.unlink()


def _claim_stripe(name: str, ready, done) -> None:  # type: ignore[no-untyped-def]
    w = Window.attach(name)
    w.add()
    ready.wait(60)
    done.wait(120)
    w.close()


def _per_call_us(fn, repeat: int, calls: int) -> float:  # type: ignore[no-untyped-def]
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


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    args, (n, r, n1, r1) = _harness.sized_args(__doc__, SIZES)
    q = args.quick

    print(f"# bench_window: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores; 1 process: {n1:,} calls/sample, median of {r1}; "
          f"2 processes: {n:,} ops/process, median of {r}")  # fmt: skip

    # 1 process, against the floor
    single, _ = bench_single(n1, r1)
    s1, l1 = single["striped"], single["locked"]

    # 2 processes, against the peers
    prom_dir = tempfile.mkdtemp(prefix="shmwin-bench-prom-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = prom_dir
    mp_value = mp.Value("q", 0)
    names = {m: f"bench-2p-{m[0]}-{uuid.uuid4().hex[:8]}" for m in ("striped", "locked")}
    windows = {m: Window(name, span="1h", buckets=60, mode=m) for m, name in names.items()}
    try:
        striped = Contender("shmwin striped add()", lambda: shmwin_add(names["striped"]), n)
        prom = Contender("prometheus_client mp Counter.inc()", lambda: prometheus_inc, n)
        locked = Contender("shmwin locked add()", lambda: shmwin_add(names["locked"]), n)
        value = Contender("multiprocessing.Value + lock", lambda: mp_value_locked(mp_value), n)
        interleaved([striped, prom, locked, value], r)
        expected = 2 * (n + 1) * r  # each process also adds once, untimed, to claim its stripe
        for m, w in windows.items():
            assert w.total() == expected, f"2 processes, {m}: lost counts ({w.total()} != {expected})"
        assert mp_value.value == 2 * n * r
    finally:
        for w in windows.values():
            w.close()
            w.unlink()
        shutil.rmtree(prom_dir, ignore_errors=True)

    targets = [
        Target("striped-1p", "striped `add()`, 1 process", ns(s1.ns), f"floor {ns(s1.floor_ns)}",
               f"{s1.ratio:.2f}×", "≤ 1.5×", s1.ratio <= 1.5),
        Target("locked-1p", "locked `add()`, 1 process", ns(l1.ns), f"floor {ns(l1.floor_ns)}",
               f"{l1.ratio:.2f}×", "≤ 2×", l1.ratio <= 2),
        Target("striped-2p", "2 processes, striped add", per_sec(striped.rate, "adds"),
               f"prometheus_client mp `Counter.inc` {per_sec(prom.rate)}",
               f"{striped.rate / prom.rate:.2f}×", "≥ 6×", striped.rate / prom.rate >= 6),
        Target("locked-2p", "2 processes, locked add", per_sec(locked.rate, "adds"),
               f"`multiprocessing.Value` + lock {per_sec(value.rate)}",
               f"{locked.rate / value.rate:.2f}×", "≥ 4×", locked.rate / value.rate >= 4),
    ]  # fmt: skip
    _harness.print_targets(targets)
    print("\n(no count lost: both 2-process windows and `multiprocessing.Value` hold every add)")

    details: list[str] = []
    mine_us, bare_us, claimed = bench_total(r1 if q else 5, 30 if q else 300)
    ok = "✓" if mine_us / bare_us <= 3 else "✗"
    details += [
        f"#### Window: total() over 3600 buckets × 64 stripes ({claimed} claimed by live processes)",
        "",
        "| call | µs | ratio | earlier target |",
        "| --- | ---: | ---: | ---: |",
        f"| bare numpy masked sum, same shape | {bare_us:.0f} | 1.00× | |",
        f"| shmwin total() | {mine_us:.0f} | {mine_us / bare_us:.2f}× | ≤ 3× {ok} |",
        "",
    ]
    events = 100_000 if q else 1_000_000
    rows = bench_add_many(events)
    details += [
        f"#### Window: batch ingest, {events:,} events into resolutions 1m/1s, 1h/1m, 24h/1h, 1 process",
        "",
        "| call | events/s | × loop of add() |",
        "| --- | ---: | ---: |",
        *(f"| {label} | {rate:,.0f} | {rate / rows[0][1]:,.0f}× |" for label, rate in rows),
    ]
    _harness.finish(targets, details, args.json)


if __name__ == "__main__":
    main()
