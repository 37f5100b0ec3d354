"""Fail points: the two-tier limiter's host tier (core/lease.c), against a real redis-server.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


LEASE_LIMIT, LEASE_MAX = 40, 5  # "40/minute": leases of 1, 2, 4, then at most 40 // 8 hits
RESULT = 5  # the report word where the struck call's answer lands, if it returned


def _lease_limiter(name: str, url: str, clock_path: Path) -> Limiter:
    clock = ServerTime(ManualClock(path=clock_path))  # the host's and the server's time
    rate = f"{LEASE_LIMIT}/minute"
    return Limiter(name, rate, backend="shm+" + url, clock=clock, lock_timeout=LOCK_TIMEOUT)


def _lease_hits(name: str, url: str, clock_path: Path, n: int) -> int:
    """A survivor's hits on "k" (a fresh process of the same host): how many were admitted."""
    lim = _lease_limiter(name, url, clock_path)
    try:
        return sum(bool(fp.promptly(lim.hit, "k")) for _ in range(n))
    finally:
        lim.close()


def _lease_before(section: str, name: str, url: str, clock_path: Path) -> Callable[[Any], Any]:
    """The victim's way to the struck section, from a fresh limiter: its admitted hits counted
    in report[PROGRESS]."""

    def before(report: Any) -> Any:
        lim = _lease_limiter(name, url, clock_path)
        hits = {"lease_spend": 2, "lease_seal": 2, "lease_install": 3, "lease_deny": LEASE_LIMIT,
                "lease_refund": 2}[section]  # fmt: skip
        for _ in range(hits):
            assert lim.hit("k")
            report[PROGRESS] += 1
        if section == "lease_seal":  # lease 2 (2 hits, 1 spent) expires: the next hit seals it
            ManualClock(path=clock_path).advance(2)
        report[RESULT] = -1
        return lim, report

    return before


def _lease_op(section: str) -> Callable[[Any], Any]:
    def op(state: Any) -> None:
        lim, report = state
        report[RESULT] = int(lim.refund("k", 1) if section == "lease_refund" else lim.hit("k"))

    return op


LEASE_SECTIONS = ["lease_spend", "lease_seal", "lease_install", "lease_deny", "lease_refund"]


@pytest.mark.parametrize("section", LEASE_SECTIONS)
@pytest.mark.parametrize("sig", SIGNALS)
def test_lease(make_name, tmp_path, redis_server, sig, section):
    """Each lease section struck at every store: no lock or key hangs; the hits admitted --
    those that returned before, the struck call's if it returned, a survivor's, this process's
    -- never exceed the limit (a refund gives one back at most); at most the two leases in play
    are stranded (taken in Redis, never spent); and a period later, all of the limit again."""
    url = redis_server.url

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"lease{n}"), tmp_path / f"clock{n}"
        ManualClock(T0, path=clock_path)
        mine = _lease_limiter(name, url, clock_path)
        try:
            before = _lease_before(section, name, url, clock_path)
            with fp.strike(section, n, sig, before, _lease_op(section), lambda st: st[0].stats("k")) as s:
                returned = s.report[PROGRESS]
                struck = s.report[RESULT]
                if section != "lease_refund" and struck > 0:
                    returned += struck
                given_back = max(struck, 0) if section == "lease_refund" else 0
                later = fp.in_child(_lease_hits, name, url, clock_path, 2 * LEASE_LIMIT)
                later += sum(bool(fp.promptly(mine.hit, "k")) for _ in range(LEASE_LIMIT))
                assert returned + later <= LEASE_LIMIT + given_back + (section == "lease_refund"), (
                    f"{returned} admitted before, {later} after: over the limit of {LEASE_LIMIT}"
                )
                assert returned + later >= LEASE_LIMIT - 2 * LEASE_MAX, (returned, later)
                ManualClock(path=clock_path).advance(66)  # every lease, stranded or not, left the window
                assert fp.in_child(_lease_hits, name, url, clock_path, 2 * LEASE_LIMIT) == LEASE_LIMIT
            return s.fired
        finally:
            mine.unlink()
            mine.close()

    fp.every_store(strike_at, section, at_least=2)
