"""Clocks that step back and forth under an exact log, asked from three processes: the run the
exact limiter's and the moving log's model tests share, and their random operations
(``integration/limiter/test_exact_model_processes.py``,
``integration/roles/test_moving_log_model_processes.py``); and limits' moving window stepped
forward and back on shm:// and memory:// (the moving log's and its buckets' clock-step tests).

Each test brings ``ask(who, op, now_ns, cost)`` (op "hit" answers whether it counted; ``read``
answers what a key counts now) and its limit and period; the run holds the log strict (every
reading counts at least what the admitted hits hold in its window, up to the limit; no interval
of one period in the clocks' frame admits more than the limit) and, once past every hit by a
period, open to exactly the limit again."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from support.clock_steps import busiest_period

S = 1_000_000_000
Ask = Callable[[int, str, int, int], Any]


def pick_op(rng: random.Random, ops: list[str]) -> tuple[str, int, int]:
    """A random ``(op, cost, who)`` of ``ops``; a clear is mostly turned into a hit, so that
    clears are rare and most of a run holds hits."""
    op, cost, who = rng.choice(ops), rng.choice((1, 1, 1, 2, 5)), rng.randrange(3)
    if op == "clear" and rng.random() < 0.9:
        op = "hit"
    return op, cost, who


def step(rng: random.Random, period_ns: int) -> int:
    """Mostly forward; one in five back, by a little, about a period, or far."""
    p = period_ns
    sign = -1 if rng.random() < 0.2 else 1
    return sign * rng.choice((rng.randrange(p // 3), p - 1, p, p + 1, 3 * p, rng.randrange(10 * p)))


def strict_under_steps(
    ask: Ask,
    seed: int,
    *,
    limit: int,
    period_ns: int,
    t0_ns: int,
    read: Callable[[Ask, int, int], int],
    least_admitted: int,
    shrink: int = 1,
    after_read: Callable[[Ask, random.Random, int, int], None] | None = None,
) -> None:
    """500 random hits at stepped times (``step() // shrink``), each followed by a reading
    (``read(ask, who, now_ns)``: what the key counts now; then ``after_read(ask, rng, now_ns,
    used)``, the test's own checks); then the log is strict, admitted at least
    ``least_admitted`` (not shut), and admits exactly the limit again after a rest."""
    p = period_ns
    rng, t, latest = random.Random(f"steps-{seed}"), t0_ns, t0_ns
    admitted: list[tuple[int, int]] = []
    for i in range(500):
        t = max(0, t + step(rng, p) // shrink)
        latest = max(latest, t)
        who, cost = rng.randrange(3), rng.choice((1, 1, 1, 2, limit))
        if ask(who, "hit", t, cost):
            admitted.append((t, cost))
        held = sum(c for at, c in admitted if at >= t - p)
        used = read(ask, rng.randrange(3), t)
        assert used >= min(limit, held), (i, (t - t0_ns) / S, used, held)
        if after_read is not None:
            after_read(ask, rng, t, used)
    assert busiest_period(admitted, p, closed=True) <= limit
    assert sum(c for _, c in admitted) >= least_admitted  # strict, not shut
    t = latest + 3 * p
    assert [ask(i % 3, "hit", t, 1) for i in range(limit + 1)] == [True] * limit + [False]


def forward_then_back(
    name: str,
    shm_uri: str,
    item: Any,
    jump_s: float,
    back_s: float,
    now: list[float],
    shm_left: Callable[[int], bool],
) -> dict[str, tuple[int, bool, int]]:
    """limits' moving window on ``shm_uri`` (segments of ``name``, unlinked after) and on
    memory://, each with the wall clock ``now[0]`` set by hand: the limit's hits at T, one hit
    ``jump_s`` ahead, then the limit's hits again at T + ``back_s``. Answers, by scheme: (hits
    admitted at T, whether the one ahead was, hits admitted back). ``shm_left``: what shm://
    may have left at the end (``remaining``), asserted."""
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    import shmwin
    import shmwin.integrations.limits

    answers = {}
    try:
        for uri in (shm_uri, "memory://"):
            now[0] = 1_800_000_000.0
            limiter = MovingWindowRateLimiter(storage_from_string(uri))
            first = sum(limiter.hit(item, "k") for _ in range(item.amount))
            now[0] += jump_s
            jumped = limiter.hit(item, "k")
            now[0] += back_s - jump_s
            back = sum(limiter.hit(item, "k") for _ in range(item.amount))
            if uri.startswith("shm"):
                left = limiter.get_window_stats(item, "k").remaining
                assert shm_left(left), left
            answers[uri.split(":")[0]] = (first, jumped, back)
    finally:
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)
    return answers
