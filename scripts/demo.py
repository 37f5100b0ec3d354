"""shmwin demo: worker processes share one sliding window; the total is exact.

Workers are started with *spawn* (as uvicorn does) and attach by name, so nothing
is inherited: the only thing they share is the window in /dev/shm.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import sys
import time

from shmwin import Window

WORKERS = 4
RUN_S = 3.0
BARS = " ▁▂▃▄▅▆▇█"


def worker(name: str, seed: int, results) -> None:
    w = Window.attach(name)
    rng = random.Random(seed)
    ok = err = 0
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        burst = rng.randint(1, 2000)  # uneven load: every worker sees a different share
        for _ in range(burst):
            if rng.random() < 0.03:
                w.add(1, "error")
                err += 1
            else:
                w.add(1, "ok")
                ok += 1
        time.sleep(rng.random() * 0.02)
    results.put((os.getpid(), ok, err))
    w.close()


def sparkline(values) -> str:
    top = max(values.max(), 1)
    return "".join(BARS[round(v / top * (len(BARS) - 1))] for v in values)


def run(mode: str) -> bool:
    name = f"demo-{os.getpid()}-{mode}"
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    w = Window(name, span=60, buckets=60, fields=("ok", "error"), mode=mode)
    try:
        print(f"\n== {WORKERS} spawned workers adding to window {name!r} ({mode} mode) for {RUN_S:g}s")
        procs = [ctx.Process(target=worker, args=(name, i, results)) for i in range(WORKERS)]
        for p in procs:
            p.start()
        while any(p.is_alive() for p in procs):
            t = w.totals()
            print(f"   live: ok={t['ok']:>9,}  error={t['error']:>7,}  "
                  f"rate(last 1s)={w.rate('ok', last=1):>10,.0f}/s", flush=True)  # fmt: skip
            time.sleep(0.5)
        per_worker = sorted(results.get(timeout=30) for _ in procs)
        for p in procs:
            p.join()
        print("\n   worker pid       ok    error")
        for pid, ok, err in per_worker:
            print(f"   {pid:>10} {ok:>8,} {err:>8,}")
        ok_sum = sum(ok for _, ok, _ in per_worker)
        err_sum = sum(err for _, _, err in per_worker)
        totals = w.totals()
        exact = totals == {"ok": ok_sum, "error": err_sum}
        print(f"   {'sum':>10} {ok_sum:>8,} {err_sum:>8,}   <- what the workers counted themselves")
        print(f"   {'window':>10} {totals['ok']:>8,} {totals['error']:>8,}   <- w.totals() read from /dev/shm")
        print(f"   {'EXACT' if exact else 'MISMATCH'}: the shared window holds every add of every worker")
        series = w.series("ok", last=10)
        print(f"   last 10 one-second buckets of 'ok', oldest first: {sparkline(series)}")
        print(f"   {series.tolist()}")
        return exact
    finally:
        w.close()
        w.unlink()


if __name__ == "__main__":
    ok = all([run("striped"), run("locked")])
    print("\nall exact" if ok else "\nCOUNTS DIFFER", flush=True)
    sys.exit(0 if ok else 1)
