"""What a key costs: bytes of /dev/shm per live key, and hits over warm keys in random order.

Memory is measured as users meet it: ``st_blocks`` of every segment a store made (what the
tmpfs really holds, not the files' sparse apparent sizes), after N distinct clients arrived in
random order and made 3 hits each, divided by N. The anchors in the same table: limits'
``memory://`` (the Python heap it grew by, tracemalloc) and ``redis://`` (redis-server's
``used_memory`` delta) holding the same clients, and nginx's and HAProxy's documented sizes.

Speed over many keys is measured in random order, as clients really arrive: each round hits
every one of K warm keys once, in a fresh random order, against the floor (see _harness).

The memory issue's app, measured the same way: tests/apps/flask_fourteen.py (Flask-Limiter
on the default ``shm://``, 2 default limits and 12 routes with their own), driven through WSGI
by N clients in random order, each making 1-3 requests to random routes, with ``time.time``
held still so every window stays live; per strategy, ``st_blocks`` of its segments over N,
and how many such clients Docker's default 64 MiB /dev/shm would hold at that rate.

    .venv/bin/python benchmarks/bench_memory.py [--quick] [--keys N] [--no-redis] [--app]

A full run measures the app last, with min(N, 20,000) clients; ``--app`` measures only the app
(N clients: ``--keys``, default 20,000; 10,000 with ``--quick``).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support/servers.py

import numpy as np
from _harness import FloorPairs, Paired, fresh_loop, ns
from support.servers import free_port, wait_listening

import shmwin
import shmwin.integrations.limits  # registers shm://
from shmwin import Limiter, Window
from shmwin.backends.shm.segment import PREFIX, SHM_DIR

ANCHORS = {"nginx limit_req (per state, 64-bit)": 128, "HAProxy stick table (entry + 1 rate counter)": 62}
HITS_PER_CLIENT = 3
APPS = Path(__file__).resolve().parent.parent / "tests" / "apps"  # flask_fourteen.py
DOCKER_SHM = 64 * 2**20


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
    port = free_port()
    work = tempfile.mkdtemp(prefix="bench-redis-")
    proc = subprocess.Popen([exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", work],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_listening(proc, port, "redis-server", timeout_s=10)
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


# -- the memory issue's app: 14 limits on shm:// -----------------------------------------------------


def app_memory(strategy: str, n: int) -> tuple[float, float, dict[int, int]]:
    """flask_fourteen on shm:// with ``strategy``, N clients x 1-3 requests: (bytes of
    /dev/shm per client, requests per client, answers by status). A full /dev/shm shows as
    answers other than 200 and 429 (the measurement goes on)."""
    sys.path.insert(0, str(APPS))
    import flask_fourteen as ff

    prefix = f"bench-app-{uuid.uuid4().hex[:8]}"
    app = ff.create_app(prefix, strategy)
    app.logger.disabled = True  # a 500 (a full /dev/shm) is counted, not printed
    answers: dict[int, int] = {}
    made = 0
    try:
        with ff.FrozenTime() as clock:
            for r in ff.requests(n):
                clock.tick()
                status = ff.call(app, r.addr, r.path)[0]
                answers[status] = answers.get(status, 0) + 1
                made += 1
        return allocated(prefix) / n, made / n, answers
    finally:
        shmwin.unlink_prefix(prefix)


def app_table(n: int) -> None:
    try:
        import flask_limiter  # noqa: F401  (the test extra: pip install -e '.[test]')
    except ImportError:
        print("\n(the 14-limit app needs Flask-Limiter: pip install -e '.[test]')")
        return
    print(f"\n## The 14-limit Flask-Limiter app on shm:// ({n:,} clients in random order, 1-3 requests each)")
    print()
    print("| strategy | bytes per client | requests per client | clients in 64 MiB | answers |")
    print("| --- | ---: | ---: | ---: | --- |")
    for strategy in ("fixed-window", "moving-window", "sliding-window-counter"):
        per, reqs, answers = app_memory(strategy, n)
        shown = ", ".join(f"{count:,}× {status}" for status, count in sorted(answers.items()))
        print(f"| {strategy} | {per:,.0f} | {reqs:.2f} | {DOCKER_SHM / per:,.0f} | {shown} |", flush=True)


# -- random-order hits over warm keys ----------------------------------------------------------------


def random_order(pairs: FloorPairs, keys: int, rounds: int) -> dict[str, Paired]:
    """ns per call beside the floor, every key once per round in a new random order.

    ``Limiter.hit``, and over the same keys in the same orders two references that show what
    this machine's memory makes of such a loop: ``id(key)`` (the loop alone touching each key,
    which every call on these keys pays) and ``dict.get`` on a dict of them (CPython's own
    hash table: the key, then its table's entry). Then ``Limiter.hit`` with each key a new
    object equal to the one cached, made just before, as a web request builds its key.
    """
    name = f"bench-rand-{uuid.uuid4().hex[:8]}"
    lim = Limiter(name, "1000000000/hour")
    try:
        labels = clients(keys)
        for label in labels:  # warm: each key's row and this process's cache entry exist
            lim.hit(label)
        table = dict.fromkeys(labels, 0)
        calls = {"Limiter.hit": (lim.hit, fresh_loop("each")), "id(key)": (id, fresh_loop("each")),
                 "dict.get(key)": (table.get, fresh_loop("each"))}  # fmt: skip
        fresh = "Limiter.hit, each key a new object"  # as a request builds its key
        rng = np.random.default_rng(3)
        for _ in range(rounds):
            order = [labels[i] for i in rng.permutation(keys)]
            for what, (fn, loop) in calls.items():
                sample = lambda fn=fn, loop=loop, order=order: loop(fn, order, 1) / keys * 1e9  # noqa: E731
                pairs.take(f"{what}, {keys:,} keys", sample)
            copies = [key[:1] + key[1:] for key in order]  # equal, not the cached objects
            loop = fresh_loop("each")
            sample = lambda loop=loop, copies=copies: loop(lim.hit, copies, 1) / keys * 1e9  # noqa: E731
            pairs.take(f"{fresh}, {keys:,} keys", sample)
        return {what: pairs.result(f"{what}, {keys:,} keys") for what in (*calls, fresh)}
    finally:
        lim.close()
        shmwin.unlink(name)


def miss_ns(mib: int = 64) -> float | None:
    """ns of one dependent miss through ``mib`` MiB (benchmarks/memlat.c), or None without cc."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "memlat")
        source = Path(__file__).resolve().parent / "memlat.c"
        if subprocess.run([cc, "-O2", "-o", exe, str(source)], capture_output=True).returncode != 0:
            return None
        out = subprocess.run([exe, str(mib)], capture_output=True, text=True, check=True).stdout
        return float(out)


def random_order_table(pairs: FloorPairs, sizes: tuple[int, ...], rounds: int) -> None:
    """The random-order rows, and what one dependent miss costs here, against the floor."""
    print("\n## Warm keys hit in random order, against the floor\n")
    print("| keys | call | ns per call | floor ns | ratio |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for keys in sizes:
        for what, r in random_order(pairs, keys, rounds).items():
            print(f"| {keys:,} | {what} | {ns(r.ns)} | {ns(r.floor_ns)} | {r.ratio:.2f}× |")
    miss = miss_ns()
    if miss is not None:
        floor = pairs.all_floor_ns()
        print(f"\nOne dependent miss (benchmarks/memlat.c, 64 MiB in random order): {ns(miss)},"
              f" {miss / floor:.2f}× the floor ({ns(floor)}).")  # fmt: skip


# -- main ----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 clients, 100,000 warm keys at most")
    parser.add_argument("--keys", type=int, default=None, help="clients for the memory table")
    parser.add_argument("--no-redis", action="store_true", help="leave out the redis:// anchor")
    parser.add_argument("--app", action="store_true", help="only the 14-limit Flask-Limiter app")
    args = parser.parse_args()
    if args.app:
        app_table(args.keys or (10_000 if args.quick else 20_000))
        return
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
    random_order_table(pairs, (100_000,) if args.quick else (100_000, 1_000_000), 3 if args.quick else 5)

    app_table(min(n, 20_000))


if __name__ == "__main__":
    main()
