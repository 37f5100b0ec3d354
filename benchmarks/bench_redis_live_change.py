"""A change of rates costs a redis:// limiter's hot path nothing measurable (issue #31).

Two limiters on one redis-server, the same rate and 50 keys each: ``never`` is never changed;
``changed`` had its period changed once (1000000/minute -> 1000000/61second: a carry, the name's
second layout) and each key hit once since (its one carrying hit). Both are then timed in turns
in one process, ROUNDS pairs of short rounds (the first of a pair alternating), and the figure
is the median of the per-pair ratios changed / never (hits per round): 1.0 is no cost. Target:
within 3 %.

    .venv/bin/python benchmarks/bench_redis_live_change.py [--quick]
"""

from __future__ import annotations

import statistics
import sys
import time
import uuid
from pathlib import Path

import _harness

from shmwin import Limiter

HERE = Path(__file__).resolve().parent
KEYS = [f"k{i}" for i in range(50)]


def hits_in(limiter: Limiter, round_s: float) -> int:
    count, deadline = 0, time.perf_counter() + round_s
    while time.perf_counter() < deadline:
        limiter.hit(KEYS[count % len(KEYS)])
        count += 1
    return count


def main() -> None:
    args = _harness.target_parser(__doc__).parse_args()
    rounds, round_s = (6, 0.1) if args.quick else (40, 0.3)
    sys.path.insert(0, str(HERE))
    from bench_limiter import RedisServer

    server = RedisServer()
    url = f"redis://127.0.0.1:{server.port}/0"
    tag = uuid.uuid4().hex[:8]
    never = Limiter(f"never-{tag}", "1000000/minute", backend=url)
    changed = Limiter(f"changed-{tag}", "1000000/minute", backend=url)
    try:
        for key in KEYS:
            never.hit(key), changed.hit(key)
        Limiter(f"changed-{tag}", "1000000/61second", backend=url).close()  # one change of period
        for key in KEYS:
            changed.hit(key)  # each key's first hit since the change carries
        ratios = []
        for i in range(rounds):
            if i % 2:
                ran_changed, ran_never = hits_in(changed, round_s), hits_in(never, round_s)
            else:
                ran_never, ran_changed = hits_in(never, round_s), hits_in(changed, round_s)
            ratios.append(ran_changed / ran_never)
        low, _, high = statistics.quantiles(ratios, n=4)
        print(f"changed / never changed, hits per {round_s} s round, median of {rounds} pairs: "
              f"{statistics.median(ratios):.3f} (quartiles {low:.3f}-{high:.3f})")  # fmt: skip
    finally:
        never.unlink(), changed.unlink()
        server.stop()


if __name__ == "__main__":
    main()
