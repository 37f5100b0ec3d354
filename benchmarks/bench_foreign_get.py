"""limits' ``get`` of a key its strategies did not build ("user:42": django-ratelimit's,
pyrate-limiter's, an app's own), on ``shm://`` against ``memory://``, in one run, with a busy
/dev/shm (BUSY other segments beside the storage's 3 fixed-window segments).

``get`` of such a key looks in every fixed-window segment of the storage. While the storage's
board (backends/shm/boards.py: a word each creator of a fixed-window segment changes) holds the
value read before this process last listed them, it reads that word and nothing else: no
listing, no stat(). The "look again" row is what a get pays once after a segment of the storage
was created or removed anywhere (the board changed): a stat() of /dev/shm, an open() of the
board, and a listing if /dev/shm changed (not timed here: the listing is kept, as it is while
nothing else changes /dev/shm).

    .venv/bin/python benchmarks/bench_foreign_get.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from limits.storage import storage_from_string

import shmwin
import shmwin.integrations.limits

BUSY = 300


def per_call_ns(storage, n: int) -> float:  # type: ignore[no-untyped-def]
    get = storage.get
    started = time.perf_counter_ns()
    for _ in range(n):
        get("user:42")
    return (time.perf_counter_ns() - started) / n


def per_call_ns_of(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - started) / n


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, n = (3, 2_000) if quick else (9, 20_000)
    tag = f"bench-foreign-{os.getpid()}"
    busy = [shmwin.Window(f"{tag}-busy-{i}", span=1, buckets=1) for i in range(BUSY)]
    shm, memory = storage_from_string(f"shm://{tag}"), storage_from_string("memory://")
    one = storage_from_string(f"shm://{tag}-one")  # a storage of one fixed-window period
    try:
        for storage in (shm, memory):
            for expiry in (60, 3600, 86400):
                storage.incr("user:42", expiry)
        one.incr("user:42", 60)
        assert shm.get("user:42") == memory.get("user:42") == 3 and one.get("user:42") == 1
        shms, memories, ones = [], [], []
        for r in range(rounds):
            trio = [(shm, shms), (memory, memories), (one, ones)]
            for storage, out in trio if r % 2 == 0 else trio[::-1]:
                out.append(per_call_ns(storage, n))
        ratio = statistics.median(s / m for s, m in zip(shms, memories, strict=True))
        ratio_one = statistics.median(s / m for s, m in zip(ones, memories, strict=True))
        segments = shm.segments  # type: ignore[attr-defined]

        def look_again() -> None:
            segments._fixed_seen = (None, [])  # as if the board changed: the next get lists
            segments.foreign.forget()  # (and the native sum answers None until it did)
            shm.get("user:42")

        again = statistics.median(per_call_ns_of(look_again, n // 10) for _ in range(rounds))
        print(f"/dev/shm holds {len(shmwin.names())} segments")
        print("| storage | ns per get (median) |")
        print("| --- | --- |")
        print(f"| memory:// | {statistics.median(memories):.0f} |")
        print(f"| shm://, 3 fixed-window periods | {statistics.median(shms):.0f} |")
        print(f"| shm://, 1 fixed-window period | {statistics.median(ones):.0f} |")
        print(f"| shm://, looking again (a segment was made or removed) | {again:.0f} |")
        print(f"\nratio shm / memory: {ratio:.2f}x (3 periods), {ratio_one:.2f}x (1 period)")
    finally:
        for w in busy:
            w.unlink()
            w.close()
        for name in shmwin.names():
            if name.startswith((tag + ".", tag + "-one.")):
                shmwin.unlink(name)


if __name__ == "__main__":
    main()
