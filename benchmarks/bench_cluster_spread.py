"""A hot name on a 3-master Redis Cluster: its keys under one hash tag (one master) against
?spread=16 (every master). 6 forked processes hit many keys of one limiter at once; the
aggregate is total hits / the slowest process's time, median over rounds taken in turns.

    .venv/bin/python benchmarks/bench_cluster_spread.py [--quick] [--master-cpu 0.12] [--twotier]

Needs redis-server and redis-cli (Debian's). On a machine with fewer cores than 3 masters and
6 clients, the servers and clients share the cores, and the ratio shows that, not the masters.

``--master-cpu F`` emulates what production has, a core per master: every node of the cluster
(masters and replicas) is capped at F of one core with cgroup v1's cpu controller (root only,
see ``cgroup_cpu.py``), so a master saturates at its cap while the clients still have CPU to
spare; the clients get a cgroup of high ``cpu.shares`` (they take a core before the machine's
other work, as on hosts of their own; nothing caps them). The run then reports, per variant,
whether the masters were the bottleneck: the CPU the masters that took traffic used (against
their cap) and the share of their scheduling periods in which they hit it, and the clients' CPU
(against their share of what the caps leave) and time spent waiting for a core.
``--twotier`` adds ``shm+redis+cluster://`` (leases spent in shared memory) to the turns.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import shutil
import signal
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cgroup_cpu import CpuCaps, CpuSample, available
from support.servers import RedisCluster

from shmwin import Limiter

PROCS = 6
KEYS = 1000
GROUPS = 16
CLIENT_SHARES = 16 * 1024  # --master-cpu: the clients' cpu.shares, 16 of the root's processes


def run_delay_ns() -> int:
    """The time this process was ready to run but waited for a core (/proc/self/schedstat's
    second field): a client that waits long for a core is bound by the machine, not the servers."""
    return int(Path("/proc/self/schedstat").read_text().split()[1])


def _worker(url: str, name: str, n: int, barrier, out) -> None:  # type: ignore[no-untyped-def]
    lim = Limiter(name, "1000000000/hour", backend=url)
    keys = [f"k{os.getpid()}-{i}" for i in range(KEYS)]
    barrier.wait()
    started, cpu_started, waited_ns = time.perf_counter(), time.process_time(), run_delay_ns()
    for i in range(n):
        lim.hit(keys[i % KEYS])
    wall = time.perf_counter() - started
    out.put((wall, time.process_time() - cpu_started, (run_delay_ns() - waited_ns) / 1e9))
    lim.close()


@dataclass
class Variant:
    tag: str  # in the limiter's name
    label: str
    url: str
    rates: list[float] = field(default_factory=list)  # aggregate hits/s per round
    client_cpu: list[float] = field(default_factory=list)  # a client's mean CPU, cores
    client_wait: list[float] = field(default_factory=list)  # a client's mean share of time waiting for a core
    masters: list[dict[int, CpuSample]] = field(default_factory=list)  # per round: port -> use
    walls: list[float] = field(default_factory=list)  # per round: seconds the masters were sampled


def aggregate(url: str, name: str, n: int, favoured: Path | None) -> tuple[float, float, float]:
    """(hits/s, a client's mean CPU in cores, a client's mean share of its time waiting for a
    core) of one round."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(PROCS), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(url, name, n, barrier, out)) for _ in range(PROCS)]
    for p in procs:
        p.start()
        if favoured is not None:
            favoured.write_text(str(p.pid))
    results = []
    while len(results) < PROCS:
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a client failed (see its traceback above)") from None
    for p in procs:
        p.join()
    slowest = max(wall for wall, _, _ in results)
    return (PROCS * n / slowest, statistics.mean(cpu / wall for wall, cpu, _ in results),
            statistics.mean(waited / wall for wall, _, waited in results))  # fmt: skip


def master_report(v: Variant, share: float) -> str:
    """The masters that took traffic (used >= 10% of the busiest), medians over the rounds: CPU
    used in cores, and the share of their scheduling periods in which they hit their cap."""
    used, hit = [], []
    for r, round_use in enumerate(v.masters):
        busiest = max(s.used_ns for s in round_use.values())
        busy = [s for s in round_use.values() if s.used_ns >= busiest / 10]
        used.append(statistics.mean(s.used_ns / 1e9 / v.walls[r] for s in busy))
        hit.append(statistics.mean(s.throttled / max(s.periods, 1) for s in busy))
        v.masters[r] = {p: s for p, s in round_use.items() if s in busy}
    takers = statistics.median(len(m) for m in v.masters)
    return (f"{takers:.0f} master(s) took traffic, each used {statistics.median(used):.3f} cores "
            f"(cap {share}), capped in {statistics.median(hit):.0%} of its periods")  # fmt: skip


def run(cluster: RedisCluster, variants: list[Variant], rounds: int, n: int, caps: CpuCaps | None) -> None:
    masters = cluster.ports[: RedisCluster.MASTERS]
    # the clients get a core before the machine's other work (other jobs on a shared machine):
    # on their own hosts they would not wait for one
    favoured = caps.favour("clients", CLIENT_SHARES) if caps else None
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order:
            name = f"bench-spread-{os.getpid()}-{r}-{v.tag}"
            before, started = caps.sample() if caps else {}, time.perf_counter()
            rate, cpu, waiting = aggregate(v.url, name, n, favoured)
            after, wall = caps.sample() if caps else {}, time.perf_counter() - started
            v.rates.append(rate)
            v.client_cpu.append(cpu)
            v.client_wait.append(waiting)
            v.walls.append(wall)
            if caps:
                v.masters.append({p: after[str(p)].minus(before[str(p)]) for p in masters})
            Limiter.attach(name, backend=v.url).unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 500 hits a process")
    parser.add_argument("--master-cpu", type=float, default=None, metavar="F",
                        help="cap every node at F of one core (cgroup v1, root)")  # fmt: skip
    parser.add_argument("--twotier", action="store_true", help="also shm+redis+cluster://")
    args = parser.parse_args()
    rounds, n = (1, 500) if args.quick else (5, 3000)
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        sys.exit("needs redis-server and redis-cli")
    if args.master_cpu is not None and (why := available()):
        sys.exit(f"--master-cpu: {why}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the finally below still runs
    caps = None if args.master_cpu is None else CpuCaps(f"shmwin-bench-{os.getpid()}", args.master_cpu)
    cluster = RedisCluster(server, cli)
    try:
        if caps:
            for port, proc in cluster.procs.items():
                caps.cap(str(port), proc.pid)
        spread = f"{cluster.url}?spread={GROUPS}"
        variants = [Variant("one", "one hash tag (one master)", cluster.url),
                    Variant("spread", f"?spread={GROUPS} (every master)", spread)]  # fmt: skip
        if args.twotier:
            variants += [Variant("twotier", "shm+redis+cluster:// one hash tag", "shm+" + cluster.url)]
        run(cluster, variants, rounds, n, caps)
        report(variants, args.master_cpu)
    finally:
        cluster.close()
        left = caps.close() if caps else []
        if left:
            print("cgroups left behind:", *left, sep="\n  ", file=sys.stderr)


def report(variants: list[Variant], share: float | None) -> None:
    cores = os.cpu_count() or 1
    fair = (cores - (share or 0) * 2 * RedisCluster.MASTERS) / PROCS  # a client's share of what is left
    for v in variants:
        print(f"| {v.label} | {statistics.median(v.rates):,.0f} hits/s | rounds: "
              + ", ".join(f"{x:,.0f}" for x in v.rates) + " |")  # fmt: skip
        print(
            f"    a client used {statistics.median(v.client_cpu):.3f} cores (its share: {fair:.3f}), "
            f"waited for a core {statistics.median(v.client_wait):.0%} of its time"
        )
        if share is not None:
            print("    " + master_report(v, share))
    one, spread = (statistics.median(v.rates) for v in variants[:2])
    caps = f"every node capped at {share} of a core" if share is not None else "no caps"
    print(f"ratio: {spread / one:.2f}x (target >= 2x), {PROCS} processes, {cores} cores, {caps}")


if __name__ == "__main__":
    main()
