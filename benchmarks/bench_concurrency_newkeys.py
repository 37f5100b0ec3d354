"""A new key's cost in a Concurrency: its row handed out (emptied), then one acquire and one
release, over 100,000 keys (limit 4, capacity 200,000), in thread CPU time; and the segment's
size (address space: a sparse file). benchmarks/README.md ("Concurrency's live limits") has
the run before and after format 11."""

from __future__ import annotations

import os
import time
import uuid

from shmwin import Concurrency

N = 100_000


def main() -> None:
    name = f"bench-nk-{uuid.uuid4().hex[:8]}"
    conc = Concurrency(name, 4, capacity=2 * N)
    try:
        keys = [f"k{i}" for i in range(N)]
        start_ns = time.thread_time_ns()
        for key in keys:
            conc.acquire(key, 0)
            conc.release(key)
        per_key_ns = (time.thread_time_ns() - start_ns) / N
        size = os.path.getsize(f"/dev/shm/shmwin.{name}")
        print(f"{per_key_ns:.0f} ns per new key (acquire + release); segment {size / 1e6:.0f} MB")
    finally:
        conc.close()
        conc.unlink()


if __name__ == "__main__":
    main()
