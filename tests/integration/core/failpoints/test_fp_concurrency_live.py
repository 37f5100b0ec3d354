"""Fail points: a Concurrency's live limits (format 11) -- the limit changed in place (core/live.c
section "live"), a reset's move struck at its retire, and the row's top word in
core/concurrency.c's "conc_acquire" (an entry taken at the top) and "conc_release" (the last
entry under the top given back).

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import os

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS

from shmwin import Concurrency

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _survivor(name: str, n: int) -> tuple[int, list[bool]]:
    """A process that attaches after the strike: the limit it meets, and n tries at "k"."""
    with Concurrency.attach(name) as c:
        return c.limit, [c.acquire("k", timeout=0) for _ in range(n)]


def _free_then_full(mine: Concurrency, name: str, free: int) -> None:
    """From a survivor, then this process: exactly ``free`` slots of "k" left, never one more."""
    limit, got = fp.in_child(_survivor, name, free + 1)
    assert got == [True] * free + [False], f"a survivor took {got}: {free} were free (limit {limit})"
    got = [fp.promptly(mine.acquire, "k", 0) for _ in range(free + 1)]
    assert got == [True] * free + [False], f"this process took {got}: {free} were free"
    for _ in range(free):
        mine.release("k")


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_live_limit_change(make_name, sig):
    """set_limits on a concurrency struck at every store (4 -> 2, 3 slots held here): the limit
    in force is 4 or 2, whole; every process meets the same one at its next call; the slots
    held stay held and count against it."""
    seen: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        name = make_name(f"cl{n}")
        mine = Concurrency(name, 4)
        try:
            assert all(mine.acquire("k", 0) for _ in range(3))

            def before(report):
                report[PROGRESS] = 1
                return Concurrency.attach(name)

            change, again = (lambda t: t.set_limit(2)), (lambda t: t.count("k"))
            with fp.strike("live", n, sig, before, change, again) as s:
                limit = fp.promptly(lambda: mine.limit)
                assert limit in (4, 2), limit
                assert limit == 2 or not s.completed, "the change completed, yet the old limit holds"
                seen[n] = limit == 2
                assert mine.count("k") == 3, "a slot held was dropped"
                _free_then_full(mine, name, 1 if limit == 4 else 0)
                mine.release("k")
                mine.release("k")
                _free_then_full(mine, name, limit - 1)
                mine.release("k")
            return s.fired
        finally:
            fp.drop(mine, name)

    stores = fp.every_store(strike_at, "live")
    fp.assert_monotone(seen, "live")
    assert stores == 3, f"section 'live' made {stores} stores"  # the limit, when, the generation


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_reset_struck_at_its_retire(make_name, sig):
    """A reset (2 -> 3) struck after its retire: the old segment counts nothing, no new one is
    under the name. Killed: this process's next call takes the move over -- a new, empty
    segment of the limit the mover had set in place (3). Raised: the mover rolled back, the
    old segment live as it was, its 2 slots held and the limit put back (2: a reset is all or
    nothing). Not struck: reset, empty, limit 3. Either way
    this process's slots from before release cleanly, and nothing is left in /dev/shm but the
    name."""

    def strike_at(n: int) -> bool:
        name = make_name(f"cr{n}")
        mine = Concurrency(name, 2, capacity=16)
        try:
            assert mine.acquire("k", 0) and mine.acquire("k", 0)

            def before(report):
                report[PROGRESS] = 1
                return None

            change = lambda _: Concurrency(name, 3, capacity=16, on_change="reset")  # noqa: E731
            with fp.strike("retire", n, sig, before, change) as s:
                held = fp.promptly(mine.count, "k")
                rolled_back = s.fired and not s.died
                assert held == (2 if rolled_back else 0), f"{held} held after the strike"
                limit = 2 if rolled_back else 3  # rolled back: the old limit put back
                assert mine.limit == limit
                _free_then_full(mine, name, limit - held)
                mine.release("k")
                mine.release("k")  # forgotten by the reset (killed), or plain: never an error
                assert mine.count("k") == 0
                left = [f for f in os.listdir("/dev/shm") if name in f and ".moving-" in f]
                assert not left, f"a passing segment was left: {left}"
            return s.fired
        finally:
            fp.drop(mine, name)

    assert fp.every_store(strike_at, "retire") == 1  # the generation word's bit


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_acquire_at_the_top(make_name, sig):
    """An acquire that takes the entry at the row's top (no free or dead entry under it: the
    top word goes up first) struck at every store: a dead victim's slot is free at once, a
    live one's counted once; the entries looked at still hold every live holder."""

    def strike_at(n: int) -> bool:
        name = make_name(f"ct{n}")
        mine = Concurrency(name, 3)
        try:
            assert mine.acquire("k", 0)  # entry 0, the top 1

            def before(report):
                theirs = Concurrency.attach(name)
                assert theirs.acquire("j", 0)  # its stripe, claimed before the strike
                return theirs

            take, count = (lambda t: t.acquire("k", 0)), (lambda t: t.count("k"))
            with fp.strike("conc_acquire", n, sig, before, take, count) as s:
                live = 1 if s.died else 2
                assert fp.promptly(mine.count, "k") == live, "a dead holder counted, or a live one lost"
                _free_then_full(mine, name, 3 - live)
            return s.fired
        finally:
            fp.drop(mine, name)

    fp.every_store(strike_at, "conc_acquire", at_least=4)  # intent, top, claim, stripe


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_release_lowers_the_top(make_name, sig):
    """A release of the last entry under the top (its entry freed, then the top lowered past
    the free entries under it) struck at every store: a dead victim's slot is free, a live
    one gave it back once; this process's slot, under the top, is still counted."""

    def strike_at(n: int) -> bool:
        name = make_name(f"cu{n}")
        mine = Concurrency(name, 3)
        try:
            assert mine.acquire("k", 0)  # entry 0

            def before(report):
                theirs = Concurrency.attach(name)
                assert theirs.acquire("k", 0)  # entry 1, the top 2
                report[PROGRESS] = 1
                return theirs

            give, count = (lambda t: t.release("k")), (lambda t: t.count("k"))
            with fp.strike("conc_release", n, sig, before, give, count) as s:
                assert fp.promptly(mine.count, "k") == 1, "this process's slot lost, or the victim's kept"
                _free_then_full(mine, name, 2)
                assert mine.acquire("k", 0) and mine.held("k") == 2
                mine.release("k")
            return s.fired
        finally:
            fp.drop(mine, name)

    fp.every_store(strike_at, "conc_release", at_least=3)  # intent, the entry, the top
