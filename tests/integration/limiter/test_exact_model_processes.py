"""An exact limiter (``Limiter(exact=True)``, core/exactlog.c) against a model of the exact log,
driven from three real processes -- this one and two forked workers, each with its own clock
set by hand -- with hits, tests, stats, refunds and clears in random order.

A clock that only moves forward: every answer is the model's (exact). Clocks that step back
and forth: strict (every reading counts at least what the model holds in its window, up to
the limit; no interval of P of the clocks' frame admits more than the limit), and once past
every hit by P the key admits exactly the limit again."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support.clock_steps import SteppingClock
from support.helpers import forked_askers
from support.stepping import pick_op, strict_under_steps

from shmwin import Limiter

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

S = 1_000_000_000
T0 = 1_000_000 * S
P = S  # "LIMIT/second"
LIMIT = 12


class ExactLog:
    """The rule: a hit counts while t >= now - P (a time ahead of now counts); refunds give
    back the newest counted hits first; clear forgets the key."""

    def __init__(self) -> None:
        self.hits: list[tuple[int, int]] = []  # (t, cost), in the order admitted

    def used(self, now: int) -> int:
        return sum(c for t, c in self.hits if t >= now - P)

    def hit(self, now: int, cost: int) -> bool:
        if self.used(now) + cost > LIMIT:
            return False
        self.hits.append((now, cost))
        return True

    def refund(self, now: int, cost: int) -> int:
        left = cost
        for i in sorted(range(len(self.hits)), key=lambda i: self.hits[i][0], reverse=True):
            t, c = self.hits[i]
            if left == 0 or t < now - P:
                continue
            take = min(c, left)
            self.hits[i] = (t, c - take)
            left -= take
        return cost - left


def _worker(name: str, conn: Any) -> None:
    clock = SteppingClock(T0)
    with Limiter.attach(name, clock=clock) as lim:
        while (job := conn.recv()) is not None:
            conn.send(run(lim, clock, *job))


def run(lim: Limiter, clock: SteppingClock, op: str, now: int, cost: int) -> Any:
    clock.set(now)
    if op == "hit":
        return lim.hit("k", cost)
    if op == "test":
        return lim.test("k", cost)
    if op == "stats":
        return lim.stats("k").used
    if op == "refund":
        return lim.refund("k", cost)
    lim.clear("k")
    return None


@contextmanager
def three_processes(name: str) -> Iterator[Any]:
    """``ask(who, op, now, cost)``: run op in process who (0: this one, 1 and 2: forked)."""
    clock = SteppingClock(T0)
    lim = Limiter(name, f"{LIMIT}/second", exact=True, clock=clock)
    try:
        with forked_askers(lambda op, now, cost: run(lim, clock, op, now, cost), _worker, name) as ask:
            yield ask
    finally:
        lim.unlink()
        lim.close()

OPS = ["hit"] * 6 + ["test", "stats", "refund", "clear"]


@pytest.mark.parametrize("seed", range(3))
def test_forward_clocks_answer_as_the_exact_log(name, seed):
    rng, model, t = random.Random(seed), ExactLog(), T0
    with three_processes(name) as ask:
        for i in range(600):
            t += rng.choice((0, 1, rng.randrange(P // 4), P // 2, P, P + 1))
            op, cost, who = pick_op(rng, OPS)
            got = ask(who, op, t, cost)
            if op == "hit":
                want: Any = model.hit(t, cost)
            elif op == "test":
                want = model.used(t) + cost <= LIMIT
            elif op == "stats":
                want = model.used(t)
            elif op == "refund":
                want = model.refund(t, cost)
            else:
                model.hits, want = [], None
            assert got == want, (i, who, op, (t - T0) / S, cost, got, want)


def _test_answers_with_its_reading(ask: Any, rng: random.Random, now_ns: int, used: int) -> None:
    assert ask(rng.randrange(3), "test", now_ns, 1) == (used < LIMIT)


@pytest.mark.parametrize("seed", range(3))
def test_stepping_clocks_stay_strict_and_open_again(name, seed):
    with three_processes(name) as ask:
        strict_under_steps(
            ask, seed, limit=LIMIT, period_ns=P, t0_ns=T0, least_admitted=10 * LIMIT,
            read=lambda ask, who, now_ns: ask(who, "stats", now_ns, 0),
            after_read=_test_answers_with_its_reading,
        )  # fmt: skip
