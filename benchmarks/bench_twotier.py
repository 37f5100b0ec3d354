"""The two-tier backend (``shm+redis://``): 3 hosts on one redis-server, against the plain
``redis://`` backend on the same limit, in the same run.

    .venv/bin/python benchmarks/bench_twotier.py [--quick] [--json FILE]

A "host" is a process in its own mount namespace with a private tmpfs on /dev/shm (root:
``unshare``), so each keeps its own lease segment, as separate machines would; without root
the three processes share this machine's /dev/shm -- one host of three workers -- and the
output says so. The hosts start together (a "go" file) and each makes N hits on one key:

* under the limit (a limit no run reaches): ns per hit in each host (the mean of the hosts'
  loops), Redis commands per hit (redis-py's send_command, counted in each host), and the
  aggregate rate = all hits / the slowest host's time;
* the plain ``redis://`` backend on the same limit, 3 processes, fewer hits each: its
  aggregate rate and commands per hit, for the ratios;
* over the limit: each host offered 2/3 of a limit of 2N per hour (twice the limit in all):
  admitted / limit, and the aggregate rate then.

Median over rounds; the two backends interleaved round by round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import _harness
from _harness import Target, per_sec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTS = 3
UNDER = f"{10**12}/hour"  # a limit no run reaches


def count_commands() -> list[int]:
    """Count redis-py's send_command calls from now on: [commands] (for good: a child's)."""
    return _harness.counting_redis_commands()[0]


def host_main(url: str, name: str, rate: str, n: int, go: str, out: str) -> None:
    """One host (or one plain-redis process): open, warm up, wait for "go", make n hits."""
    from shmwin import Limiter

    lim = Limiter(name, rate, backend=url)
    hit = lim.hit
    hit("client")  # the segment, the connection, the scripts cached
    sent = count_commands()
    Path(out + ".ready").touch()
    while not os.path.exists(go):
        time.sleep(0.0005)
    t = time.perf_counter()
    admitted = 0
    for _ in range(n):
        admitted += hit("client")
    elapsed = time.perf_counter() - t
    commands = sent[0]
    lim.close()
    Path(out).write_text(json.dumps({"s": elapsed, "admitted": admitted + 1, "commands": commands}))


def in_namespace() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


def run(url: str, rate: str, n: int, procs: int, hosts: bool) -> dict[str, float]:
    """``procs`` processes (each its own host if ``hosts``) making n hits each, started together."""
    work = Path(tempfile.mkdtemp(prefix="shmwin-bench-twotier-"))
    name = f"bench-tt-{uuid.uuid4().hex[:8]}"
    go = str(work / "go")
    ps = []
    try:
        for i in range(procs):
            out = str(work / f"{i}.json")
            argv = [sys.executable, __file__, "--host", url, name, rate, str(n), go, out]
            if hosts:
                script = 'mount -t tmpfs -o size=64m,mode=1777 bench /dev/shm && exec "$@"'
                argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]
            ps.append(subprocess.Popen(argv, cwd=ROOT))
        deadline = time.monotonic() + 60
        while len(list(work.glob("*.ready"))) < procs:
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in ps):
                raise SystemExit("a benchmark host did not start")
            time.sleep(0.01)
        Path(go).touch()
        for p in ps:
            if p.wait(600) != 0:
                raise SystemExit(f"a benchmark host failed: exit {p.returncode}")
        results = [json.loads((work / f"{i}.json").read_text()) for i in range(procs)]
    finally:
        for p in ps:
            if p.poll() is None:
                p.kill()
        _drop(url, name)
        shutil.rmtree(work, ignore_errors=True)
    hits = procs * n
    return {
        "rate": hits / max(r["s"] for r in results),
        "ns": statistics.mean(r["s"] / n * 1e9 for r in results),
        "commands": sum(r["commands"] for r in results) / hits,
        "admitted": sum(r["admitted"] for r in results),
    }


def _drop(url: str, name: str) -> None:
    import redis

    client = redis.Redis.from_url(url.removeprefix("shm+"))
    for key in client.scan_iter(match=f"shmwin:{{{name}}}:*"):
        client.delete(key)
    client.close()
    if not in_namespace():
        import shmwin

        shmwin.unlink(name)


def main() -> None:
    parser = _harness.target_parser(__doc__)
    parser.add_argument("--host", nargs=6, metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.host:
        url, name, rate, n, go, out = args.host
        host_main(url, name, rate, int(n), go, out)
        return
    sys.path.insert(0, str(HERE))
    from bench_limiter import RedisServer

    q = args.quick
    n, n_redis, rounds = (20_000, 1_000, 1) if q else (200_000, 4_000, 3)
    hosts = in_namespace()
    where = "3 hosts: namespaces, each its own /dev/shm" if hosts else "3 processes sharing /dev/shm: no root"
    print(f"# bench_twotier: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores; {where}; {n:,} hits per host ({n_redis:,} through redis://), "
          f"median of {rounds}")  # fmt: skip
    server = RedisServer()
    url = f"redis://127.0.0.1:{server.port}/0"
    under: list[dict[str, float]] = []
    plain: list[dict[str, float]] = []
    over: list[dict[str, float]] = []
    limit = 2 * n  # per hour: HOSTS x n offered, 1.5x the limit
    try:
        for _ in range(rounds):
            under.append(run("shm+" + url, UNDER, n, HOSTS, hosts))
            plain.append(run(url, UNDER, n_redis, HOSTS, False))
            over.append(run("shm+" + url, f"{limit}/hour", n, HOSTS, hosts))
    finally:
        server.stop()

    def med(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    ns_hit, tt_rate, tt_cmds = med(under, "ns"), med(under, "rate"), med(under, "commands")
    redis_rate, redis_cmds = med(plain, "rate"), med(plain, "commands")
    admitted = statistics.median(r["admitted"] for r in over)
    fewer = redis_cmds / tt_cmds if tt_cmds else float("inf")
    faster = tt_rate / redis_rate
    share = admitted / limit
    targets = [
        Target("twotier-ns", "`shm+redis://` hit, 3 hosts", f"{ns_hit:,.0f} ns", "—", "—", "≤ 2 µs",
               ns_hit <= 2000),
        Target("twotier-trips", "Redis commands per hit, 3 hosts", f"{tt_cmds:.4f}",
               f"`redis://` {redis_cmds:.2f}", f"{fewer:,.0f}× fewer", "≥ 30× fewer", fewer >= 30),
        Target("twotier-rate", "aggregate hits/s, 3 hosts, one limit", per_sec(tt_rate),
               f"`redis://` {per_sec(redis_rate)}", f"{faster:,.0f}×", "≥ 20×", faster >= 20),
    ]  # fmt: skip
    _harness.print_targets(targets)
    details = "\n".join([
        f"#### Two tiers: 3 hosts, one redis-server, one key ({where})",
        "",
        "| backend | hits per host | ns/hit (mean of hosts) | aggregate hits/s | Redis commands per hit |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| `shm+redis://` | {n:,} | {ns_hit:,.0f} | {tt_rate:,.0f} | {tt_cmds:.4f} |",
        f"| `redis://` | {n_redis:,} | {1e9 / redis_rate * HOSTS:,.0f} | {redis_rate:,.0f} "
        f"| {redis_cmds:.2f} |",
        "",
        f"Over the limit ({limit:,}/hour: leases of at most {limit // 8:,}; {HOSTS * n:,} offered): "
        f"admitted {admitted:,.0f} = {share:.3f} × the limit, at {per_sec(med(over, 'rate'), 'hits')} "
        f"aggregate, {med(over, 'commands'):.4f} Redis commands per hit. Under the limit the leases "
        "grow to what a host spends (twice its last lease's hits), so round trips become rare.",
    ])  # fmt: skip
    _harness.finish(targets, details, args.json)


if __name__ == "__main__":
    main()
