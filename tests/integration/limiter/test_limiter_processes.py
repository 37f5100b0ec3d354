"""The limiter across real processes: exactly the limit passes, for every start method."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
import sys
import textwrap

import pytest
from support.helpers import ROOT, run_all
from support.workers import limiter_hits

from shmwin import Limiter, ManualClock

LIMIT, PROCS, TRIES = 1000, 4, 600


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_exactly_the_limit_passes_across_processes(name, start):
    ctx = mp.get_context(start)
    with Limiter(name, f"{LIMIT}/hour", capacity=100) as lim:
        admitted = ctx.Array("q", PROCS, lock=False)
        procs = [
            ctx.Process(target=limiter_hits, args=(name, "1.2.3.4", TRIES, admitted, i)) for i in range(PROCS)
        ]
        run_all(procs, timeout_s=120)
        assert sum(admitted) == LIMIT  # 2400 tries, 1000 admitted, 1400 refused
        assert lim.stats("1.2.3.4").used == LIMIT
        lim.unlink()


def test_exactly_the_limit_passes_across_unrelated_processes(name):
    code = textwrap.dedent(
        """
        import sys
        from shmwin import Limiter
        lim = Limiter(sys.argv[1], "1000/hour", capacity=100)   # create-or-attach by name
        print(sum(lim.hit("client") for _ in range(600)))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        for _ in range(PROCS)
    ]  # fmt: skip
    counts = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(counts) == LIMIT
    with Limiter.attach(name) as lim:
        assert lim.stats("client").used == LIMIT
        lim.unlink()


def _phase_worker(name: str, clock_path: str, barrier, admitted, slot: int, phases: int) -> None:
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path))
    for phase in range(phases):
        barrier.wait()  # the parent has moved the clock
        admitted[slot * phases + phase] = sum(lim.hit("k") for _ in range(100))
        barrier.wait()
    lim.close()


def test_several_rates_hold_together_across_processes(name, tmp_path):
    clock = ManualClock(7_000 * 10**9, path=str(tmp_path / "clock"))
    ctx = mp.get_context("fork")
    phases, procs = 4, 3
    barrier = ctx.Barrier(procs + 1)
    admitted = ctx.Array("q", procs * phases, lock=False)
    with Limiter(name, "50/second;120/minute", clock=clock) as lim:
        ps = [
            ctx.Process(
                target=_phase_worker, args=(name, str(tmp_path / "clock"), barrier, admitted, i, phases)
            )
            for i in range(procs)
        ]
        for p in ps:
            p.start()
        per_phase = []
        for phase in range(phases):
            if phase:
                clock.advance(1.1)  # a new second; the same minute
            barrier.wait()
            barrier.wait()
            per_phase.append(sum(admitted[i * phases + phase] for i in range(procs)))
        for p in ps:
            p.join(60)
            assert p.exitcode == 0
        # 300 tries per phase: the second caps at 50 until the minute's 120 are used
        assert per_phase == [50, 50, 20, 0]
        assert [s.used for s in lim.stats_all("k")] == [0, 120]
        lim.unlink()


def _many_keys(name: str, keys: list[str], admitted, slot: int) -> None:
    lim = Limiter.attach(name)
    total = 0
    for _ in range(5):
        for key in keys:
            total += lim.hit(key)
    admitted[slot] = total
    lim.close()


def test_many_keys_each_get_exactly_their_limit(name):
    keys = [f"user-{i}" for i in range(300)]
    ctx = mp.get_context("fork")
    admitted = ctx.Array("q", 4, lock=False)
    with Limiter(name, "3/minute", capacity=1000) as lim:
        ps = [ctx.Process(target=_many_keys, args=(name, keys, admitted, i)) for i in range(4)]
        run_all(ps, timeout_s=120)
        assert sum(admitted) == 3 * len(keys)
        assert all(lim.stats(key).used == 3 for key in keys)
        assert len(lim.window.keys()) == len(keys)
        lim.unlink()
