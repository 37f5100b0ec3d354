"""The exact modes (issue 30) against the bucketed ``Limiter.hit``, and limits' moving window on
``shm://`` against ``memory://`` through limits, in one run.

1. ``Limiter(rate, exact=True)`` -- hit refused, hit admitted, ``test()`` -- with 10, 1,000 and
   100,000 hits held by one key, each against the bucketed ``Limiter(rate)`` holding the same
   hits, asked the same thing in the same round (the ratio is the median of per-round ratios).
   A rate of H/hour holds H hits (refused: full; admitted: the rate is H + room, so every timed
   hit is admitted); nothing expires during the run. Each held hit is one of cost 1 at its
   own time, so at 100,000 held the exact log is full: 1,024 entries, merged past that
   (strict), the most a rate keeps by default.
2. The first 1,000 admitted hits of a fresh key of 1000/minute, exact against bucketed.
3. limits' ``MovingWindowRateLimiter.hit`` on ``shm://`` against ``memory://``, on the same
   keys: refused (a key held at its limit of 10 or 1,000) and admitted (1,000 hits on a fresh
   key first filled with 10 or 1,000).

    taskset -c 1 .venv/bin/python benchmarks/bench_exact.py [--quick]
"""

from __future__ import annotations

import functools
import os
import statistics
import sys
import time
from collections.abc import Callable

from limits import RateLimitItemPerHour
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

import shmwin
import shmwin.integrations.limits  # registers shm://
from shmwin import Limiter

HELD = (10, 1_000, 100_000)


def ns_per_call(fn: Callable[[], object], n: int) -> float:
    started = time.perf_counter_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - started) / n


Call = Callable[[], object]


def row(what: str, held: str, x: float, b: float, ratio: float, target: float) -> str:
    return f"| {what} | {held} | {x:.0f} | {b:.0f} | {ratio:.2f}× | {'ok' if ratio <= target else 'over'} |"


def ratio_of(xs: list[float], ys: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(xs, ys, strict=True))


def paired(a: Call, b: Call, n: int, rounds: int) -> tuple[float, float, float]:
    """(median ns of a, of b, median of the per-round ratios a / b), alternating which goes first."""
    xs, ys = [], []
    for r in range(rounds):
        if r % 2:
            ys.append(ns_per_call(b, n))
            xs.append(ns_per_call(a, n))
        else:
            xs.append(ns_per_call(a, n))
            ys.append(ns_per_call(b, n))
    return statistics.median(xs), statistics.median(ys), ratio_of(xs, ys)


def fill(lim: Limiter, key: str, held: int) -> None:
    """``held`` hits on key, of cost 1 each, at the host clock's distinct times (a hit takes
    over 100 ns): an entry each, so 100,000 held is a full log of 1,024 merged entries."""
    hit = lim.hit
    for _ in range(held):
        assert hit(key)


def limiter_rows(tag: str, n: int, rounds: int) -> list[str]:
    rows = []
    for held in HELD:
        room = n * rounds + 10
        made = []
        try:
            for label, limit in (("refused", held), ("admitted", held + room), ("test", held)):
                exact = Limiter(f"{tag}-x-{label}-{held}", f"{limit}/hour", exact=True)
                bucketed = Limiter(f"{tag}-b-{label}-{held}", f"{limit}/hour")
                made += [exact, bucketed]
                for lim in (exact, bucketed):
                    fill(lim, "k", held)
                assert len(exact.window._backend.log_entries(0, "k")[0]) == min(held, 1_024)  # a real log
                if label == "test":
                    xe, be = exact.test, bucketed.test
                    x, b, ratio = paired(lambda xe=xe: xe("k"), lambda be=be: be("k"), n, rounds)
                else:
                    xh, bh = exact.hit, bucketed.hit
                    x, b, ratio = paired(lambda xh=xh: xh("k"), lambda bh=bh: bh("k"), n, rounds)
                    want = label == "admitted"
                    assert exact.hit("k") is want and bucketed.hit("k") is want
                what = f"hit, {label}" if label != "test" else "test(), full"
                rows.append(row(what, f"{held:,}", x, b, ratio, 1.5))
        finally:
            for lim in made:
                lim.unlink()
                lim.close()
    return rows


def fresh_rows(tag: str, rounds: int) -> list[str]:
    """The first 1,000 admitted hits of a fresh key, per hit."""
    exact = Limiter(f"{tag}-fresh-x", "1000/minute", exact=True)
    bucketed = Limiter(f"{tag}-fresh-b", "1000/minute")
    try:
        xs, bs = [], []
        for r in range(rounds):
            for lim, out in ((exact, xs), (bucketed, bs)) if r % 2 == 0 else ((bucketed, bs), (exact, xs)):
                hit, key = lim.hit, f"fresh-{r}"
                started = time.perf_counter_ns()
                for _ in range(1_000):
                    hit(key)
                out.append((time.perf_counter_ns() - started) / 1_000)
                assert not lim.hit(key)
        what = "first 1,000 hits of a fresh key (1000/minute)"
        return [row(what, "0 → 1,000", statistics.median(xs), statistics.median(bs), ratio_of(xs, bs), 1.5)]
    finally:
        for lim in (exact, bucketed):
            lim.unlink()
            lim.close()


def limits_rows(tag: str, n: int, rounds: int) -> list[str]:
    """Refused: a key held at its limit, n hits a round. Admitted: each round a fresh key
    filled with ``held`` hits (untimed), then 1,000 timed hits, all admitted (a limit of
    held + 1,000): the log grows from held to held + 1,000 on both storages alike."""
    shm, memory = storage_from_string(f"shm://{tag}-limits"), storage_from_string("memory://")
    pair = ((shm, MovingWindowRateLimiter(shm)), (memory, MovingWindowRateLimiter(memory)))
    rows = []
    try:
        for held in (10, 1_000):
            full = RateLimitItemPerHour(held)
            for _, strategy in pair:
                for _ in range(held):
                    assert strategy.hit(full, f"full-{held}")
            calls = [functools.partial(strategy.hit, full, f"full-{held}") for _, strategy in pair]
            s, m, ratio = paired(calls[0], calls[1], n, rounds)
            rows.append(row("MovingWindowRateLimiter.hit, refused", f"{held:,}", s, m, ratio, 1.0))
            item, times = RateLimitItemPerHour(held + 1_000), {0: [], 1: []}
            for r in range(rounds):
                order = (0, 1) if r % 2 == 0 else (1, 0)
                for i in order:
                    hit, key = pair[i][1].hit, f"room-{held}-{r}"
                    for _ in range(held):
                        hit(item, key)
                    times[i].append(ns_per_call(functools.partial(hit, item, key), 1_000))
                    assert not hit(item, key)
            s, m = statistics.median(times[0]), statistics.median(times[1])
            what, grown = "MovingWindowRateLimiter.hit, admitted", f"{held:,} → {held + 1_000:,}"
            rows.append(row(what, grown, s, m, ratio_of(times[0], times[1]), 1.0))
    finally:
        shm.reset()
        for name in shmwin.names():
            if name.startswith(f"{tag}-limits."):
                shmwin.unlink(name)
    return rows


def main() -> None:
    quick = "--quick" in sys.argv
    n, rounds = (2_000, 3) if quick else (20_000, 9)
    tag = f"bench-exact-{os.getpid()}"
    print("| exact Limiter | hits held | exact ns | bucketed ns | ratio | target ≤ 1.5× |")
    print("| --- | ---: | ---: | ---: | ---: | :---: |")
    for row in limiter_rows(tag, n, rounds) + fresh_rows(tag, rounds):
        print(row)
    print()
    print("| limits, through limits | hits held | shm:// ns | memory:// ns | ratio | target ≤ 1.0× |")
    print("| --- | ---: | ---: | ---: | ---: | :---: |")
    for row in limits_rows(tag, n, rounds):
        print(row)


if __name__ == "__main__":
    main()
