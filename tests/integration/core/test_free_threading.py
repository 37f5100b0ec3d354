"""shmwin's free-threading stance: it needs the GIL, says so on import, and is exact under threads.

No free-threaded CPython (3.13t, 3.14t) can be installed on these machines, so the import-time
stance is tested by faking what such a build shows -- ``Py_GIL_DISABLED`` in its config and
``sys._is_gil_enabled()`` -- in a fresh interpreter before ``import shmwin``. What can be tested
for real is the guarantee under threads: many threads in each of several separately started
processes write one window and race for one limiter, and every add is counted and no more than
the limit is admitted. Each process reports ``sys._is_gil_enabled()`` where it exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.helpers import ROOT

import shmwin

pytestmark = pytest.mark.integration
S = 1_000_000_000
PROCESSES = 4
THREADS = 8
ADDS = 2_000  # per thread
LIMIT = 1_000
HITS = 60  # per thread: PROCESSES * THREADS * HITS = 1,920 tries at a limit of 1,000

FAKE_FREE_THREADED = """
import sys, sysconfig, warnings
real = sysconfig.get_config_var
sysconfig.get_config_var = lambda name: 1 if name == "Py_GIL_DISABLED" else real(name)
sys._is_gil_enabled = lambda: {gil_on}  # what CPython reports once the import is done
warnings.simplefilter("error", RuntimeWarning)  # a warning fails the import, to be read
try:
    import shmwin
except Exception as exc:
    print(type(exc).__name__)
    print(exc)
"""


RACE_TO_FIRST_ADD = """
import os, sys, threading
import shmwin
w = shmwin.Window.attach(sys.argv[1])
start = threading.Barrier(16)

def work():
    start.wait()  # all at once to the first add: none of them has a stripe yet
    for _ in range(100):
        w.add()

pool = [threading.Thread(target=work) for _ in range(16)]
for t in pool:
    t.start()
for t in pool:
    t.join()
print(sum(pid == os.getpid() for _, pid, _ in w.stripe_owners()))
w.close()
"""


def test_threads_racing_to_a_first_add_share_one_stripe_and_close_cleanly(make_name) -> None:
    name = make_name("w")
    w = shmwin.Window(name, span="1h", fields=("ok",))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        for _ in range(3):
            argv = [sys.executable, "-c", RACE_TO_FIRST_ADD, name]
            proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
            assert proc.returncode == 0, (proc.returncode, proc.stderr)  # was -11 (SIGSEGV), at exit
            assert proc.stdout.split() == ["1"], proc.stdout
        assert w.total() == 3 * 16 * 100
    finally:
        w.close()
        w.unlink()


def _import_as_free_threaded(gil_on: bool) -> tuple[str, str]:
    """``import shmwin`` in a fresh interpreter that looks free-threaded; (exception name, text)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = FAKE_FREE_THREADED.format(gil_on=gil_on)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    kind, _, text = proc.stdout.partition("\n")
    return kind, text


def test_a_free_threaded_python_with_the_gil_forced_off_is_refused_with_the_reason() -> None:
    kind, text = _import_as_free_threaded(gil_on=False)
    assert kind == "ImportError", text
    assert "shmwin needs the GIL" in text and "lose adds" in text, text
    assert "PYTHON_GIL=0" in text and "-X gil=0" in text, text  # what was done, and what to undo


def test_a_free_threaded_python_is_told_that_shmwin_turned_the_gil_back_on() -> None:
    kind, text = _import_as_free_threaded(gil_on=True)
    assert kind == "GILRequiredWarning", text
    assert "shmwin needs the GIL" in text and "turned the GIL back on" in text, text
    assert "processes of their own" in text, text  # what to do about it
    assert issubclass(shmwin.GILRequiredWarning, RuntimeWarning)


def test_a_default_python_imports_shmwin_with_no_warning() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-W", "error", "-c", "import shmwin"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


WORKER = """
import json, os, sys, threading
import shmwin
window_name, limiter_name, clock_path, threads, adds, hits = sys.argv[1:7]
clock = shmwin.ManualClock(path=clock_path)  # time stands still: nothing expires mid-race
w = shmwin.Window.attach(window_name)
lim = shmwin.Limiter.attach(limiter_name, clock=clock)
start = threading.Barrier(int(threads))
admitted = []

def work():
    start.wait()  # every thread of this process writing at once
    mine = 0
    for i in range(int(adds)):
        w.add()
        if i < int(hits) and lim.hit("client"):
            mine += 1
    admitted.append(mine)

pool = [threading.Thread(target=work) for _ in range(int(threads))]
for t in pool:
    t.start()
for t in pool:
    t.join()
probe = getattr(sys, "_is_gil_enabled", None)
print(json.dumps({"admitted": sum(admitted), "gil": None if probe is None else probe(),
                  "stripes": sum(pid == os.getpid() for _, pid, _ in w.stripe_owners())}))
w.close(); lim.close()
"""


def test_threads_of_separately_started_processes_are_exact(make_name, tmp_path: Path) -> None:
    window_name, limiter_name = make_name("w"), make_name("l")
    clock_path = str(tmp_path / "clock")
    clock = shmwin.ManualClock(1_000 * S, path=clock_path)
    w = shmwin.Window(window_name, span="1h", fields=("ok",))
    lim = shmwin.Limiter(limiter_name, f"{LIMIT}/minute", clock=clock)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [window_name, limiter_name, clock_path, str(THREADS), str(ADDS), str(HITS)]
    children = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(WORKER), *args],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err
        reports.append(json.loads(out))
    try:
        assert w.total() == PROCESSES * THREADS * ADDS  # 64,000: no add lost between threads
        assert sum(r["admitted"] for r in reports) == LIMIT  # of 1,920 tries, exactly the limit
        assert not lim.hit("client")
        gil = {r["gil"] for r in reports}
        print(f"sys._is_gil_enabled() in the workers: {gil} (None: before 3.13, no such probe)")
        assert gil <= {True, None}  # a default build; a free-threaded one turns it on (above)
        # threads that raced to their process's first add share one stripe: before the fix, each
        # could claim one, and the extra rows' mutexes outlived close(): every worker died of SIGSEGV
        assert [r["stripes"] for r in reports] == [1] * PROCESSES
    finally:
        for x in (w, lim):
            x.close()
            x.unlink()
