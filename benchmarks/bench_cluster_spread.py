"""A hot name on a 3-master Redis Cluster: its keys under one hash tag (one master) against
?spread=N (every master). 6 forked processes, each with T threads, hit many keys of one limiter
for a fixed time; the aggregate is all hits / that time, medians over rounds taken in turns.

    .venv/bin/python benchmarks/bench_cluster_spread.py [--quick] [--threads 1,4] [--spread 16]
        [--master-cpu 0.1 [--period-us 10000]] [--seconds 3] [--twotier]

Needs redis-server and redis-cli (Debian's). On a machine with fewer cores than 3 masters and
6 clients, the servers and clients share the cores, and the ratio shows that, not the masters.

``--threads T`` (a list: every T runs in the same turns): a process keeps T calls in flight, as
a gunicorn gthread worker does (redis-py releases the GIL while it waits on the socket). With
T = 1, 6 synchronous processes keep at most 6 calls in flight over 3 masters, and a master
idles while its clients are busy elsewhere; more calls in flight keep every master's queue full.

``--master-cpu F`` emulates what production has, a core per master: every node of the cluster
(masters and replicas) is capped at F of one core with cgroup v1's cpu controller (root only,
see ``cgroup_cpu.py``; ``--period-us`` sets its CFS period, by default the shortest the kernel
takes for the quota), so a master saturates at its cap while the clients still have CPU to
spare; the clients get a cgroup of high ``cpu.shares`` (they take a core before the machine's
other work, as on hosts of their own; nothing caps them). The run then says, per variant,
whether the masters were the bound: the CPU the masters that took traffic used (against their
cap) and the share of their periods in which they hit it, and the clients' CPU (against their
share of what the caps leave) and time spent waiting for a core. It also says how evenly the
spread groups fell on the masters: the busiest master's share of the groups caps the ratio at
1 / that share (the name, and so its groups' slots, differs every round).
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
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cgroup_cpu import CpuCaps, CpuSample, ProcessCpu, available
from support.servers import RedisCluster

from shmwin import Limiter

PROCS = 6
KEYS = 1000  # a process's keys, dealt out to its threads
CLIENT_SHARES = 16 * 1024  # --master-cpu: the clients' cpu.shares, 16 of the root's processes
BOUND_AT = 0.85  # a master "at its cap" uses this much of it
START_TIMEOUT_S = 120  # a round's processes all ready by then, or it fails


def run_delay_ns() -> int:
    """The time this thread was ready to run but waited for a core (/proc/thread-self/schedstat's
    second field): a client that waits long for a core is bound by the machine, not the servers."""
    return int(Path("/proc/thread-self/schedstat").read_text().split()[1])


@dataclass
class ThreadCount:
    hits: int = 0
    waited_ns: int = 0


def _hitter(lim: Limiter, keys: list[str], ready: threading.Barrier, go: threading.Event,
            until: list[float], count: ThreadCount) -> None:  # fmt: skip
    lim.hit(keys[0])  # this thread's connections made before the clock starts
    ready.wait()
    go.wait()
    deadline, waited_ns, i = until[0], run_delay_ns(), 0
    while time.perf_counter() < deadline:
        lim.hit(keys[i % len(keys)])
        i += 1
    count.hits, count.waited_ns = i, run_delay_ns() - waited_ns


def _worker(url: str, name: str, threads: int, seconds: float, barrier, out) -> None:  # type: ignore[no-untyped-def]
    lim = Limiter(name, "1000000000/hour", backend=url)
    keys = [f"k{os.getpid()}-{i}" for i in range(KEYS)]
    ready, go, until = threading.Barrier(threads + 1), threading.Event(), [0.0]
    counts = [ThreadCount() for _ in range(threads)]
    pool = [threading.Thread(target=_hitter, args=(lim, keys[t::threads], ready, go, until, counts[t]))
            for t in range(threads)]  # fmt: skip
    for t in pool:
        t.start()
    ready.wait()
    barrier.wait(START_TIMEOUT_S)  # every process and the parent: the masters' sample is taken
    started, cpu_started = time.perf_counter(), time.process_time()
    until[0] = started + seconds
    go.set()
    for t in pool:
        t.join()
    wall = time.perf_counter() - started
    waited_s = sum(c.waited_ns for c in counts) / 1e9 / threads
    out.put((sum(c.hits for c in counts), wall, time.process_time() - cpu_started, waited_s))
    lim.close()


@dataclass
class Variant:
    tag: str  # in the limiter's name
    label: str
    url: str
    threads: int
    spread: int = 0  # ?spread=N, 0 for one hash tag
    rates: list[float] = field(default_factory=list)  # aggregate hits/s per round
    hits: list[int] = field(default_factory=list)  # per round
    client_cpu: list[float] = field(default_factory=list)  # a process's mean CPU, cores
    client_wait: list[float] = field(default_factory=list)  # a thread's mean share of time waiting for a core
    masters: list[dict[int, CpuSample]] = field(default_factory=list)  # per round: port -> use
    walls: list[float] = field(default_factory=list)  # per round: seconds the masters were sampled
    busiest: list[float] = field(default_factory=list)  # spread, per round: the busiest master's groups


@dataclass
class Round:
    rate: float  # hits/s, all processes
    hits: int  # all processes'
    cpu: float  # a process's mean CPU, cores
    waiting: float  # a thread's mean share of its time waiting for a core
    use: dict[str, CpuSample]  # per cgroup label, over the measured time
    wall: float  # seconds between the two samples


def one_round(
    v: Variant, name: str, seconds: float, meter: CpuCaps | ProcessCpu, favoured: Path | None
) -> Round:
    """Run the 6 processes of one round; the masters' CPU is sampled from the moment every process
    is ready (connections made) until the last one reports."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(PROCS + 1), ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(v.url, name, v.threads, seconds, barrier, out), daemon=True)
             for _ in range(PROCS)]  # fmt: skip
    for p in procs:
        p.start()
        if favoured is not None:
            favoured.write_text(str(p.pid))  # all its threads, made later too
    try:
        barrier.wait(START_TIMEOUT_S)
    except threading.BrokenBarrierError:
        raise RuntimeError("a client did not start (see its traceback above)") from None
    before, started = meter.sample(), time.perf_counter()
    results = []
    while len(results) < PROCS:
        try:
            results.append(out.get(timeout=1))
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in procs):
                raise RuntimeError("a client failed (see its traceback above)") from None
    after, wall = meter.sample(), time.perf_counter() - started
    for p in procs:
        p.join()
    use = {label: after[label].minus(before[label]) for label in after}
    hits = sum(r[0] for r in results)
    return Round(hits / max(r[1] for r in results), hits,
                 statistics.mean(cpu / w for _, w, cpu, _ in results),
                 statistics.mean(waited / w for _, w, _, waited in results), use, wall)  # fmt: skip


def busiest_share(cluster_url: str, name: str, groups: int) -> float:
    """The share of a spread name's groups whose slot the busiest master serves."""
    from redis.cluster import RedisCluster as Client

    host, port = cluster_url.removeprefix("redis+cluster://").split(",")[0].split(":")
    client = Client(host=host, port=int(port.rstrip("/")))
    try:
        owners = [client.get_node_from_key(f"shmwin:{{{name}#{g}}}:clock").port for g in range(groups)]
    finally:
        client.close()
    return max(owners.count(o) for o in set(owners)) / groups


def ceilings(groups: int, names: int = 2000) -> tuple[float, float]:
    """Over ``names`` names, the ratio's ceiling 1 / (the busiest master's share of the groups) on
    a cluster whose 3 masters hold even thirds of the slots (as ``redis-cli --cluster create``
    splits them, to a slot): its median and its tenth percentile (one name in ten has that
    ceiling or less)."""
    from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

    out = []
    for i in range(names):
        owners = [key_slot(f"{{name-{i}#{g}}}".encode()) * RedisCluster.MASTERS // REDIS_CLUSTER_HASH_SLOTS
                  for g in range(groups)]  # fmt: skip
        out.append(groups / max(owners.count(m) for m in set(owners)))
    out.sort()
    return statistics.median(out), out[names // 10]


def run(cluster: RedisCluster, variants: list[Variant], rounds: int, seconds: float,
        meter: CpuCaps | ProcessCpu) -> None:  # fmt: skip
    masters = cluster.ports[: RedisCluster.MASTERS]
    # the clients get a core before the machine's other work (other jobs on a shared machine):
    # on their own hosts they would not wait for one
    favoured = meter.favour("clients", CLIENT_SHARES) if isinstance(meter, CpuCaps) else None
    for r in range(rounds):
        for v in variants if r % 2 == 0 else variants[::-1]:
            name = f"bench-spread-{os.getpid()}-{r}-{v.tag}"
            got = one_round(v, name, seconds, meter, favoured)
            v.rates.append(got.rate)
            v.hits.append(got.hits)
            v.client_cpu.append(got.cpu)
            v.client_wait.append(got.waiting)
            v.walls.append(got.wall)
            v.masters.append({p: got.use[str(p)] for p in masters})
            if v.spread:
                v.busiest.append(busiest_share(cluster.url, name, v.spread))
            Limiter.attach(name, backend=v.url).unlink()
            print(f"  round {r + 1}, {v.label}: {got.rate:,.0f} hits/s", file=sys.stderr, flush=True)


def make_variants(url: str, threads: list[int], spreads: list[int], twotier: bool) -> list[Variant]:
    out = []
    for t in threads:
        out.append(Variant(f"one-t{t}", f"one hash tag, T={t}", url, t))
        out += [Variant(f"spread{n}-t{t}", f"?spread={n}, T={t}", f"{url}?spread={n}", t, n) for n in spreads]
        if twotier:
            out.append(Variant(f"twotier-t{t}", f"shm+redis+cluster:// one tag, T={t}", "shm+" + url, t))
    return out


def int_list(text: str) -> list[int]:
    values = [int(x) for x in text.split(",")]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"a comma-separated list of positive integers, not {text!r}")
    return values


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s a variant")
    parser.add_argument("--threads", type=int_list, default=[1], metavar="T[,T...]",
                        help="calls in flight per process (threads), each in the same turns")  # fmt: skip
    parser.add_argument("--spread", type=int_list, default=[16], metavar="N[,N...]",
                        help="the ?spread=N variants (hash tags per name)")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=3.0, help="a round's measured time a variant")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--master-cpu", type=float, default=None, metavar="F",
                        help="cap every node at F of one core (cgroup v1, root)")  # fmt: skip
    parser.add_argument("--period-us", type=int, default=None, metavar="P",
                        help="the CFS period of --master-cpu (default: shortest, 1 ms quota)")  # fmt: skip
    parser.add_argument("--twotier", action="store_true", help="also shm+redis+cluster://")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 1.0
    if args.period_us is not None and args.master_cpu is None:
        parser.error("--period-us needs --master-cpu")
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds and --rounds must be positive")
    return args


def main() -> None:
    args = parse_args()
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        sys.exit("needs redis-server and redis-cli")
    if args.master_cpu is not None and (why := available()):
        sys.exit(f"--master-cpu: {why}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # the finally below still runs
    caps = None
    if args.master_cpu is not None:
        caps = CpuCaps(f"shmwin-bench-{os.getpid()}", args.master_cpu, args.period_us)
    cluster = RedisCluster(server, cli)
    try:
        if caps:
            for port, proc in cluster.procs.items():
                caps.cap(str(port), proc.pid)
        variants = make_variants(cluster.url, args.threads, args.spread, args.twotier)
        meter = caps or ProcessCpu({str(port): proc.pid for port, proc in cluster.procs.items()})
        run(cluster, variants, args.rounds, args.seconds, meter)
        report(variants, caps)
    finally:
        cluster.close()
        left = caps.close() if caps else []
        if left:
            print("cgroups left behind:", *left, sep="\n  ", file=sys.stderr)


@dataclass
class MasterUse:
    """The masters that took traffic (used >= 10% of the busiest), medians over the rounds."""

    takers: int
    used: float  # a master's mean CPU, cores
    top: float  # the busiest master's CPU, cores
    top_capped: float  # the share of the busiest master's periods in which it hit its cap
    us_per_hit: float  # all masters' CPU per hit, microseconds


def master_use(v: Variant) -> MasterUse:
    takers, used, top, top_capped, per_hit = [], [], [], [], []
    for r, round_use in enumerate(v.masters):
        busiest = max(round_use.values(), key=lambda s: s.used_ns)
        busy = [s for s in round_use.values() if s.used_ns >= busiest.used_ns / 10]
        takers.append(len(busy))
        used.append(statistics.mean(s.used_ns / 1e9 / v.walls[r] for s in busy))
        top.append(busiest.used_ns / 1e9 / v.walls[r])
        top_capped.append(busiest.throttled / max(busiest.periods, 1))
        per_hit.append(sum(s.used_ns for s in busy) / 1e3 / max(v.hits[r], 1))
    return MasterUse(
        round(statistics.median(takers)), *map(statistics.median, (used, top, top_capped, per_hit))
    )


def bound_by(v: Variant, cap: float, fair: float) -> str:
    """Which side held the round back, from the masters' CPU and the clients'."""
    cpu, waiting = statistics.median(v.client_cpu), statistics.median(v.client_wait)
    masters_full = master_use(v).top >= BOUND_AT * cap  # the busiest: the one the others wait for
    clients_free = cpu < BOUND_AT * min(fair, 1.0) and waiting < 0.2
    if masters_full and clients_free:
        return "bound: the masters (at their cap; the clients below their share)"
    if masters_full:
        return "bound: the masters at their cap, but the clients near their share or waiting for a core too"
    if clients_free:
        return "bound: neither (masters below their cap, clients below their share): calls in flight"
    return "bound: the clients (near their share, or waiting for a core)"


def report(variants: list[Variant], caps: CpuCaps | None) -> None:
    cores = os.cpu_count() or 1
    cap = caps.core_share if caps else None
    fair = (cores - (cap or 0) * 2 * RedisCluster.MASTERS) / PROCS  # a process's share of what is left
    for v in variants:
        print(f"| {v.label} | {statistics.median(v.rates):,.0f} hits/s | rounds: "
              + ", ".join(f"{x:,.0f}" for x in v.rates) + " |")  # fmt: skip
        print(f"    a process used {statistics.median(v.client_cpu):.3f} cores (its share: {fair:.3f}), "
              f"a thread waited for a core {statistics.median(v.client_wait):.0%} of its time")  # fmt: skip
        if v.busiest:
            median, tenth = ceilings(v.spread)
            print(f"    the busiest master had {statistics.median(v.busiest):.0%} of the groups "
                  f"(rounds: {', '.join(f'{b:.0%}' for b in v.busiest)}): a ceiling of "
                  f"{1 / statistics.median(v.busiest):.2f}x; over 2,000 names: median {median:.2f}x, "
                  f"one name in ten {tenth:.2f}x or less")  # fmt: skip
        m = master_use(v)
        if cap is None:
            machine = m.takers * m.used + PROCS * statistics.median(v.client_cpu)
            print(f"    {m.takers} master(s) took traffic, {m.used:.3f} cores each on average, "
                  f"{m.us_per_hit:.0f} us of master CPU a hit; masters and clients used {machine:.2f} "
                  f"of the {cores} cores (shared with the machine's other work)")  # fmt: skip
        else:
            print(f"    {m.takers} master(s) took traffic, {m.used:.3f} cores each on average, the busiest "
                  f"{m.top:.3f} (cap {cap}, hit in {m.top_capped:.0%} of its periods); "
                  f"{m.us_per_hit:.0f} us of master CPU a hit")  # fmt: skip
            print(f"    {bound_by(v, cap, fair)}")
    where = f"every node capped at {cap} of a core, {caps.period_us} us periods" if caps else "no caps"
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    for t in sorted({v.threads for v in variants}):
        one = next(v for v in variants if v.threads == t and v.tag.startswith("one"))
        for v in (v for v in variants if v.threads == t and v.spread):
            ratios = [s / o for s, o in zip(v.rates, one.rates, strict=True)]
            ratio = statistics.median(v.rates) / statistics.median(one.rates)
            print(f"ratio T={t}, ?spread={v.spread}: {ratio:.2f}x "
                  f"(each round's, in turn: {', '.join(f'{x:.2f}' for x in ratios)}, "
                  f"median {statistics.median(ratios):.2f}x; target >= 2x)")  # fmt: skip
    print(f"{PROCS} processes, {cores} cores, {where}, load average {load}")


if __name__ == "__main__":
    main()
