"""on_error="local" while the backend is away: a hit costs what a shared-memory hit costs.

Two contenders, timed in turns in one process (rounds alternate which goes first), 10 keys:

* ``shm``: ``Limiter(name, rates)`` on shared memory, the floor;
* ``local``: ``Limiter(name, rates, backend="redis://127.0.0.1:<a closed port>/0",
  on_error="local", fallback=rates)``: Redis refuses every connection, so the fallback is
  active; one call in PROBE_S (0.5 s) asks Redis again (a refused connect), the others are the
  local share's shared-memory hits.

The figure is the median of the per-round ratios local / shm (target: at most 2); beside it,
the ratio of the best rounds (``--best N``: N short rounds, the fastest of each kept: on a
machine shared with other jobs, what the code costs rather than what the neighbours do).

    .venv/bin/python benchmarks/bench_fallback.py [--quick] [--best 400]
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import time

from shmwin import Limiter
from shmwin.errors import BackendUnavailableError
from shmwin.local_share import fallback_since

RATES = "1000000000/hour"  # nothing is refused: every hit does the same work
KEYS = [f"k{i}" for i in range(10)]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the with ends: connections are refused


def per_hit_ns(lim: Limiter, n: int) -> float:
    hit, keys = lim.hit, KEYS
    started = time.perf_counter_ns()
    for _ in range(n):
        for key in keys:
            hit(key)
    return (time.perf_counter_ns() - started) / (n * len(keys))


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, n = (3, 2_000) if quick else (9, 20_000)
    tag = f"bench-fallback-{os.getpid()}"
    shm = Limiter(f"{tag}-shm", RATES, decisions=False)
    url = f"redis://127.0.0.1:{closed_port()}/0"
    local = Limiter(f"{tag}-local", RATES, backend=url, on_error="local", fallback=RATES, timeout=0.05)
    try:
        local.hit("warm")
        assert fallback_since(local) is not None, "the fallback should be active"
        ratios, floors, fallbacks = [], [], []
        for r in range(rounds):
            pair = [(shm, floors), (local, fallbacks)]
            for lim, out in pair if r % 2 == 0 else pair[::-1]:
                out.append(per_hit_ns(lim, n))
            ratios.append(fallbacks[-1] / floors[-1])
        print("| contender | ns per hit (median) |")
        print("| --- | --- |")
        print(f"| shared memory (floor) | {statistics.median(floors):.0f} |")
        print(f"| on_error=\"local\", Redis away | {statistics.median(fallbacks):.0f} |")
        ratio = statistics.median(ratios)
        print(f"\nratio local / shm: {ratio:.2f}x (target <= 2x): {'ok' if ratio <= 2 else 'MISSED'}")
        if "--best" in sys.argv:
            best_rounds = int(sys.argv[sys.argv.index("--best") + 1])
            best = [min(per_hit_ns(lim, 200) for _ in range(best_rounds)) for lim in (shm, local)]
            print(f"best of {best_rounds} rounds of 2,000 hits: {best[0]:.0f} ns against {best[1]:.0f} ns, "
                  f"{best[1] / best[0]:.2f}x")
    finally:
        shm.unlink()
        shm.close()
        with contextlib.suppress(BackendUnavailableError):
            local.unlink()  # removes NAME.local first; Redis is away, so the redis part raises
        local.close()


if __name__ == "__main__":
    main()
