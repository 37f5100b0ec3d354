"""TokenBucket benchmarks: TokenBucket.hit() against Limiter.hit() in the same run, ratios.

    .venv/bin/python benchmarks/bench_token_bucket.py [--quick] [--json FILE]

1 process, one key: ns per hit() of each, every sample beside a sample of the floor (a loop
calling only time.monotonic_ns()), the two interleaved round by round; the ratio is the
median of the per-round ratios of their floor ratios (issue 21: <= 1.2x). Neither ever
refuses (a bucket and a limit no loop exhausts). 2 processes, one key: forked at a barrier,
aggregate = total hits / the slowest process's time, median over rounds, the token bucket
and the limiter interleaved; each is offered twice what it may admit (a bucket of ``burst``
tokens that refills once an hour; a limit per hour) and what it admitted is reported.
Method: benchmarks/_harness.py; results and prose: benchmarks/README.md.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable

import _harness
from _harness import Contender, FloorPairs, Loop, Target, fresh_loop, interleaved, ns, per_sec

from shmwin import Limiter, TokenBucket

NEVER = f"{10**12}/hour"  # a rate the 1-process loops never exhaust


def _sampler(loop, fn, arg, n: int):  # type: ignore[no-untyped-def]
    return lambda: loop(fn, arg, n) / n * 1e9


def bench_single(pairs: FloorPairs, rounds: int) -> dict[str, float]:
    """ns per hit("client") of a TokenBucket and of a Limiter, one key each, interleaved."""
    n = pairs.floor_n
    tb = TokenBucket(f"bench-tb-{uuid.uuid4().hex[:8]}", NEVER, burst=1_000_000, capacity=1000)
    lim = Limiter(f"bench-lim-{uuid.uuid4().hex[:8]}", NEVER, capacity=1000)
    try:
        tb_loop, lim_loop = fresh_loop("call_arg"), fresh_loop("call_arg")
        tb_hit, lim_hit = tb.hit, lim.hit
        tb_loop(tb_hit, "client", n // 10 + 1)  # warm-up, untimed: the key's entry, the call site
        lim_loop(lim_hit, "client", n // 10 + 1)
        pairs.floor_sample()
        per_round = []
        for r in range(rounds):  # alternate which goes first
            order = [("token bucket", tb_loop, tb_hit), ("limiter", lim_loop, lim_hit)]
            for label, loop, hit in order if r % 2 == 0 else order[::-1]:
                pairs.take(label, _sampler(loop, hit, "client", n))
            per_round.append(pairs._ops["token bucket"][-1] / pairs._ops["limiter"][-1])
        assert lim.stats("client").used == n // 10 + 1 + rounds * n, "the limiter lost hits"
        assert tb.test("client"), "the bucket ran dry"
    finally:
        for x in (tb, lim):
            x.close()
            x.unlink()
    return {"ratio": statistics.median(per_round)}


def hit_loop(attach: Callable[[str], TokenBucket | Limiter], name: str) -> Loop:
    """A forked process's loop: ``attach(name)`` (a token bucket's or a limiter's), then n hits
    of one key, timed: (seconds, hits admitted)."""

    def run(n: int) -> tuple[float, int]:
        front = attach(name)
        hit = front.hit
        t = time.perf_counter()
        admitted = 0
        for _ in range(n):
            admitted += hit("client")
        elapsed = time.perf_counter() - t
        front.close()
        return elapsed, admitted

    return run


def main() -> None:
    parser = _harness.target_parser(__doc__)
    args = parser.parse_args()
    q = args.quick
    n1, r1 = (30_000, 3) if q else (200_000, 9)
    n, r = (20_000, 1) if q else (100_000, 5)
    print(f"# bench_token_bucket: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores; 1 process: {n1:,} hits/sample, median of {r1}; 2 processes: "
          f"{n:,} hits/process, median of {r}")  # fmt: skip
    pairs = FloorPairs(n1)
    single = bench_single(pairs, r1)
    tb1, lim1 = pairs.result("token bucket"), pairs.result("limiter")

    made: list[TokenBucket | Limiter] = []

    def bucket() -> Loop:  # 2 x n offered, n admitted: the bucket's burst (refills once an hour)
        tb = TokenBucket(f"bench-tb2-{uuid.uuid4().hex[:8]}", "1/hour", burst=n, capacity=1000)
        made.append(tb)
        return hit_loop(TokenBucket.attach, tb.name)

    def limiter() -> Loop:
        lim = Limiter(f"bench-lim2-{uuid.uuid4().hex[:8]}", f"{n}/hour", capacity=1000)
        made.append(lim)
        return hit_loop(Limiter.attach, lim.name)

    hot_tb = Contender("shmwin TokenBucket.hit()", bucket, n, 2, n)
    hot_lim = Contender("shmwin Limiter.hit()", limiter, n, 2, n)
    try:
        interleaved([hot_tb, hot_lim], r)
    finally:
        for x in made:
            x.close()
            x.unlink()

    ratio = single["ratio"]
    hot_ratio = hot_tb.rate / hot_lim.rate
    targets = [
        Target("tb-hit-one-key", "`TokenBucket.hit()`, one key", ns(tb1.ns), f"`Limiter.hit()` {ns(lim1.ns)}",
               f"{ratio:.2f}×", "≤ 1.2× `hit()`", ratio <= 1.2),
    ]  # fmt: skip
    _harness.print_targets(targets)
    details = "\n".join([
        "#### TokenBucket: one key, 1 process, ns per hit (never refused)",
        "",
        "| call | ns/hit | floor beside it | × floor | × `Limiter.hit()` (median per round) |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| `TokenBucket.hit(key)` | {tb1.ns:,.0f} | {tb1.floor_ns:,.0f} | {tb1.ratio:.2f}× | {ratio:.2f}× |",
        f"| `Limiter.hit(key)` | {lim1.ns:,.0f} | {lim1.floor_ns:,.0f} | {lim1.ratio:.2f}× | 1.00× |",
        "",
        "#### TokenBucket: one hot key, 2 processes, aggregate hits/s; each offered 2× what it may admit",
        "",
        "| contender | procs | hits/s | admitted / allowed | ÷ the limiter |",
        "| --- | ---: | ---: | ---: | ---: |",
        f"| {hot_tb.label} (burst {n:,}, 1/hour) | 2 | {hot_tb.rate:,.0f} | {hot_tb.admitted_text()} "
        f"| {hot_ratio:.2f}× |",
        f"| {hot_lim.label} ({n:,}/hour) | 2 | {hot_lim.rate:,.0f} | {hot_lim.admitted_text()} | 1.00× |",
        "",
        f"2 processes: token bucket {per_sec(hot_tb.rate, 'hits')}, limiter {per_sec(hot_lim.rate, 'hits')}",
    ])  # fmt: skip
    _harness.finish(targets, details, args.json)


if __name__ == "__main__":
    main()
