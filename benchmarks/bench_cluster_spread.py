"""A hot name on a 3-master Redis Cluster: its keys under one hash tag (one master) against
?spread=16 (every master). 6 forked processes hit many keys of one limiter at once; the
aggregate is total hits / the slowest process's time, median over rounds taken in turns.

    .venv/bin/python benchmarks/bench_cluster_spread.py [--quick]

Needs redis-server and redis-cli (Debian's). On a machine with fewer cores than 3 masters and
6 clients, the servers and clients share the cores, and the ratio shows that, not the masters.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.servers import RedisCluster

from shmwin import Limiter

PROCS = 6
KEYS = 1000


def _worker(url: str, name: str, n: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    lim = Limiter(name, "1000000000/hour", backend=url)
    keys = [f"k{os.getpid()}-{i}" for i in range(KEYS)]
    barrier.wait()
    started = time.perf_counter()
    for i in range(n):
        lim.hit(keys[i % KEYS])
    out.put(time.perf_counter() - started)
    lim.close()


def aggregate(url: str, name: str, n: int) -> float:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(PROCS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, name, n, barrier, out)) for _ in range(PROCS)]
    for p in procs:
        p.start()
    slowest = max(out.get(timeout=300) for _ in procs)
    for p in procs:
        p.join()
    return PROCS * n / slowest


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, n = (1, 500) if quick else (5, 3000)
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        sys.exit("needs redis-server and redis-cli")
    cluster = RedisCluster(server, cli)
    try:
        one, spread = [], []
        for r in range(rounds):
            order = [(cluster.url, one), (cluster.url + "?spread=16", spread)]
            for url, rates in order if r % 2 == 0 else order[::-1]:
                name = f"bench-spread-{os.getpid()}-{r}-{len(rates)}-{'s' if 'spread' in url else 'o'}"
                rates.append(aggregate(url, name, n))
                Limiter.attach(name, backend=url).unlink()
        print(f"| keys under one hash tag (one master) | {statistics.median(one):,.0f} hits/s |")
        print(f"| ?spread=16 (every master) | {statistics.median(spread):,.0f} hits/s |")
        print(f"ratio: {statistics.median(spread) / statistics.median(one):.2f}x (target >= 2x), "
              f"{PROCS} processes, {os.cpu_count()} cores")
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
