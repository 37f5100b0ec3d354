"""Fail points: the token bucket (core/counters.c: token_take).

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support import failpoints as fp
from support.failpoints import PROGRESS, SIGNALS, T0, S

from shmwin import ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


TOKEN_BURST, TOKEN_T = 5, S // 10  # "10/second", burst 5


def _token_bucket(name: str, clock: ManualClock, create: bool = True) -> Any:
    from shmwin import TokenBucket

    if create:
        return TokenBucket(name, "10/second", burst=TOKEN_BURST, capacity=16, clock=clock)
    return TokenBucket.attach(name, clock=clock)


def _token_takes(name: str, clock_path: Path, n: int) -> list[int]:
    """A survivor's n hits on "k": 0/1 each."""
    tb = _token_bucket(name, ManualClock(path=clock_path), create=False)
    try:
        return [int(tb.hit("k")) for _ in range(n)]
    finally:
        tb.close()


def _token_words(tb: Any, key: str) -> tuple[int, int]:
    """``key``'s (tat, last write), read from the segment by the layout's offsets."""
    from shmwin.backends.shm import format as words

    b = tb.window._backend
    row, _ = b._core.find(key)
    at = (b._lay.rows_off + row * b._lay.row_bytes) // 8
    return int(b._q[at + b._lay.ring_words[0] + words.TOKEN_STATE_TAT]), int(b._q[at + words.KEY_ROW_LAST_NS])


@pytest.mark.parametrize("when", ["drained", "refilled"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_token_take(make_name, tmp_path, sig, when):
    """The token bucket's take struck at every store: the tokens left are those the returned
    takes leave, less the take in flight at most once; the next takes, here and from a
    survivor, never get more than that; the key's last write never lets the key table reclaim
    the row before its bucket is full again; no lock hangs."""
    seen: dict[int, int] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"token{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        mine = _token_bucket(name, clock)
        try:
            assert mine.hit("other", 2)

            def before(report):
                theirs = _token_bucket(name, ManualClock(path=clock_path), create=False)
                for _ in range(3):
                    assert theirs.hit("k")
                    report[PROGRESS] += 1
                if when == "refilled":  # a full bucket again: the take moves the key's last write
                    ManualClock(path=clock_path).advance(10)
                return theirs

            with fp.strike("token_take", n, sig, before, lambda t: t.hit("k"), lambda t: t.stats("k")) as s:
                assert s.report[PROGRESS] == 3
                truth = 2 if when == "drained" else TOKEN_BURST  # what the returned takes leave
                left = fp.promptly(mine.stats, "k").remaining  # the row lock the victim may have died holding
                assert left in (truth - 1, truth), f"{left} tokens left, the returned takes leave {truth}"
                assert not s.completed or left == truth - 1, "the take completed: taken once"
                seen[n] = truth - left
                tat, last = _token_words(mine, "k")
                full_at = tat - TOKEN_BURST * TOKEN_T
                assert last >= full_at, "the row may be reclaimed before its bucket is full"
                got = fp.in_child(_token_takes, name, clock_path, TOKEN_BURST + 1)
                got += [int(fp.promptly(mine.hit, "k")) for _ in range(2)]
                assert sum(got) == left, f"{sum(got)} taken after the strike, {left} were left"
                assert got == sorted(got, reverse=True), "taken after a refusal at one time"
                other = 3 if when == "drained" else TOKEN_BURST
                assert mine.stats("other").remaining == other, "another key moved"
            return s.fired
        finally:
            fp.drop(mine, name)

    stores = fp.every_store(strike_at)
    fp.assert_monotone(seen, "token_take")
    # intent and tat; a refilled bucket's take also moves the key's last write first
    assert stores == (2 if when == "drained" else 3), f"section 'token_take' made {stores} stores"
