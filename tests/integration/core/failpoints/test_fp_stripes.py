"""Fail points: stripes.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import os

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PID, RAISE, SIGNALS

from shmwin import Window

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _claim_and_add(name: str, count: int) -> tuple[int, list[int]]:
    w = Window.attach(name, lock_timeout=LOCK_TIMEOUT)
    fp.promptly(w.add, count)  # claims a stripe first
    owners = [pid for _, pid, alive in w.stripe_owners() if alive]
    return os.getpid(), owners  # exits without close(): its stripe is left to a dead owner


@pytest.mark.parametrize("stripes", [1, 3])
@pytest.mark.parametrize("sig", SIGNALS)
def test_claim(make_name, sig, stripes):
    """The stripe claim of a striped window, struck at every store: other processes still claim
    stripes (or adopt the victim's), and every count is exact."""

    def strike_at(n: int) -> bool:
        name = make_name(f"claim{n}")
        w = Window(name, span="1h", buckets=60, stripes=stripes, lock_timeout=LOCK_TIMEOUT)
        try:
            with fp.strike(
                "claim", n, sig, lambda report: Window.attach(name, lock_timeout=LOCK_TIMEOUT),
                lambda mine: mine.add(1), lambda mine: mine.add(1),
            ) as s:  # fmt: skip
                # the claim runs before the add: a dead claimer counted nothing; otherwise the
                # add completed (an exception surfaces after it) and `again` added 1 more
                counted = 0 if s.died else 2
                assert fp.promptly(w.total) == counted
                for i in range(3):
                    pid, owners = fp.in_child(_claim_and_add, name, 10)
                    if s.died or stripes > 2:
                        assert pid in owners, f"survivor {i} found no stripe (owners {owners})"
                fp.promptly(w.add, 1)
                assert w.total() == counted + 31
                victim = s.report[PID]
                assert all(pid in (os.getpid(), victim) for _, pid, alive in w.stripe_owners() if alive)
            return s.fired
        finally:
            fp.drop(w, name)

    assert fp.every_store(strike_at) >= 2


def test_an_exception_right_after_a_claim_leaks_no_stripe(make_name):
    """(Before 0e670d2 the claim was a separate call from Python: an exception right after it
    lost the claimed row, and the process's next add claimed a second stripe.)"""
    name = make_name("claimleak")
    with Window(name, span=60, buckets=60, stripes=3) as w, fp.strike(
        "claim", 1, RAISE, lambda report: Window.attach(name), lambda mine: mine.add(1),
        lambda mine: mine.add(1),
    ) as s:  # fmt: skip
        assert s.fired and w.total() == 2
        rows = [row for row, pid, alive in w.stripe_owners() if pid == s.report[PID]]
        w.unlink()
        assert len(rows) == 1, f"one live process owns stripes {rows}"
