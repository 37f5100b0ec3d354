"""What a key costs: bytes of /dev/shm per live key, and hits over warm keys in random order.

Memory is measured as users meet it: ``st_blocks`` of every segment a store made (what the
tmpfs really holds, not the files' sparse apparent sizes), after N distinct clients arrived in
random order and made 3 hits each, divided by N. The anchors in the same table: limits'
``memory://`` (the Python heap it grew by, tracemalloc) and ``redis://`` (redis-server's
``used_memory`` delta) holding the same clients, and nginx's and HAProxy's documented sizes.

Speed over many keys is measured in random order, as clients really arrive: each round hits
every one of K warm keys once, in a fresh random order, against the floor (see _harness).

    .venv/bin/python benchmarks/bench_memory.py [--quick] [--keys N] [--no-redis]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
from _harness import FloorPairs, Paired, fresh_loop, ns

import shmwin
import shmwin.integrations.limits  # registers shm://
from shmwin import Limiter, Window
from shmwin.backends.shm.segment import PREFIX, SHM_DIR

ANCHORS = {"nginx limit_req (per state, 64-bit)": 128, "HAProxy stick table (entry + 1 rate counter)": 62}
HITS_PER_CLIENT = 3


def allocated(prefix: str) -> int:
    """Bytes the segments named ``prefix*`` hold in /dev/shm (st_blocks)."""
    total = 0
    for entry in os.scandir(SHM_DIR):
        if entry.name.startswith(PREFIX + prefix):
            total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


def clients(n: int, seed: int = 7) -> list[str]:
    """N client keys as Flask-Limiter would make them (remote address), in random order."""
    rng = random.Random(seed)
    keys = [f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}" for i in range(n)]
    rng.shuffle(keys)
    return keys


# -- bytes per key, shared memory ------------------------------------------------------------------


def native(kind: str, n: int) -> float:
    """A native Limiter ("100/minute", default buckets or exact) or a keyed Window."""
    name = f"bench-mem-{uuid.uuid4().hex[:8]}"
    if kind == "window":
        store: Window | Limiter = Window(name, span=60, buckets=60, keyed=True)
        hit: Callable[[str], object] = lambda k: store.add(1, key=k)  # noqa: E731
    else:
        store = Limiter(name, "100/minute", exact=(kind == "limiter, exact"))
        hit = store.hit
    try:
        for key in clients(n):
            for _ in range(HITS_PER_CLIENT):
                hit(key)
        return allocated(name) / n
    finally:
        store.close()
        shmwin.unlink(name)


def limits_storage(strategy: str, rate: str, n: int) -> float:
    """limits' strategy on shm://, N clients x 3 hits."""
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES

    prefix = f"bench-lim-{uuid.uuid4().hex[:8]}"
    storage = storage_from_string(f"shm://{prefix}")
    limiter = STRATEGIES[strategy](storage)
    item = parse(rate)
    try:
        for key in clients(n):
            for _ in range(HITS_PER_CLIENT):
                limiter.hit(item, key)
        return allocated(prefix) / n
    finally:
        storage.reset()
        shmwin.unlink_prefix(prefix)


# -- the anchors: memory:// and redis:// with the same clients -------------------------------------


def limits_memory(strategy: str, rate: str, n: int) -> float:
    from limits import parse
    from limits.storage import MemoryStorage
    from limits.strategies import STRATEGIES

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    storage = MemoryStorage()
    limiter = STRATEGIES[strategy](storage)
    item = parse(rate)
    for key in clients(n):
        for _ in range(HITS_PER_CLIENT):
            limiter.hit(item, key)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    storage.reset()
    return grown / n


@contextmanager
def redis_server() -> Iterator[str | None]:
    exe = shutil.which("redis-server")
    if exe is None:
        yield None
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(work, ignore_errors=True)


def limits_redis(url: str, strategy: str, rate: str, n: int) -> float:
    import redis
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES

    client = redis.Redis.from_url(url)
    client.flushall()
    before = int(client.info("memory")["used_memory"])
    limiter = STRATEGIES[strategy](storage_from_string(url))
    item = parse(rate)
    for key in clients(n):
        for _ in range(HITS_PER_CLIENT):
            limiter.hit(item, key)
    grown = int(client.info("memory")["used_memory"]) - before
    client.flushall()
    return grown / n


# -- random-order hits over warm keys ----------------------------------------------------------------


def random_order(pairs: FloorPairs, keys: int, rounds: int) -> Paired:
    """ns per hit beside the floor: every key hit once per round, in a new random order."""
    name = f"bench-rand-{uuid.uuid4().hex[:8]}"
    lim = Limiter(name, "1000000000/hour")
    try:
        labels = clients(keys)
        for label in labels:  # warm: each key's row and this process's cache entry exist
            lim.hit(label)
        loop = fresh_loop("each")
        rng = np.random.default_rng(3)
        label = f"warm keys, random order ({keys:,})"
        for _ in range(rounds):
            order = [labels[i] for i in rng.permutation(keys)]
            pairs.take(label, lambda order=order: loop(lim.hit, order, 1) / keys * 1e9)
        return pairs.result(label)
    finally:
        lim.close()
        shmwin.unlink(name)


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 clients, 100,000 warm keys at most")
    parser.add_argument("--keys", type=int, default=None, help="clients for the memory table")
    parser.add_argument("--no-redis", action="store_true", help="leave out the redis:// anchor")
    args = parser.parse_args()
    n = args.keys or (10_000 if args.quick else 100_000)

    rows: list[tuple[str, str, float]] = []  # (store, what, bytes per client)
    for kind in ("limiter", "limiter, exact", "window"):
        label = {"limiter": "Limiter('100/minute')", "limiter, exact": "Limiter('100/minute', exact=True)",
                 "window": "keyed Window(span=60, buckets=60)"}[kind]  # fmt: skip
        rows.append(("shmwin native", label, native(kind, n)))
        print(f"# {rows[-1]}", file=sys.stderr)
    cases = [(s, r) for s in ("fixed-window", "moving-window", "sliding-window-counter")
             for r in ("20/minute", "1000/day")]  # fmt: skip
    for strategy, rate in cases:
        rows.append(("shm://", f"{strategy} {rate}", limits_storage(strategy, rate, n)))
        print(f"# {rows[-1]}", file=sys.stderr)
        rows.append(("memory://", f"{strategy} {rate}", limits_memory(strategy, rate, n)))
    if not args.no_redis:
        with redis_server() as url:
            if url is not None:
                for strategy, rate in cases:
                    rows.append(("redis://", f"{strategy} {rate}", limits_redis(url, strategy, rate, n)))

    print(f"## Memory per client ({n:,} clients in random order, {HITS_PER_CLIENT} hits each)\n")
    print("| store | what | bytes per client |")
    print("| --- | --- | ---: |")
    for store, what, per in rows:
        print(f"| {store} | {what} | {per:,.0f} |")
    for what, per in ANCHORS.items():
        print(f"| anchor | {what} | {per} |")

    pairs = FloorPairs(200_000 if args.quick else 1_000_000)
    print("\n## Warm keys hit in random order, against the floor\n")
    print("| keys | ns per hit | floor ns | ratio |")
    print("| ---: | ---: | ---: | ---: |")
    for keys in (100_000,) if args.quick else (100_000, 1_000_000):
        r = random_order(pairs, keys, 3 if args.quick else 5)
        print(f"| {keys:,} | {ns(r.ns)} | {ns(r.floor_ns)} | {r.ratio:.2f}× |")


if __name__ == "__main__":
    main()
