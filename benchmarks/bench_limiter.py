"""Limiter benchmarks: shmwin's Limiter.hit() against the floor and its peers, same run, ratios.

    .venv/bin/python benchmarks/bench_limiter.py [--quick] [--json FILE]

1 process: ns per hit(), each sample beside a sample of the floor (a loop calling only
time.monotonic_ns()), medians over rounds. 2 or more processes: forked at a barrier,
aggregate = total hits / the slowest process's time, median over rounds, contenders
interleaved. Every multi-process contender is offered twice its limit and what it
admitted is reported, so "fast" is never bought with a wrong answer. Starts its own
redis-server (Debian's package) on a free loopback port.
Method: benchmarks/_harness.py; results and prose: benchmarks/README.md (scripts/bench).
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable

import _harness
from _harness import Contender, FloorPairs, Loop, Target, fresh_loop, interleaved, ns, per_sec

from shmwin import Limiter

NEVER = f"{10**12}/hour"  # a limit the 1-process loops never reach
# option: (what it sizes, --quick, full)
SIZES: _harness.Sizes = {
    "hits": ("shmwin, 2 processes: hits per process per run", 20_000, 100_000),
    "peer-hits": ("redis and pyrate peers: hits per process", 300, 4_000),
    "repeat": ("rounds of the in-memory contenders", 1, 5),
    "slow-repeat": ("rounds of the redis and pyrate contenders", 1, 3),
    "single-ops": ("1 process, one key: hits per sample", 30_000, 200_000),
    "single-repeat": ("1 process, one key: rounds", 3, 9),
    "keys": ("1 process: distinct keys", 20_000, 100_000),
    "key-repeat": ("1 process, many keys: rounds", 1, 5),
}

# -- contenders: (setup in the parent) -> per-process loop returning (seconds, admitted) ---------


def shmwin_loop(name: str, key: str | None = "client") -> Loop:
    """Each process attaches and hits ``key``; ``key=None``: a key of its own (distinct keys)."""

    def run(n: int) -> tuple[float, int]:
        lim = Limiter.attach(name)
        hit = lim.hit
        label = key if key is not None else f"client-{os.getpid()}"
        t = time.perf_counter()
        admitted = 0
        for _ in range(n):
            admitted += hit(label)
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
    """pyrate-limiter 4.x (the extras pin it since shmwin.integrations.pyrate targets it; 3.x
    took ``raise_when_fail=False, max_delay=None``): a refusal is ``try_acquire(blocking=True,
    timeout=0)``'s TimeoutError. Not ``blocking=False``: 4.5.0's MultiprocessBucket then refuses
    whenever its leaker thread holds the shared lock (2 of 300 admitted under a limit of 100)."""

    def run(n: int) -> tuple[float, int]:
        from pyrate_limiter import Limiter as PyrateLimiter

        try_acquire = PyrateLimiter(bucket).try_acquire

        def acquire(name: str) -> bool:
            try:
                return bool(try_acquire(name, blocking=True, timeout=0))
            except TimeoutError:
                return False

        t = time.perf_counter()
        admitted = sum(acquire("client") for _ in range(n))
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
    loop(1)
    sent, restore = _harness.counting_redis_commands()
    try:
        loop(hits)
    finally:
        restore()
    return sent[0] / hits


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


# -- 1 process ----------------------------------------------------------------------------------


def _sampler(loop, fn, arg, n: int, per: int):  # type: ignore[no-untyped-def]
    """A sample: ``loop(fn, arg, n)``, in ns per hit when it makes ``per`` hits."""
    return lambda: loop(fn, arg, n) / per * 1e9


def bench_single(pairs: FloorPairs, rounds: int, keys: int, key_rounds: int, warm_rounds: int) -> dict:
    """ns per hit: one key; first hits of new keys; round-robin over warm keys; keys new to
    this process only (a second handle). Every sample is paired with a floor sample."""
    n = pairs.floor_n
    lim = Limiter(f"bench-1p-{uuid.uuid4().hex[:8]}", NEVER, capacity=1000)
    try:
        one_key = fresh_loop("call_arg")
        hit = lim.hit
        one_key(hit, "client", n // 10 + 1)  # warm-up, untimed: the key's entry, the loop's call site
        pairs.floor_sample()
        for _ in range(rounds):
            pairs.take("one key", _sampler(one_key, hit, "client", n, n))
        used = lim.stats("client").used
        assert used == n // 10 + 1 + rounds * n, f"one key: {used} hits counted"
    finally:
        lim.close()
        lim.unlink()

    capacity = None  # the default: the key table grows as keys come (rebuilds included below)
    first, warm, elsewhere = fresh_loop("each"), fresh_loop("each"), fresh_loop("each")
    bytes_per_key = None
    for r in range(key_rounds):  # a fresh limiter and fresh key strings every round
        lim = Limiter(f"bench-keys-{uuid.uuid4().hex[:8]}", NEVER, capacity=capacity)
        try:
            labels = [f"user-{r}-{i:06d}" for i in range(keys)]
            hit = lim.hit
            pairs.take("first hit of a new key", _sampler(first, hit, labels, 1, keys))
            pairs.take("warm keys", _sampler(warm, hit, labels, warm_rounds, warm_rounds * keys))
            other = Limiter.attach(lim.name)  # its own key cache: every key is new to it
            try:
                pairs.take("new to this process", _sampler(elsewhere, other.hit, labels, 1, keys))
            finally:
                other.close()
            for label in (labels[0], labels[-1]):
                used = lim.stats(label).used
                assert used == 2 + warm_rounds, f"{label}: {used} hits counted"
            window = getattr(lim, "window", None)
            if bytes_per_key is None and window is not None and hasattr(window, "nbytes"):
                bytes_per_key = window.nbytes / keys  # what /dev/shm really holds per key
        finally:
            lim.close()
            lim.unlink()
    return {
        label: pairs.result(label)
        for label in ("one key", "first hit of a new key", "warm keys", "new to this process")
    } | {"bytes per key": bytes_per_key, "capacity": capacity}


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    args, (n, slow_n, r, slow_r, n1, r1, keys, key_r) = _harness.sized_args(__doc__, SIZES)
    warm_rounds = max(1, n1 // keys)

    print(f"# bench_limiter: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores; 1 process: {n1:,} hits/sample, median of {r1}, {keys:,} keys "
          f"median of {key_r}; {n:,} hits/process median of {r}; slow peers {slow_n:,} hits/process "
          f"median of {slow_r}")  # fmt: skip
    pairs = FloorPairs(n1)
    single = bench_single(pairs, r1, keys, key_r, warm_rounds)

    created: list[Limiter] = []

    def shm(limit: int, key: str | None = "client") -> Loop:
        lim = Limiter(f"bench-lim-{uuid.uuid4().hex[:8]}", f"{limit}/hour", capacity=1000)
        created.append(lim)
        return shmwin_loop(lim.name, key)

    def memory_moving(limit: int) -> Loop:
        return limits_loop("memory://", "MovingWindowRateLimiter", limit)

    redis = RedisServer()
    try:
        from pyrate_limiter import Duration, MultiprocessBucket
        from pyrate_limiter import Rate as PyrateRate

        def pyrate(limit: int) -> Loop:
            return pyrate_loop(MultiprocessBucket.init([PyrateRate(limit, Duration.HOUR)]))

        def redis_swc(limit: int) -> Loop:
            uri = f"redis://127.0.0.1:{redis.port}/{uuid.uuid4().int % 16}"
            return limits_loop(uri, "SlidingWindowCounterRateLimiter", limit)

        def redis_mine(limit: int) -> Loop:
            url = f"redis://127.0.0.1:{redis.port}/0"
            name = f"bench-redis-{uuid.uuid4().hex[:8]}"
            Limiter(name, f"{limit}/hour", backend=url).close()
            return shmwin_redis_loop(name, url)

        def offered_twice(label: str, make: Callable[[int], Loop], hits: int, procs: int = 2) -> Contender:
            """``procs`` processes of ``hits`` each, against a limit of half of them."""
            limit = hits * procs // 2
            return Contender(label, lambda: make(limit), hits, procs, limit)

        # in memory, interleaved: one hot key (2 and 8 processes), distinct keys (1 and 2)
        hot = offered_twice("shmwin Limiter.hit()", shm, n)
        memory = offered_twice("limits moving-window, memory:// (per process)", memory_moving, n // 4)
        hot8 = offered_twice("shmwin Limiter.hit(), 8 processes", shm, n // 4, 8)
        distinct2 = Contender("shmwin, distinct keys", lambda: shm(n // 2, None), n, 2, n)
        distinct1 = Contender("shmwin, distinct keys", lambda: shm(n // 2, None), n, 1, n // 2)
        interleaved([hot, memory, distinct2, distinct1, hot8], r)
        # through redis (and a Manager process), interleaved
        swc = offered_twice("limits sliding-window-counter, redis", redis_swc, slow_n)
        pyr = offered_twice("pyrate-limiter MultiprocessBucket", pyrate, slow_n)
        ours = offered_twice("shmwin Limiter(backend='redis://…')", redis_mine, slow_n)
        interleaved([swc, pyr, ours], slow_r)
        ours_rt = round_trips_per_hit(redis_mine(10**9))
        theirs_rt = round_trips_per_hit(redis_swc(10**9))
    finally:
        redis.stop()
        for lim in created:
            lim.close()
            lim.unlink()

    one, warm, new = single["one key"], single["warm keys"], single["first hit of a new key"]
    elsewhere = single["new to this process"]
    k = f"{keys:,}"
    hot_ratio, scale = hot.rate / memory.rate, distinct2.rate / distinct1.rate
    targets = [
        Target("hit-one-key", "`Limiter.hit()`, one key", ns(one.ns), f"floor {ns(one.floor_ns)}",
               f"{one.ratio:.2f}×", "≤ 2.5×", one.ratio <= 2.5),
        Target("hit-warm-keys", f"`hit()` over {k} warm keys (round-robin)", ns(warm.ns),
               f"floor {ns(warm.floor_ns)}", f"{warm.ratio:.2f}×", "≤ 4×", warm.ratio <= 4),
        Target("hit-new-key", f"first hit of a new key ({k} keys)", ns(new.ns),
               f"floor {ns(new.floor_ns)}", f"{new.ratio:.2f}×", "≤ 15×", new.ratio <= 15),
        Target("hot-key-2p", "2 processes, one hot key, strict and exact",
               f"{per_sec(hot.rate, 'hits')}, {'exact' if hot.exact else 'NOT exact'}",
               f"`limits` memory:// moving window {per_sec(memory.rate)} "
               f"({'exact' if memory.exact else _times_limit(memory)})",
               f"{hot_ratio:.2f}×", "≥ 5×, exact", hot_ratio >= 5 and hot.exact),
        Target("distinct-keys-2p", "2 processes, distinct keys",
               f"{per_sec(distinct2.rate, 'hits')}, {'exact' if distinct2.exact else 'NOT exact'}",
               f"1 process {per_sec(distinct1.rate)}", f"{scale:.2f}× one process", "≥ 10 M hits/s",
               distinct2.rate >= 10e6 and distinct2.exact),
    ]  # fmt: skip
    _harness.print_targets(targets)

    details = [
        "#### Limiter: one key, aggregate hits/s; every contender is offered 2× its limit",
        "",
        "| contender | procs | hits/s | admitted / limit | shmwin ÷ it | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for c, target in [(hot, None), (swc, 30), (pyr, 30), (memory, 5), (hot8, None)]:
        ratio = f"{hot.rate / c.rate:.1f}×" if target else ""
        goal = f"≥ {target}× {'✓' if hot.rate / c.rate >= target else '✗'}" if target else ""
        details.append(f"| {c.label} | {c.procs} | {c.rate:,.0f} | {c.admitted_text()} | {ratio} | {goal} |")
    eight = hot8.rate / hot.rate
    details += [
        "",
        f"8 processes on {os.cpu_count()} cores: {eight:.2f}× the 2-process aggregate "
        f"(earlier target ≥ 0.7× {'✓' if eight >= 0.7 else '✗'})",
        "",
        "#### Limiter: distinct keys (one per process), aggregate hits/s, each offered 2× its limit",
        "",
        "| contender | procs | hits/s | admitted / limit | × 1 process |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| {distinct1.label} | 1 | {distinct1.rate:,.0f} | {distinct1.admitted_text()} | 1.00× |",
        f"| {distinct2.label} | 2 | {distinct2.rate:,.0f} | {distinct2.admitted_text()} | {scale:.2f}× |",
        "",
        "#### Limiter: the redis backend, several hosts, one limit (2 processes, same redis-server)",
        "",
        "| contender | hits/s | admitted / limit | round trips per hit | ratio |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| {ours.label} | {ours.rate:,.0f} | {ours.admitted_text()} | {ours_rt:.2f} | "
        f"{ours.rate / swc.rate:.2f}× (earlier target ≥ 1× {'✓' if ours.rate >= swc.rate else '✗'}) |",
        f"| {swc.label} | {swc.rate:,.0f} | {swc.admitted_text()} | {theirs_rt:.2f} | 1.00× |",
        "",
        "#### Limiter: keys, 1 process, ns per hit (limit never reached; default key table, which grows)",
        "",
        "| workload | ns/hit | floor beside it | × floor | × one key |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, p in [
        ("one key", one),
        (f"{k} keys, round-robin, each hit once before (warm)", warm),
        (f"{k} keys, each new to the segment (first hit, entry inserted)", new),
        (f"{k} keys, each new to this process only (looked up, then cached)", elsewhere),
    ]:
        row = f"{p.ns:,.0f} | {p.floor_ns:,.0f} | {p.ratio:.2f}× | {p.ns / one.ns:.2f}×"
        details.append(f"| {label} | {row} |")
    if single["bytes per key"]:
        details += ["", f"memory: {single['bytes per key']:,.0f} bytes of /dev/shm held per key in use"]
    _harness.finish(targets, details, args.json)


def _times_limit(c: Contender) -> str:
    worst = max(c.admitted)
    return f"admitted {worst / c.limit:.2f}× the limit" if c.limit else ""


if __name__ == "__main__":
    main()
