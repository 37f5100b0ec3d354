"""One round of ``Concurrency``'s hot path, as ratios over a clock read, for an A/B of two commits
(issue 31: live limits may cost ``acquire``/``release`` no more than 3 %).

Each figure is the median, over a few pairs taken side by side, of (ns per operation) / (ns per
``time.monotonic_ns()`` call), in this thread's CPU time (``bench_core_ab.over_floor``): a slot
taken and given back (``acquire(key, 0)`` then ``release(key)``) on one key with no other
holder, the same with 3 other holders in the key's row (other handles: other stripes), and a
refused ``acquire(key, 0)`` on a full key. One round per process; benchmarks/README.md
("Concurrency's live limits") says how the two commits run in turn. Prints one JSON object.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from bench_core_ab import over_floor

from shmwin import Concurrency

LIMIT = 8
N = 50_000


def cycle(conc: Concurrency) -> Callable[[str], object]:
    """One slot taken and given back, the way a caller holds a key for a moment."""
    acquire, release = conc.acquire, conc.release

    def take_and_give(key: str) -> None:
        acquire(key, 0)
        release(key)

    return take_and_give


def main() -> None:
    name = f"bench-conc-{uuid.uuid4().hex[:8]}"
    out: dict[str, float] = {}
    conc = Concurrency(name, LIMIT)
    others = [Concurrency.attach(name) for _ in range(LIMIT - 1)]
    try:
        out["acquire + release, no other holder"] = over_floor(cycle(conc), ["k"] * N)
        for other in others[:3]:
            assert other.acquire("k", 0)
        out["acquire + release, 3 other holders"] = over_floor(cycle(conc), ["k"] * N)
        for other in others[3:]:
            assert other.acquire("k", 0)
        assert conc.acquire("k", 0) and not conc.acquire("k", 0)
        out["acquire refused (full)"] = over_floor(lambda key: conc.acquire(key, 0), ["k"] * N)
    finally:
        for other in others:
            other.close()
        conc.close()
        conc.unlink()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
