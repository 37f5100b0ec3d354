"""Real processes sharing one window: fork, spawn, and unrelated `python -c` processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import pytest
from support.helpers import add_many, add_with_clock, run_all, run_python

import shmwin
from shmwin import ManualClock, Window

PROCS, ADDS, ERR_EVERY = 4, 5_000, 7
ERRS_PER_PROC = len(range(0, ADDS, ERR_EVERY))
MODES = ["striped", "locked"]


def _create(name: str, mode: str, **kw) -> Window:
    return Window(name, span="1h", buckets=60, fields=("ok", "err"), mode=mode, **kw)


def _run_all(ctx: mp.context.BaseContext, target, args_list) -> None:
    procs = [ctx.Process(target=target, args=args) for args in args_list]
    run_all(procs, timeout_s=120)


@pytest.mark.parametrize("start", ["fork", "spawn"])
@pytest.mark.parametrize("mode", MODES)
def test_exact_total_across_processes(name, start, mode):
    with _create(name, mode) as w:
        _run_all(mp.get_context(start), add_many, [(name, ADDS, ERR_EVERY)] * PROCS)
        assert w.totals() == {"ok": PROCS * ADDS, "err": PROCS * ERRS_PER_PROC}
        w.unlink()


@pytest.mark.parametrize("mode", MODES)
def test_exact_total_across_unrelated_python_processes(name, mode):
    with _create(name, mode) as w:
        code = """
            import sys
            from shmwin import Window
            w = Window.attach(sys.argv[1])
            for i in range(int(sys.argv[2])):
                w.add()
                if i % 7 == 0:
                    w.add(1, "err")
            print(w.total())
        """
        import subprocess
        import sys

        from support.helpers import ROOT

        env = dict(os.environ, PYTHONPATH=str(ROOT))
        procs = [
            subprocess.Popen([sys.executable, "-c", __import__("textwrap").dedent(code), name, str(ADDS)],
                             env=env, stdout=subprocess.PIPE, text=True)
            for _ in range(PROCS)
        ]  # fmt: skip
        for p in procs:
            p.communicate(timeout=120)
            assert p.returncode == 0
        assert w.totals() == {"ok": PROCS * ADDS, "err": PROCS * ERRS_PER_PROC}
        w.unlink()


def _add_after_barrier(name: str, barrier, n: int) -> None:
    w = Window.attach(name)
    w.add()
    barrier.wait()  # everyone holds a stripe (or found none) before the main loop
    for _ in range(n - 1):
        w.add()
    barrier.wait()
    w.close()


def test_every_stripe_taken_falls_back_to_the_locked_row_exactly(name):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(7)
    with Window(name, span="1h", fields=("ok",), stripes=2) as w:
        procs = [ctx.Process(target=_add_after_barrier, args=(name, barrier, ADDS)) for _ in range(6)]
        for p in procs:
            p.start()
        barrier.wait()
        owners = w.stripe_owners()
        assert len(owners) == 2 and all(alive for _, _, alive in owners)  # four use row 0
        barrier.wait()
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        assert w.total() == 6 * ADDS
        w.unlink()


def test_attachers_and_the_creator_exiting_never_remove_the_segment(name):
    run_python(
        """
        import sys
        from shmwin import Window
        w = Window(sys.argv[1], span="1h", fields=("ok",))
        w.add(3)
        """,
        name,
    )
    assert name in shmwin.names()  # the creator exited without unlink
    for _ in range(3):  # attach, add, exit -- with and without close()
        run_python("import sys; from shmwin import Window; Window.attach(sys.argv[1]).add(2)", name)
    closing = "import sys; from shmwin import Window; w = Window.attach(sys.argv[1]); w.add(1); w.close()"
    run_python(closing, name)
    ctx = mp.get_context("spawn")
    _run_all(ctx, add_many, [(name, 10, 0)])
    with Window.attach(name) as w:
        assert w.total() == 3 + 6 + 1 + 10
        w.unlink()
    assert name not in shmwin.names()


def test_manual_clock_drives_expiry_across_processes(name, tmp_path):
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(5_000 * 10**9, path=clock_path)
    ctx = mp.get_context("spawn")
    with Window(name, span=10, buckets=10, fields=("ok", "err"), clock=clock) as w:
        _run_all(ctx, add_with_clock, [(name, clock_path, 1, "ok"), (name, clock_path, 2, "err")])
        clock.advance(4)
        _run_all(ctx, add_with_clock, [(name, clock_path, 10, "ok")])
        clock.advance(5.5)
        _run_all(ctx, add_with_clock, [(name, clock_path, 100, "ok")])
        assert w.series("ok").tolist() == [1, 0, 0, 0, 10, 0, 0, 0, 0, 100]
        reader = """
            import sys, json
            from shmwin import ManualClock, Window
            w = Window.attach(sys.argv[1], clock=ManualClock(path=sys.argv[2]))
            print(json.dumps([w.totals(), w.series("ok").tolist()]))
        """
        import json

        seen = json.loads(run_python(reader, name, clock_path).stdout)
        assert seen == [{"ok": 111, "err": 2}, [1, 0, 0, 0, 10, 0, 0, 0, 0, 100]]
        clock.advance(0.5)  # partial slide: the first bucket drops out, in every process
        seen = json.loads(run_python(reader, name, clock_path).stdout)
        assert seen == [{"ok": 110, "err": 0}, [0, 0, 0, 10, 0, 0, 0, 0, 100, 0]]
        clock.advance(3600)  # a gap longer than the span clears everything
        seen = json.loads(run_python(reader, name, clock_path).stdout)
        assert seen == [{"ok": 0, "err": 0}, [0] * 10]
        w.unlink()


def _add_then_hang(name: str, n: int, ready) -> None:
    w = Window.attach(name)
    w.add(n)
    ready.set()
    signal.pause()


def test_a_dead_process_stripe_is_adopted_with_its_counts(name):
    ctx = mp.get_context("fork")
    with Window(name, span="1h", fields=("ok",), stripes=1) as w:
        ready = ctx.Event()
        victim = ctx.Process(target=_add_then_hang, args=(name, 100, ready))
        victim.start()
        assert ready.wait(30)
        assert w.stripe_owners() == [(1, victim.pid, True)]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        assert w.stripe_owners() == [(1, victim.pid, False)]
        assert w.total() == 100  # a dead writer's counts stay inside the window
        w.add(5)  # this process adopts stripe 1 (the only one), keeping its 100
        assert [(row, pid) for row, pid, _ in w.stripe_owners()] == [(1, os.getpid())]
        assert w.total() == 105
        w.unlink()


def test_reclaim_frees_dead_stripes_only(name):
    ctx = mp.get_context("fork")
    with Window(name, span="1h", fields=("ok",)) as w:
        w.add(1)
        ready = ctx.Event()
        victim = ctx.Process(target=_add_then_hang, args=(name, 7, ready))
        victim.start()
        assert ready.wait(30)
        assert w.reclaim() == 0
        os.kill(victim.pid, signal.SIGKILL)
        victim.join()
        assert w.reclaim() == 1
        assert [pid for _, pid, _ in w.stripe_owners()] == [os.getpid()]
        assert w.total() == 8
        w.unlink()


def test_forked_child_gets_its_own_stripe(name):
    with Window(name, span="1h", fields=("ok",)) as w:
        w.add(1)  # the parent owns a stripe before forking
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            code = 4
            try:
                w.add(10)
                code = 0 if len(w.stripe_owners()) == 2 else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert w.total() == 11
        w.unlink()
