"""limits' moving window on shm:// (role "moving-log", core/moving.c: each key's entries one run
in time order, walked from its oldest end) against a model of the exact log, driven from three
real processes -- this one and two forked workers, each with its own clock set by hand -- with
hits, reads and clears in random order, over enough hits that a key's run crosses chunks.

A clock that only moves forward (times on whole quanta, so that rounding a hit's time up to
the quantum changes nothing): every answer is the model's, hits and what a read counts and
when its oldest hit leaves. Clocks that step back and forth: strict (every reading counts at
least what the admitted hits hold in its window, up to the limit; no interval of P of the
clocks' frame admits more than the limit), and once past every hit by P the key admits
exactly the limit again."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from support.clock_steps import SteppingClock
from support.helpers import forked_askers
from support.stepping import pick_op, strict_under_steps

import shmwin
from shmwin.backends.shm import format as layout
from shmwin.integrations.limits_moving import MovingLogs

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

S = 1_000_000_000
P = S
QUANTUM_NS = 1 << layout.moving_quantum_shift(P)
T0 = 1_000_000 * S  # a whole quantum
LIMIT = 40  # 2 entries in the row, then chunks of 3


class ExactLog:
    """limits' rule: a hit counts while t >= now - P (a time ahead of now counts)."""

    def __init__(self) -> None:
        self.hits: list[tuple[int, int]] = []  # (t, cost)

    def counting(self, now: int) -> list[tuple[int, int]]:
        return [(t, c) for t, c in self.hits if t >= now - P]

    def hit(self, now: int, cost: int) -> bool:
        if sum(c for _, c in self.counting(now)) + cost > LIMIT:
            return False
        self.hits.append((now, cost))
        return True

    def get(self, now: int) -> tuple[int, int]:
        """(hits counted, ns until the oldest of them leaves; 0: none)."""
        held = self.counting(now)
        if not held:
            return 0, 0
        return sum(c for _, c in held), min(t for t, _ in held) + P + 1 - now


def run(m: MovingLogs, clock: SteppingClock, op: str, now: int, cost: int) -> Any:
    clock.set(now)
    if op == "hit":
        return m.hit("k", cost)
    if op == "get":
        return tuple(m.used_and_reset("k"))
    m.clear("k")
    return None


def _worker(name: str, conn: Any) -> None:
    clock = SteppingClock(T0)
    m = MovingLogs.open(name, 0, 0, 0, clock, None, create=False)
    assert m is not None
    try:
        while (job := conn.recv()) is not None:
            conn.send(run(m, clock, *job))
    finally:
        m.close()


@contextmanager
def three_processes(name: str) -> Iterator[Any]:
    """``ask(who, op, now, cost)``: run op in process who (0: this one, 1 and 2: forked)."""
    clock = SteppingClock(T0)
    m = MovingLogs.open(name, LIMIT, P, 1_024, clock, 16, create=True)
    assert m is not None
    try:
        with forked_askers(lambda op, now, cost: run(m, clock, op, now, cost), _worker, name) as ask:
            yield ask
        top = m.chunks()[0]
        ask(0, "clear", clock(), 0)
        assert m.chunks()[:2] == (top, top), "a chunk leaked"
    finally:
        m.close()
        shmwin.unlink(name)

OPS = ["hit"] * 7 + ["get", "get", "clear"]


@pytest.mark.parametrize("seed", range(3))
def test_forward_clocks_answer_as_the_exact_log(name, seed):
    rng, model, t = random.Random(seed), ExactLog(), T0
    steps = (0, QUANTUM_NS, 977 * QUANTUM_NS, P // 4, P // 2, P, P + QUANTUM_NS)  # whole quanta
    with three_processes(name) as ask:
        for i in range(700):
            t += rng.choice(steps) if rng.random() < 0.3 else rng.choice((0, QUANTUM_NS))
            op, cost, who = pick_op(rng, OPS)
            got = ask(who, op, t, cost)
            if op == "hit":
                want: Any = model.hit(t, cost)
            elif op == "get":
                want = model.get(t)
            else:
                model.hits, want = [], None
            assert got == want, (i, who, op, (t - T0) / S, cost, got, want)


@pytest.mark.parametrize("seed", range(3))
def test_stepping_clocks_stay_strict_and_open_again(name, seed):
    with three_processes(name) as ask:
        strict_under_steps(
            ask, seed, limit=LIMIT, period_ns=P, t0_ns=T0, least_admitted=5 * LIMIT, shrink=8,
            read=lambda ask, who, now_ns: ask(who, "get", now_ns, 0)[0],
        )  # fmt: skip
