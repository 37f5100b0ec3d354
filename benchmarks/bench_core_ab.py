"""One round of the native core's hot paths, as ratios over a clock read, for an A/B of two
commits of the core (issue 28: no ratio may get worse by more than 5 %).

Each figure is the median, over a few pairs taken side by side, of (ns per operation) / (ns
per ``time.monotonic_ns()`` call), both timed in this thread's CPU time: ``Limiter.hit`` on
one key and on 100,000 keys in random order, a striped and a keyed ``Window.add``, a moving
log's own hit (``MovingLogs.hit``, the core's ``moving_hit``) and limits' moving window
through ``shm://``. One round per
process; benchmarks/README.md ("The core split into small files") says how two builds are run
in turn on one core. Prints one JSON object.
"""

from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from limits import RateLimitItemPerHour, storage, strategies

import shmwin.integrations.limits  # noqa: F401  # registers shm://
from shmwin import Limiter, Window, unlink_prefix

NEVER = f"{10**12}/hour"  # a limit these loops never reach
clock_read = time.monotonic_ns
# This thread's CPU time, not the wall clock: on a shared machine a sample then leaves out the
# time this process waited for a core (other jobs' caches still weigh in), both sides alike.
cpu_ns = time.thread_time_ns


def ns_per_call(fn: Callable[[Any], object], args: Iterable[Any], n: int) -> float:
    gc.disable()  # as timeit: no collection inside a sample
    try:
        start_ns = cpu_ns()
        for a in args:
            fn(a)
        return (cpu_ns() - start_ns) / n
    finally:
        gc.enable()


def ns_per_clock_read(n: int) -> float:
    start_ns = cpu_ns()
    for _ in range(n):
        clock_read()
    return (cpu_ns() - start_ns) / n


def over_floor(fn: Callable[[Any], object], args: list[Any], pairs: int = 7) -> float:
    """The median ratio of pairs (operation, floor), which of the two goes first alternating."""
    ratios = []
    for i in range(pairs):
        if i % 2:
            op_ns = ns_per_call(fn, args, len(args))
            floor_ns = ns_per_clock_read(len(args))
        else:
            floor_ns = ns_per_clock_read(len(args))
            op_ns = ns_per_call(fn, args, len(args))
        ratios.append(op_ns / floor_ns)
    return statistics.median(ratios)


def limiter_hits(out: dict[str, float]) -> None:
    lim = Limiter(f"bench-ab-{uuid.uuid4().hex[:8]}", NEVER, capacity=100_000)
    try:
        out["Limiter.hit, one key"] = over_floor(lim.hit, ["client"] * 50_000)
        keys = [f"user-{i:06d}" for i in range(100_000)]
        for key in keys:  # every key placed first: the figure is a warm hit, not an insert
            lim.hit(key)
        random.Random(1).shuffle(keys)
        out["Limiter.hit, 100,000 keys in random order"] = over_floor(lim.hit, keys, pairs=3)
    finally:
        lim.close()
        lim.unlink()


def window_adds(out: dict[str, float]) -> None:
    w = Window(f"bench-ab-{uuid.uuid4().hex[:8]}", span="1h", buckets=60, mode="striped")
    try:
        add = w.add
        out["Window.add, striped"] = over_floor(lambda _: add(), list(range(50_000)))
    finally:
        w.close()
        w.unlink()


def keyed_adds(out: dict[str, float]) -> None:
    w = Window(f"bench-ab-{uuid.uuid4().hex[:8]}", span="1h", buckets=60, capacity=100_000)
    try:
        add = w.add
        keys = [f"user-{i:06d}" for i in range(100_000)]
        for key in keys:  # every key placed first
            add(1, key=key)
        random.Random(2).shuffle(keys)
        figure = "Window.add, keyed, 100,000 keys in random order"
        out[figure] = over_floor(lambda k: add(1, key=k), keys, pairs=3)
    finally:
        w.close()
        w.unlink()


def moving_hits(out: dict[str, float]) -> None:
    from shmwin.integrations.limits_moving import MovingLogs

    name = f"bench-ab-{uuid.uuid4().hex[:8]}"
    logs = MovingLogs.open(name, 10**9, 3600 * 10**9, 64, None, 1_000, create=True)  # type: ignore[arg-type]
    assert logs is not None
    try:  # the native clock (None): the core's section, not a Python clock call
        out["MovingLogs.hit, one key"] = over_floor(lambda _: logs.hit("client", 1), list(range(20_000)))
    finally:
        logs.counts.close()
        unlink_prefix(name)


def moving_window(out: dict[str, float]) -> None:
    prefix = f"bench-ab-{uuid.uuid4().hex[:6]}"
    limiter = strategies.MovingWindowRateLimiter(storage.storage_from_string(f"shm://{prefix}"))
    item = RateLimitItemPerHour(10**9)
    try:
        hits = list(range(10_000))
        out["limits moving window, shm://"] = over_floor(lambda _: limiter.hit(item, "client"), hits)
    finally:
        unlink_prefix(prefix)


def main() -> None:
    out: dict[str, float] = {}
    limiter_hits(out)
    window_adds(out)
    keyed_adds(out)
    moving_hits(out)
    moving_window(out)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
