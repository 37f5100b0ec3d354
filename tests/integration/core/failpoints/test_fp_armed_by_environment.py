"""Fail points: an unrelated process, armed through the environment.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support import failpoints as fp
from support.failpoints import KILL, LOCK_TIMEOUT, T0
from support.helpers import ROOT

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


_ARMED_BY_ENV = """
import sys
from shmwin import Limiter, ManualClock, _core
lim = Limiter(sys.argv[1], "10/minute", capacity=16, clock=ManualClock(path=sys.argv[2]), lock_timeout=5)
print("admitted", int(lim.hit("k")), flush=True)
print("fired", int(_core.failpoint_fired()), flush=True)
"""


def test_a_python_c_victim_armed_by_shmwin_failpoint(make_name, tmp_path):
    """SHMWIN_FAILPOINT="hit:n:9" in an unrelated ``python -c`` process: its first hit dies at
    store n; this process then finds the key's lock repaired and exactly 10 admitted in all."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"env{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            env = dict(os.environ, PYTHONPATH=str(ROOT), SHMWIN_FAILPOINT=f"hit:{n}:{int(KILL)}")
            proc = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(_ARMED_BY_ENV), name, str(clock_path)],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            fired = proc.returncode == -KILL
            if not fired:
                assert proc.returncode == 0, proc.stderr
                assert proc.stdout.split() == ["admitted", "1", "fired", "0"]
            counted = fp.promptly(lim.stats, "k").used
            fp.assert_repaired(lim, "k")
            assert counted in (0, 1) and (fired or counted == 1)
            assert sum(fp.promptly(lim.hit, "k") for _ in range(12)) == 10 - counted
            return fired
        finally:
            fp.drop(lim, name)

    assert fp.every_store(strike_at) >= 4
