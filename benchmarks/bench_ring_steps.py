"""Limiter.hit's cost around a compact ring's head move (the ghost word, issue #33 item 2):
ns per hit beside the floor (a loop calling only time.monotonic_ns()), medians over rounds.

    PYTHONPATH=BUILD taskset -c 1 .venv/bin/python benchmarks/bench_ring_steps.py [rounds]

- one key, the real clock: a head move every 50 ms (20 buckets of a second), as in service;
- one key, a head move every hit: a clock (a Python callable, in both builds alike) that moves
  one bucket a call, so every hit drops a bucket holding hits (the ghost's store each time);
- warm keys, round-robin over 10,000 keys, the real clock.
Method: benchmarks/_harness.py; results: benchmarks/README.md.
"""

from __future__ import annotations

import sys
import uuid

from _harness import FloorPairs, fresh_loop

import shmwin
from shmwin import Limiter

RATE = "1000000000/second"  # never refuses: every hit counts and writes its bucket
BUCKET_NS = 50_000_000  # 20 buckets of a second


class StepClock:
    """Moves one bucket each reading: every hit moves the head and drops one bucket."""

    def __init__(self) -> None:
        self.now_ns = 10**15

    def __call__(self) -> int:
        self.now_ns += BUCKET_NS
        return self.now_ns


def main(rounds: int) -> None:
    pairs, n, keys = FloorPairs(200_000), 200_000, [f"user-{i:05d}" for i in range(10_000)]
    real = Limiter(f"bench-rs-{uuid.uuid4().hex[:8]}", RATE, buckets=20)
    stepped = Limiter(f"bench-rs-{uuid.uuid4().hex[:8]}", RATE, buckets=20, clock=StepClock())
    try:
        loops = {
            "one key, real clock": fresh_loop("call_arg"),
            "one key, a head move every hit": fresh_loop("call_arg"),
        }
        warm = fresh_loop("each")
        warm(real.hit, keys, 1)  # every key in the table and this process's cache, untimed
        for lim, label in ((real, "one key, real clock"), (stepped, "one key, a head move every hit")):
            loops[label](lim.hit, "k", n // 10)
        for _ in range(rounds):
            for lim, label in ((real, "one key, real clock"), (stepped, "one key, a head move every hit")):
                loop, hit = loops[label], lim.hit
                pairs.take(label, lambda loop=loop, hit=hit: loop(hit, "k", n) / n * 1e9)
            pairs.take("warm keys (10,000)", lambda: warm(real.hit, keys, 20) / (20 * len(keys)) * 1e9)
        print(f"shmwin {shmwin.__file__}")
        for label in ("one key, real clock", "one key, a head move every hit", "warm keys (10,000)"):
            r = pairs.result(label)
            print(f"{label:34} {r.ns:7.1f} ns  floor {r.floor_ns:5.1f} ns  {r.ratio:5.2f}x")
    finally:
        for lim in (real, stepped):
            lim.close()
            lim.unlink()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 9)
