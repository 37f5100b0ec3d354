"""Two processes whose clocks are apart, hitting one key: the harness of the clock-step tests
(``integration/limiter/test_limiter_clock_steps.py``,
``integration/roles/test_moving_log_clock_steps.py``)."""

from __future__ import annotations

import multiprocessing as mp
import random
from collections.abc import Callable
from typing import Any

from shmwin import ManualClock


class SteppingClock:
    """A wall clock driven by hand, which (unlike ManualClock, a monotonic one) may step back."""

    def __init__(self, now_ns: int):
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns

    def set(self, now_ns: int) -> None:
        self.now_ns = now_ns


def busiest_period(admitted: list[tuple[int, int]], period_ns: int, *, closed: bool = False) -> int:
    """The most cost admitted in any interval of ``period_ns`` of the clocks' own frame:
    ``(a - P, a]``, or with ``closed`` ``[a, a + P]`` (a moving log's, whose ends both count)."""
    hits = sorted(admitted)
    best, total, lo = 0, 0, 0
    for t, cost in hits:
        total += cost
        while hits[lo][0] < t - period_ns or (not closed and hits[lo][0] == t - period_ns):
            total -= hits[lo][1]
            lo += 1
        best = max(best, total)
    return best


def skewed_turns(
    hit: Callable[[str, int], bool],
    clock: ManualClock,
    child: Callable[[Any], None],
    *,
    t0_ns: int,
    period_ns: int,
    skew_ns: int,
    turns: int,
    seed: int,
) -> tuple[list[tuple[int, int]], int | None]:
    """This process (``hit(key, cost)`` at ``clock``) and a forked ``child(conn)`` (which answers
    each ``(t_ns, cost)`` it is sent with its own hit at t_ns, until it is sent None) hit key "k"
    in random turns, the child's clock ``skew_ns`` ahead. Returns the admitted hits, each at its
    own process's clock, and the child's exit code."""
    rng = random.Random(seed)
    ctx = mp.get_context("fork")
    mine, theirs = ctx.Pipe()
    process = ctx.Process(target=child, args=(theirs,), daemon=True)
    process.start()
    stamped: list[tuple[int, int]] = []
    try:
        t = t0_ns
        for _ in range(turns):
            t += rng.randrange(period_ns // 3)
            clock.set(t)
            cost = rng.choice((1, 1, 2))
            if rng.random() < 0.5:
                if hit("k", cost):
                    stamped.append((t, cost))
            else:
                mine.send((t + skew_ns, cost))
                if mine.recv():
                    stamped.append((t + skew_ns, cost))
        mine.send(None)
        process.join(30)
        return stamped, process.exitcode
    finally:
        if process.is_alive():
            process.kill()
