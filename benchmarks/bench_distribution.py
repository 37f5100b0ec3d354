"""Distribution benchmarks: record() against the floor, 2 processes against a locked list.

    .venv/bin/python benchmarks/bench_distribution.py [--quick]

1 process: ns per ``record(0.0123)`` of a Distribution of three resolutions ("1m/1s", "1h/1m",
"24h/1h", 1 %), every sample beside a sample of the floor (a loop calling only
time.monotonic_ns()); issue 29: <= 2x. 2 processes, forked at a barrier: aggregate records/s
(total / the slowest process's time, median over rounds) of record() and of the cheapest exact
peer a user would write without shmwin: each process appends to a list under one shared
``multiprocessing.Lock`` (issue 29: >= 5x). Both are checked exact (every value counted).
Bytes: /dev/shm blocks (st_blocks) of one distribution of each geometry.
Method: benchmarks/_harness.py; results: README.md.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
import uuid

from _harness import Contender, FloorPairs, Loop, fresh_loop, interleaved

import shmwin
from shmwin import Distribution
from shmwin.backends.shm.segment import path_of

RESOLUTIONS = ("1m/1s", "1h/1m", "24h/1h")
VALUE = 0.0123


def bench_record(pairs: FloorPairs, rounds: int) -> float:
    """ns per record(VALUE), beside the floor; returns the median ratio."""
    d = Distribution(f"bench-dist-{uuid.uuid4().hex[:8]}", RESOLUTIONS)
    try:
        loop, record, n = fresh_loop("call_arg"), d.record, pairs.floor_n
        loop(record, VALUE, n // 10)  # warm-up
        for _ in range(rounds):
            pairs.take("record", lambda: loop(record, VALUE, n) / n * 1e9)
        assert d.count() == n // 10 + rounds * n, "record lost values"
    finally:
        d.unlink()
    return pairs.result("record").ratio


def dist_contender(n: int) -> Contender:
    names: list[str] = []

    def make() -> Loop:
        name = f"bench-dist2-{uuid.uuid4().hex[:8]}"
        Distribution(name, RESOLUTIONS).close()
        names.append(name)

        def run(count: int) -> tuple[float, int]:
            record = Distribution.attach(name).record
            t = time.perf_counter()
            for _ in range(count):
                record(VALUE)
            return time.perf_counter() - t, count

        return run

    c = Contender("shmwin Distribution.record", make, n)
    c.names = names  # type: ignore[attr-defined]
    return c


def list_contender(n: int, shared: bool) -> Contender:
    """``with lock: values.append(v)`` under one ``multiprocessing.Lock``: into a list shared by
    the processes (a ``Manager().list()``, the only list two processes can both append to), or
    into each process's own list (the lock shared, nothing else: the cheapest exact loop a
    multiprocessing.Lock can guard, a floor more than a peer)."""
    ctx = mp.get_context("fork")
    lock = ctx.Lock()
    manager = ctx.Manager() if shared else None

    def make() -> Loop:
        values = manager.list() if manager is not None else None

        def run(count: int) -> tuple[float, int]:
            mine = values if values is not None else []
            append, acquire, release = mine.append, lock.acquire, lock.release
            t = time.perf_counter()
            for _ in range(count):
                acquire()
                append(VALUE)
                release()
            took = time.perf_counter() - t
            return took, count if values is not None else len(mine)

        return run

    label = "Lock + Manager().list().append" if shared else "Lock + own list.append"
    c = Contender(label, make, n)
    c.manager = manager  # type: ignore[attr-defined]
    return c


def segment_bytes(resolutions: tuple[str, ...], error: float) -> int:
    d = Distribution(f"bench-distb-{uuid.uuid4().hex[:8]}", resolutions, relative_error=error)
    try:
        d.record(VALUE)
        return os.stat(path_of(d.name)).st_blocks * 512
    finally:
        d.unlink()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    quick = parser.parse_args().quick
    rounds, n1, n2 = (3, 20_000, 300_000) if quick else (15, 200_000, 2_000_000)
    pairs = FloorPairs(n1)
    ratio = bench_record(pairs, rounds)
    r = pairs.result("record")
    print("| operation | shmwin | floor or peer (same run) | ratio | target |")
    print("| --- | ---: | ---: | ---: | ---: |")
    print(f"| record(), 3 resolutions, 1 process | {r.ns:.0f} ns | {r.floor_ns:.0f} ns (monotonic_ns loop) "
          f"| {ratio:.2f}x | <= 2x |")
    dist, own, shared = dist_contender(n2), list_contender(n2, False), list_contender(n2 // 100, True)
    try:
        interleaved([dist, own, shared], 3 if quick else 7)
        for name in dist.names:  # type: ignore[attr-defined]
            d = Distribution.attach(name)
            assert d.count() == 2 * n2, f"{name}: {d.count()} of {2 * n2}"
    finally:  # nothing left in /dev/shm, whatever failed
        for name in dist.names:  # type: ignore[attr-defined]
            shmwin.unlink(name)
    shared.manager.shutdown()  # type: ignore[attr-defined]
    for peer in (own, shared):
        assert all(a == 2 * peer.n for a in peer.admitted), f"{peer.label} lost appends"
        print(f"| record(), 2 processes, aggregate | {dist.rate / 1e6:.2f} M/s | {peer.rate / 1e6:.3f} M/s "
              f"({peer.label}) | {dist.rate / peer.rate:.1f}x | >= 5x |")
    print()
    print("| geometry | relative error | /dev/shm bytes (st_blocks) |")
    print("| --- | ---: | ---: |")
    for res in (("1m/1s",), ("1m/1s", "1h/1m"), RESOLUTIONS):
        for error in (0.01, 0.02):
            print(f"| {', '.join(res)} | {error:.0%} | {segment_bytes(res, error):,} |")
    print(f"\n(medians over rounds; {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
