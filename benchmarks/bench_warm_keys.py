"""Warm keys hit in random order: the native ``Limiter.hit`` against CPython's own ``dict.get``
over the same keys in the same orders, in one run (issue #30: <= 1.25x at 100,000 and
1,000,000 keys).

Every key is hit once first (its row and this process's key-cache entry exist), then each round
draws a new random order and times, in turn (which goes first alternating), ``Limiter.hit`` and
``dict.get`` over it, then ``Limiter.hit`` with each key a new object equal to the cached one
(made just before, as a web request builds its key) beside ``dict.get`` over those same new
objects. A sample is this thread's CPU time (``time.thread_time_ns``): on a shared machine it
leaves out the time the process waited for a core, both sides alike. A ratio is the median of
the per-round ratios. The keys are bench_memory.clients' (Flask-Limiter's remote addresses).

    taskset -c 1 .venv/bin/python benchmarks/bench_warm_keys.py [--quick] [--keys N ...] [--json FILE]

(scripts/bench runs it: its target rows, <= 1.25x dict.get at each key count, issue #30.)
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
import uuid
from collections.abc import Callable

import _harness
from _harness import Target
from bench_memory import clients

import shmwin
from shmwin import Limiter

_LOOP = """
def loop(fn, keys, cpu_ns):
    t = cpu_ns()
    for key in keys:
        fn(key)
    return cpu_ns() - t
"""


def timer() -> Callable[[Callable[[str], object], list[str]], float]:
    """A loop of its own (a call site specialised for one callee): ns per call over ``keys``."""
    namespace: dict[str, object] = {}
    exec(_LOOP, namespace)
    loop = namespace["loop"]

    def sample(fn: Callable[[str], object], keys: list[str]) -> float:
        gc.disable()
        try:
            return loop(fn, keys, time.thread_time_ns) / len(keys)  # type: ignore[operator,no-any-return]
        finally:
            gc.enable()

    return sample


def pair(first: Callable[[], float], second: Callable[[], float], swap: bool) -> tuple[float, float]:
    if swap:
        b = second()
        return first(), b
    a = first()
    return a, second()


def run(keys: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """{case: (Limiter.hit ns, dict.get ns, median ratio)} over ``keys`` warm keys."""
    name = f"bench-warm-{uuid.uuid4().hex[:8]}"
    limiter = Limiter(name, "1000000000/hour")
    try:
        labels = clients(keys)
        for label in labels:
            limiter.hit(label)
        table = dict.fromkeys(labels, 0)
        loops = {case: (timer(), timer()) for case in ("cached objects", "new equal objects")}
        taken: dict[str, list[tuple[float, float]]] = {case: [] for case in loops}
        rng = random.Random(3)
        for r in range(rounds):
            order = labels[:]
            rng.shuffle(order)
            copies = [key[:1] + key[1:] for key in order]  # equal, not the cached objects
            for case, keys_of_round in (("cached objects", order), ("new equal objects", copies)):
                hit_loop, get_loop = loops[case]
                taken[case].append(
                    pair(
                        lambda hit_loop=hit_loop, k=keys_of_round: hit_loop(limiter.hit, k),
                        lambda get_loop=get_loop, k=keys_of_round: get_loop(table.get, k),
                        swap=r % 2 == 1,
                    )
                )
        return {
            case: (
                statistics.median(h for h, _ in samples),
                statistics.median(g for _, g in samples),
                statistics.median(h / g for h, g in samples),
            )
            for case, samples in taken.items()
        }
    finally:
        limiter.close()
        shmwin.unlink(name)


def main() -> None:
    parser = _harness.target_parser(__doc__)
    parser.add_argument("--keys", type=int, nargs="+", default=None, help="key counts (100,000, 1,000,000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds per key count (7)")
    args = parser.parse_args()
    sizes = args.keys or ([10_000] if args.quick else [100_000, 1_000_000])
    rounds = args.rounds or (3 if args.quick else 7)
    targets, lines = [], []
    for keys in sizes:
        for case, (hit_ns, get_ns, ratio) in run(keys, rounds).items():
            lines.append(f"| {keys:,} | {case} | {hit_ns:,.0f} | {get_ns:,.0f} | {ratio:.2f}× |")
            targets.append(
                Target(f"warm-keys-{keys}-{case.split()[0]}",
                       f"`Limiter.hit()`, {keys:,} warm keys in random order, {case}",
                       f"{hit_ns:,.0f} ns", f"`dict.get` {get_ns:,.0f} ns", f"{ratio:.2f}×",
                       "≤ 1.25× `dict.get`", ratio <= 1.25)
            )  # fmt: skip
            print(lines[-1], flush=True)
    _harness.print_targets(targets)
    details = [
        "#### Warm keys in random order against `dict.get` (`bench_warm_keys.py`, issue #30)",
        "",
        f"load average {os.getloadavg()[0]:.1f}; {rounds} rounds; this thread's CPU ns per call, medians",
        "",
        "| keys | keys as | `Limiter.hit` | `dict.get` | `Limiter.hit` / `dict.get` (median of rounds) |",
        "| ---: | --- | ---: | ---: | ---: |",
        *lines,
    ]
    _harness.finish(targets, details, args.json)


if __name__ == "__main__":
    main()
