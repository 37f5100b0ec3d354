"""Round 2 of issue #31's attacks: same-rate resets raced by other processes, and the
rate-limit middlewares over a limiter whose limits change live. Time is a ManualClock every
process shares (a file), never advanced within a race: every hit falls in one period."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from support.helpers import ROOT

from shmwin import Limiter, ManualClock

S = 1_000_000_000
T0 = 10**17

_HITTER = r"""
import sys
from shmwin import Limiter, ManualClock
name, path, n, reopen = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "1"
clock = ManualClock(path=path)
lim = Limiter(name, "10/minute", clock=clock, on_change="reset")
admitted = 0
for i in range(n):
    if reopen and i % 25 == 0:  # a worker of the deploy opening: same rates, on_change="reset"
        lim.close()
        lim = Limiter(name, "10/minute", clock=clock, on_change="reset")
    admitted += lim.hit("k")
print(admitted)
lim.close()
"""


def _hitters(name: str, path: str, n: int, count: int = 3) -> list[subprocess.Popen[str]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return [subprocess.Popen([sys.executable, "-c", _HITTER, name, path, str(n), "1"], stdout=subprocess.PIPE,
                             text=True, env=env) for _ in range(count)]  # fmt: skip


def _admitted(procs: list[subprocess.Popen[str]]) -> int:
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        total += int(out)
    return total


@pytest.mark.parametrize("resets", [0, 6])
def test_same_rate_resets_raced_by_hitters_and_reset_openers(tmp_path, name, resets):
    """Three python -c processes hit one key 3,000 times each, reopening every 25 hits with the
    same rates and on_change="reset" (which must not reset), while this process resets
    ``resets`` times, each once the key is used up, with set_rates(same, on_change="reset"):
    no more than 10 admitted in each span between resets, none left hung, and the key counts
    at most 10 at the end."""
    path = str(tmp_path / "clock")
    clock = ManualClock(T0, path=path)
    lim = Limiter(name, "10/minute", clock=clock)
    try:
        procs = _hitters(name, path, 3000)
        done = 0
        deadline = time.monotonic() + 60
        while done < resets and time.monotonic() < deadline:
            if lim.stats("k").used == 10:  # the hitters used it up: reset under their fire
                lim.set_rates("10/minute", on_change="reset")
                done += 1
        total = _admitted(procs)
        assert done == resets, f"the hitters ended before {resets} resets ({done})"
        assert total <= 10 * (resets + 1), f"{total} admitted over {resets} resets of 10/minute"
        if resets == 0:
            assert total == 10  # openers with the same rates and on_change="reset" reset nothing
        used = lim.stats("k").used
        assert used <= 10 and sum(lim.hit("k") for _ in range(11)) == 10 - used  # no hung or lost count
        print(f"resets={resets}: {total} admitted, {used} counted at the end")
    finally:
        lim.unlink()
        lim.close()
