"""A token bucket's rate changed over a key used again after a pause: the tokens it has used
are carried "as is", not its whole burst. A bucket row's stamp is its tat less the burst's time
(core/counters.c), so a key read at that stamp looked empty: 1000/second burst 1000, 5 taken,
a pause, 5 more, a pause, then 3/second burst 1000 admitted 9 of 1000 (the red team's run)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.helpers import ROOT

import shmwin
from shmwin import ManualClock, TokenBucket

pytestmark = pytest.mark.integration

S = 1_000_000_000


def run(code: str) -> str:
    """``python -c code`` (another process on the host clock): its output."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("change", ["set_rate", "open"])
def test_a_key_used_again_after_a_pause_keeps_its_tokens(name, change):
    clock = ManualClock(10**12)
    with TokenBucket(name, "1000/second", burst=1000, clock=clock) as tb:
        assert sum(tb.hit("k") for _ in range(5)) == 5
        clock.advance(2)
        assert sum(tb.hit("k") for _ in range(5)) == 5  # full again before: 5 used now
        clock.advance(2)  # full again: nothing used
        if change == "set_rate":
            tb.set_rate("3/second", burst=1000)
        else:
            TokenBucket(name, "3/second", burst=1000, clock=clock).close()
        assert sum(tb.hit("k") for _ in range(1000)) == 1000
        assert not tb.hit("k")
        tb.unlink()


def test_a_key_used_within_its_refill_still_carries_what_it_used(name):
    """The other side: tokens still missing at the change are carried (a pause shorter than the
    refill): 10 used, 0.5 s later 5 of them back at 10/second: 5 carried as used."""
    clock = ManualClock(10**12)
    with TokenBucket(name, "10/second", burst=10, clock=clock) as tb:
        assert sum(tb.hit("k") for _ in range(10)) == 10
        clock.advance(ns=S // 2)
        tb.set_rate("1/second", burst=10)
        assert sum(tb.hit("k") for _ in range(10)) == 5
        tb.unlink()


def test_shmwin_set_over_a_key_of_another_process_keeps_its_tokens(name):
    """Every process on the host clock: a worker takes 5 tokens, pauses past the bucket's refill
    (0.1 s: the pause may be any longer), takes 5 more and exits; `shmwin set` (its own process)
    changes the rate; the next process has 95 or more of 100 (before: none)."""
    take = (f"import time\nimport shmwin\nt = shmwin.TokenBucket({name!r}, '1000/second', burst=100)\n"
            "n = sum(t.hit('k') for _ in range(5))\ntime.sleep(0.2)\n"
            "print(n + sum(t.hit('k') for _ in range(5)))")  # fmt: skip
    assert run(take) == "10"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "shmwin", "set", name, "3/second", "--burst", "100"], check=True,
                   capture_output=True, env=env, timeout=60)  # fmt: skip
    admitted = run(f"from shmwin import TokenBucket\nt = TokenBucket.attach({name!r})\n"
                   "print(sum(t.hit('k') for _ in range(100)))")  # fmt: skip
    assert int(admitted) >= 95
    shmwin.unlink(name)
