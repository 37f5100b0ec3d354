"""The reserver: a large key table's next pages are got by a thread of this process ahead of
need (see "the reserver" in _core.c). It writes nothing in the segment, so what must hold is
that everything else does: every row a key takes is backed by memory (never a SIGBUS, in this
process or another), close() and fork() while it works lose nothing, a process killed with a
job in flight leaves a table others go on growing, and a full /dev/shm is still the
foreground's OutOfSpaceError."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time

import pytest
from support.helpers import ROOT, run_python
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

from shmwin import ManualClock, Window, _core
from shmwin.backends.shm.segment import path_of

pytestmark = pytest.mark.integration

S = 1_000_000_000
AHEAD_MIN_ROWS = 4096  # _core.c: tables this large have their next pages reserved ahead
ROW_BYTES = 4032  # Window(span=240, buckets=240, keyed=True): a row of ~4 KiB
GEOMETRY = dict(span=240, buckets=240, keyed=True)


def allocated(name: str) -> int:
    return os.stat(path_of(name)).st_blocks * 512


def keyed(name: str, **kw) -> Window:
    return Window(name, clock=ManualClock(1000 * S), **GEOMETRY, **kw)


def fill(w: Window, start: int, n: int) -> None:
    for i in range(start, start + n):
        w.add(i, key=f"k{i}")


def check(w: Window, n: int, step: int = 1) -> None:
    bad = [i for i in range(0, n, step) if w.total(key=f"k{i}") != i]
    assert not bad, f"{len(bad)} keys lost their counts, first {bad[:5]}"


READ_ALL = """
import sys
from shmwin import ManualClock, Window
name, n = sys.argv[1], int(sys.argv[2])
w = Window.attach(name, clock=ManualClock(1000 * 10**9))
bad = [i for i in range(n) if w.total(key=f"k{i}") != i]  # every row's pages, touched here
assert not bad, bad[:5]
w.add(1, key=f"k{n}")
w.close()
print("read", n)
"""


def test_a_large_table_is_reserved_ahead_and_every_row_is_backed(name):
    before = _core.reserver_counts()
    with keyed(name) as w:
        n = 3 * AHEAD_MIN_ROWS
        fill(w, 0, n)
        counts = _core.reserver_counts()
        # a job was asked for; whether its thread ran before the rows were needed is the
        # scheduler's call on a loaded machine (the foreground then does the work itself)
        assert counts["posted"] > before["posted"], f"no reserve was asked ahead: {counts}"
        assert allocated(name) >= n * ROW_BYTES  # the pages the rows are on are the segment's
        check(w, n)
        proc = run_python(READ_ALL, name, str(n))  # another process's page tables: no SIGBUS
        assert f"read {n}" in proc.stdout
        assert w.total(key=f"k{n}") == 1
        w.unlink()


@pytest.mark.parametrize("pause_s", [0, 0.0005, 0.005])
def test_close_while_the_reserver_works_loses_nothing(make_name, pause_s):
    """Closed right after a job was posted (cancelled), while it runs (waited for), or after
    it is done (let go); then the next table of this process grows as before."""
    for round_ in range(3):
        name = make_name(f"close{round_}")
        w = keyed(name)
        fill(w, 0, AHEAD_MIN_ROWS)
        posted = _core.reserver_counts()["posted"]
        i = AHEAD_MIN_ROWS
        while _core.reserver_counts()["posted"] == posted:  # the hit that posts the next job
            fill(w, i, 1)
            i += 1
            assert i < 4 * AHEAD_MIN_ROWS, "no job was ever posted"
        time.sleep(pause_s)
        w.close()
        with pytest.raises(Exception, match="closed"):
            w.add(1, key="after")
        again = Window.attach(name, clock=ManualClock(1000 * S))
        check(again, i, step=7)
        fill(again, i, 500)  # it grows on, in the pages the job got or not
        check(again, i + 500, step=7)
        again.close()
        Window.attach(name).unlink()


def _grow_in_child(name: str, start: int, n: int) -> int:
    w = Window.attach(name, clock=ManualClock(1000 * S))
    fill(w, start, n)
    w.add(1, key="shared")
    total = sum(w.total(key=f"k{i}") == i for i in range(start, start + n))
    w.close()
    return total


def test_fork_while_the_reserver_works(name):
    """Children forked with a job in flight have no reserver and no job of their own: each
    grows the table itself (and starts its own reserver), and nothing is lost."""
    with keyed(name) as w:
        fill(w, 0, AHEAD_MIN_ROWS + 50)
        ctx = mp.get_context("fork")
        with ctx.Pool(2) as pool:
            pending = pool.starmap_async(_grow_in_child, [(name, 10_000, 3000), (name, 20_000, 3000)])
            fill(w, AHEAD_MIN_ROWS + 50, 3000)
            assert pending.get(120) == [3000, 3000]
        assert w.total(key="shared") == 2
        n = AHEAD_MIN_ROWS + 3050
        check(w, n, step=3)
        assert all(w.total(key=f"k{i}") == i for i in range(10_000, 13_000, 11))
        assert all(w.total(key=f"k{i}") == i for i in range(20_000, 23_000, 11))
        assert len(w.keys()) == n + 6000 + 1
        w.unlink()


KILLED_WITH_A_JOB = """
import os, signal, sys
from shmwin import ManualClock, Window, _core
w = Window.attach(sys.argv[1], clock=ManualClock(1000 * 10**9))
posted = _core.reserver_counts()["posted"]
i = int(sys.argv[2])
while _core.reserver_counts()["posted"] == posted:
    w.add(i, key=f"k{i}")
    i += 1
print(i, flush=True)
os.kill(os.getpid(), signal.SIGKILL)  # the job just posted (or running): killed with it
"""


def test_a_process_killed_with_a_job_in_flight_leaves_a_table_others_grow(name):
    with keyed(name) as w:
        fill(w, 0, AHEAD_MIN_ROWS - 200)
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_WITH_A_JOB, name, str(AHEAD_MIN_ROWS - 200)],
            capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        assert proc.returncode == -signal.SIGKILL, describe(proc)
        n = int(proc.stdout.split()[0])
        check(w, n)
        fill(w, n, 2 * AHEAD_MIN_ROWS)  # through the killed process's chunk and past it
        n += 2 * AHEAD_MIN_ROWS
        check(w, n, step=5)
        assert f"read {n}" in run_python(READ_ALL, name, str(n)).stdout
        w.unlink()


FILL_A_SMALL_DEV_SHM = """
import shmwin
from shmwin import ManualClock, Window, _core
w = Window("big", span=240, buckets=240, keyed=True, clock=ManualClock(1000 * 10**9))
n = 0
try:
    while True:
        w.add(n, key=f"k{n}")
        n += 1
except shmwin.OutOfSpaceError as exc:
    assert exc.errno == 28 and "no room" in str(exc), exc
assert _core.reserver_counts()["posted"] > 0, _core.reserver_counts()  # (done/used: the scheduler's call)
bad = [i for i in range(n) if w.total(key=f"k{i}") != i]
assert not bad, bad[:5]
w.add(1, key="k0")  # a known key goes on counting
assert w.total(key="k0") == 1
print("fit", n)
"""


@needs_namespace
def test_a_full_dev_shm_is_still_the_foregrounds_out_of_space_error():
    """In a 64 MiB tmpfs, 4 KiB rows: the reserver works while there is room to spare and
    stands back near the end, so the table fills the tmpfs as it would without it."""
    proc = run_in_namespace(python_argv(FILL_A_SMALL_DEV_SHM), shm_size="64m", hidepid=None)
    assert proc.returncode == 0, describe(proc)
    fit = int(proc.stdout.split("fit ")[1])
    # 64 MiB over 4 KiB rows, less the index and the last chunk that did not fit
    assert 64 * 2**20 * 0.6 / ROW_BYTES <= fit <= 64 * 2**20 / ROW_BYTES, fit
