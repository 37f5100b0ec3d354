"""Limiter benchmarks: shmwin's Limiter.hit() against its peers, same run, ratios.

    .venv/bin/python benchmarks/bench_limiter.py [--hits N] [--repeat R]

Processes are forked and start together at a barrier; aggregate = total hits /
the slowest process's time; median of R runs. Every contender gets the same
limit -- half of all the hits it is offered -- and the number it admitted is
reported, so "fast" is never bought with a wrong answer. Starts its own
redis-server (Debian's package) on a free loopback port.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

from shmwin import Limiter, Rate

HOUR_NS = 3600 * 10**9

# -- contenders: (setup in the parent) -> per-process loop returning (seconds, admitted) ---------

Loop = Callable[[int], tuple[float, int]]


def shmwin_loop(name: str, keys: int = 1, warm: bool = False) -> Loop:
    """Each process attaches; ``warm`` first hits every key once, untimed (a warm key cache)."""

    def run(n: int) -> tuple[float, int]:
        lim = Limiter.attach(name)
        hit = lim.hit
        labels = [f"client-{i}" for i in range(keys)]
        if warm:
            for label in labels:
                hit(label)
        t = time.perf_counter()
        admitted = 0
        if keys == 1:
            for _ in range(n):
                admitted += hit("client-0")
        else:
            for i in range(n):
                admitted += hit(labels[i % keys])
        elapsed = time.perf_counter() - t
        lim.close()
        return elapsed, admitted

    return run


def limits_loop(uri: str, strategy: str, limit: int) -> Loop:
    client = f"client-{uuid.uuid4().hex[:8]}"  # a fresh key for every run: the server outlives runs

    def run(n: int) -> tuple[float, int]:
        from limits import RateLimitItemPerHour, storage, strategies

        limiter = getattr(strategies, strategy)(storage.storage_from_string(uri))
        item, hit = RateLimitItemPerHour(limit), limiter.hit
        t = time.perf_counter()
        admitted = sum(hit(item, client) for _ in range(n))
        return time.perf_counter() - t, admitted

    return run


def pyrate_loop(bucket: object) -> Loop:
    """pyrate-limiter 3.x: 4.5.1's MultiprocessBucket was seen refusing the first hit of a
    fresh bucket, nondeterministically, so the peer is the last line that admits exactly."""

    def run(n: int) -> tuple[float, int]:
        from pyrate_limiter import Limiter as PyrateLimiter

        acquire = PyrateLimiter(bucket, raise_when_fail=False, max_delay=None).try_acquire
        t = time.perf_counter()
        admitted = sum(bool(acquire("client")) for _ in range(n))
        return time.perf_counter() - t, admitted

    return run


def shmwin_redis_loop(name: str, url: str) -> Loop:
    def run(n: int) -> tuple[float, int]:
        lim = Limiter.attach(name, backend=url)
        hit = lim.hit
        t = time.perf_counter()
        admitted = sum(hit("client") for _ in range(n))
        elapsed = time.perf_counter() - t
        lim.close()
        return elapsed, admitted

    return run


def round_trips_per_hit(loop: Loop, hits: int = 500) -> float:
    """Commands the client sends per hit (redis-py's send_command), after one warm-up hit."""
    import redis.connection

    loop(1)
    sent = [0]
    real = redis.connection.AbstractConnection.send_command

    def counting(self: object, *args: object, **kwargs: object) -> object:
        sent[0] += 1
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    redis.connection.AbstractConnection.send_command = counting  # type: ignore[method-assign]
    try:
        loop(hits)
    finally:
        redis.connection.AbstractConnection.send_command = real  # type: ignore[method-assign]
    return sent[0] / hits


# -- harness -------------------------------------------------------------------------------------


def _child(loop: Loop, n: int, barrier, out, slot: int) -> None:
    barrier.wait()
    out[2 * slot], out[2 * slot + 1] = loop(n)


def aggregate(loop: Loop, n: int, procs: int) -> tuple[float, int]:
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Array("d", 2 * procs, lock=False)
    ps = [ctx.Process(target=_child, args=(loop, n, barrier, out, i)) for i in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
        assert p.exitcode == 0, "benchmark process failed"
    slowest = max(out[2 * i] for i in range(procs))
    return procs * n / slowest, int(sum(out[2 * i + 1] for i in range(procs)))


def median_run(make: Callable[[int], Loop], n: int, procs: int, repeat: int) -> tuple[float, int, int]:
    """Median rate over ``repeat`` fresh runs; admitted of the last, and the limit offered."""
    rates, admitted = [], 0
    limit = n * procs // 2
    for _ in range(repeat):
        rate, admitted = aggregate(make(limit), n, procs)
        rates.append(rate)
    return statistics.median(rates), admitted, limit


class RedisServer:
    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server not found: apt-get install redis-server (scripts/bench does)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="shmwin-bench-redis-")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.025)
        raise SystemExit("redis-server did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hits", type=int, default=100_000, help="hits per process for shmwin")
    parser.add_argument("--peer-hits", type=int, default=4_000, help="hits per process for the slow peers")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, slow_n, r = args.hits, args.peer_hits, args.repeat
    created: list[Limiter] = []

    def shm(limit: int, keys: int = 1, capacity: int = 1000, warm: bool = False) -> Loop:
        lim = Limiter(f"bench-lim-{uuid.uuid4().hex[:8]}", Rate(limit, HOUR_NS), capacity=capacity)
        created.append(lim)
        return shmwin_loop(lim.name, keys, warm)

    redis = RedisServer()
    try:
        from pyrate_limiter import Duration, MultiprocessBucket
        from pyrate_limiter import Rate as PyrateRate

        def pyrate(limit: int) -> Loop:
            return pyrate_loop(MultiprocessBucket.init([PyrateRate(limit, Duration.HOUR)]))

        def redis_swc(limit: int) -> Loop:
            uri = f"redis://127.0.0.1:{redis.port}/{uuid.uuid4().int % 16}"
            return limits_loop(uri, "SlidingWindowCounterRateLimiter", limit)

        def memory_moving(limit: int) -> Loop:
            return limits_loop("memory://", "MovingWindowRateLimiter", limit)

        print(f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, "
              f"redis-server on loopback, median of {r}")  # fmt: skip
        print("\n## one key, aggregate hits/s; every contender is offered 2x its limit")
        mine, mine_admitted, mine_limit = median_run(shm, n, 2, r)
        rows = [("shmwin Limiter.hit()", 2, mine, mine_admitted, mine_limit, None)]
        for label, make, hits, target in [
            ("limits sliding-window-counter, redis", redis_swc, slow_n, 30),
            ("pyrate-limiter MultiprocessBucket", pyrate, slow_n, 30),
            ("limits moving-window, memory:// (per process)", memory_moving, n // 4, 1),
        ]:
            rate, admitted, limit = median_run(make, hits, 2, r)
            rows.append((label, 2, rate, admitted, limit, target))
        eight, eight_admitted, eight_limit = median_run(shm, n // 4, 8, r)
        rows.append(("shmwin Limiter.hit(), 8 processes", 8, eight, eight_admitted, eight_limit, None))
        print("| contender | procs | hits/s | admitted / limit | shmwin ÷ it | target |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, procs, rate, admitted, limit, target in rows:
            exact = "exact" if admitted == limit else f"{admitted / limit:.2f}× the limit"
            ratio = f"{mine / rate:.1f}×" if target else ""
            goal = f"≥{target}× {'✓' if mine / rate >= target else '✗'}" if target else ""
            print(
                f"| {label} | {procs} | {rate:,.0f} | {admitted:,} / {limit:,} ({exact}) | {ratio} | {goal} |"
            )
        scale = eight / mine
        print(f"\n8 processes on {os.cpu_count()} cores: {scale:.2f}× the 2-process aggregate "
              f"(target ≥0.7× {'✓' if scale >= 0.7 else '✗'})")  # fmt: skip
        print("\n## the redis backend: several hosts, one limit (2 processes, same redis-server)")

        def redis_mine(limit: int) -> Loop:
            name = f"bench-redis-{uuid.uuid4().hex[:8]}"
            Limiter(name, Rate(limit, HOUR_NS), backend=f"redis://127.0.0.1:{redis.port}/0").close()
            return shmwin_redis_loop(name, f"redis://127.0.0.1:{redis.port}/0")

        ours, ours_admitted, ours_limit = median_run(redis_mine, slow_n, 2, r)
        theirs, theirs_admitted, theirs_limit = median_run(redis_swc, slow_n, 2, r)
        ours_rt = round_trips_per_hit(redis_mine(10**9))
        theirs_rt = round_trips_per_hit(redis_swc(10**9))
        print("| contender | hits/s | admitted / limit | round trips per hit | ratio |")
        print("| --- | ---: | ---: | ---: | ---: |")
        ok = "✓" if ours / theirs >= 1 else "✗"
        print(f"| shmwin Limiter(backend='redis://…') | {ours:,.0f} | {ours_admitted:,} / {ours_limit:,} "
              f"| {ours_rt:.2f} | {ours / theirs:.2f}× (target ≥1× {ok}) |")  # fmt: skip
        theirs_row = f"{theirs:,.0f} | {theirs_admitted:,} / {theirs_limit:,} | {theirs_rt:.2f}"
        print(f"| limits sliding-window-counter, redis | {theirs_row} | 1.00× |")
        print("\n## keys, 1 process, ns per hit (limit never reached)")
        one_key = _ns_per_hit(shm(10**12, warm=True), n)
        new_keys = _ns_per_hit(shm(10**12, keys=100_000, capacity=120_000), 100_000)
        seen_elsewhere = _ns_per_hit(shmwin_loop(created[-1].name, 100_000), 100_000)
        warm = _ns_per_hit(shmwin_loop(created[-1].name, 100_000, warm=True), 3 * 100_000)
        print("| workload | ns/hit | × one key |")
        print("| --- | ---: | ---: |")
        for label, value in [
            ("one key", one_key),
            ("100,000 keys, each new to the segment (entry inserted)", new_keys),
            ("100,000 keys, each new to this process (looked up, then cached)", seen_elsewhere),
        ]:
            print(f"| {label} | {value:.0f} | {value / one_key:.2f}× |")
        ok = "✓" if warm / one_key <= 1.5 else "✗"
        ratio = f"{warm / one_key:.2f}× (target ≤1.5× {ok})"
        print(f"| 100,000 keys, cycling, warm (steady state) | {warm:.0f} | {ratio} |")
        print(f"\nmemory: {created[-1].window.nbytes / 120_000:.0f} bytes per key of capacity "
              f"(1 rate, {created[-1].window.geometry.rings[0].n_buckets} slots)")  # fmt: skip
    finally:
        redis.stop()
        for lim in created:
            lim.close()
            lim.unlink()


def _ns_per_hit(loop: Loop, n: int) -> float:
    seconds, _ = loop(n)
    return seconds / n * 1e9


if __name__ == "__main__":
    main()
