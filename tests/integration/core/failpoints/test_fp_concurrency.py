"""Fail points: per-key concurrency (core/concurrency.c).

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS

import shmwin

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _conc_take(name: str, key: str, n: int) -> list[bool]:
    """A survivor's n tries at a slot of ``key`` (held until it exits: its slots go with it)."""
    c = shmwin.Concurrency.attach(name)
    try:
        return [c.acquire(key, timeout=0) for _ in range(n)]
    finally:
        c.close()


def _conc_dead_holder(name: str, key: str) -> None:
    """Leave a dead holder's entry in ``key``'s row: a survivor takes a slot and exits."""
    assert fp.in_child(_conc_take, name, key, 1) == [True]


def _count_k(c: Any) -> int:
    """What a victim checks after its section (``again``): the slots of "k"."""
    return int(c.count("k"))


def _conc_after(mine: Any, name: str, live: int, limit: int) -> None:
    """From other processes: ``live`` slots held, the rest free, never one more."""
    assert fp.promptly(mine.count, "k") == live, "a dead holder counted, or a live one lost"
    free = limit - live
    got = fp.in_child(_conc_take, name, "k", limit + 1)
    assert got == [True] * free + [False] * (limit + 1 - free), f"a survivor took {got}: {free} were free"
    got = [fp.promptly(mine.acquire, "k", 0) for _ in range(limit + 1)]
    assert got == [True] * free + [False] * (limit + 1 - free), f"this process took {got}: {free} were free"
    assert mine.count("k") == limit
    for _ in range(free):
        mine.release("k")


@pytest.mark.parametrize("held", [0, 1])
@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_acquire(make_name, sig, held):
    """Concurrency's acquire struck at every store, its victim holding no slot of the key
    (a new entry) or one (its count grows), with a dead holder's entry to clear: afterwards
    never more than the limit, no lock held up, and a dead victim's slots free at once."""
    limit = 3

    def strike_at(n: int) -> bool:
        name = make_name(f"conc{n}")
        with fp.dropped(shmwin.Concurrency(name, limit), name) as mine:
            assert mine.acquire("other", 0)
            _conc_dead_holder(name, "k")

            def before(report):
                theirs = shmwin.Concurrency.attach(name)
                assert theirs.acquire("j", 0)  # its stripe, claimed before the strike
                for _ in range(held):
                    assert theirs.acquire("k", 0)
                    report[PROGRESS] += 1
                return theirs

            take = lambda t: t.acquire("k", 0)  # noqa: E731
            with fp.strike("conc_acquire", n, sig, before, take, _count_k) as s:
                assert s.report[PROGRESS] == held
                live = 0 if s.died else held + 1  # a section that completed took its slot
                _conc_after(mine, name, live, limit)
                assert mine.count("other") == 1, "another key moved"
        return s.fired

    fp.every_store(strike_at, "conc_acquire", at_least=3)


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_release(make_name, sig):
    """Concurrency's release struck at every store: a dead victim's slots are all free, a live
    one's release happened once; no lock held up, never more than the limit."""
    limit = 3

    def strike_at(n: int) -> bool:
        name = make_name(f"concrel{n}")
        with fp.dropped(shmwin.Concurrency(name, limit), name) as mine:

            def before(report):
                theirs = shmwin.Concurrency.attach(name)
                assert theirs.acquire("k", 0) and theirs.acquire("k", 0)
                report[PROGRESS] += 2
                return theirs

            give = lambda t: t.release("k")  # noqa: E731
            with fp.strike("conc_release", n, sig, before, give, _count_k) as s:
                assert s.report[PROGRESS] == 2
                _conc_after(mine, name, 0 if s.died else 1, limit)
        return s.fired

    fp.every_store(strike_at, "conc_release", at_least=2)


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_claim(make_name, sig):
    """A process's stripe claim struck at every store (2 stripes: ours, and the victim's):
    a dead claimer's stripe is taken by the next process at once, its entries count nothing;
    a live one keeps its stripe (the next process finds none) and its slot."""
    limit = 2

    def strike_at(n: int) -> bool:
        name = make_name(f"concclaim{n}")
        with fp.dropped(shmwin.Concurrency(name, limit, processes=2), name) as mine:
            assert mine.acquire("other", 0)  # stripe 1

            def before(report):
                return shmwin.Concurrency.attach(name)

            take = lambda t: t.acquire("k", 0)  # noqa: E731
            with fp.strike("conc_claim", n, sig, before, take, _count_k) as s:
                if s.died:
                    _conc_after(mine, name, 0, limit)  # the survivor claims the dead victim's stripe
                else:
                    assert fp.promptly(mine.count, "k") == 1
                    with pytest.raises(AssertionError, match="KeyTableFullError"):
                        fp.in_child(_conc_take, name, "k", 1)  # the live victim keeps its stripe
        return s.fired

    fp.every_store(strike_at, "conc_claim", at_least=4)
