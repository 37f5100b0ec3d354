"""A concurrency handle follows resets made by other processes whatever its threads and forks
do meanwhile, and a reset never silently becomes something else. Found by the red team of the
one-reset fix (rtconc F5-F9): threads of one handle read a segment another thread had just
closed (WindowClosedError on a handle nobody closed); a follow cut short (a fork, an exception)
left the handle bound to a retired segment, and acquire spun for ever; a reset that could not get
the mover's lock returned as a carry; a child forked while its parent held a segment file's lock
held it for life; one name's reset removed another name's segments."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading

import pytest
from support.helpers import ROOT

import shmwin
import shmwin.concurrency as concurrency_module
from shmwin import Concurrency
from shmwin.backends.shm.segment import path_of

pytestmark = pytest.mark.integration

RESETS = """
import sys
from shmwin import Concurrency
c = Concurrency.attach(sys.argv[1])
for i in range(int(sys.argv[2])):
    c.set_limit(2 + i % 2, on_change="reset")
"""


def test_threads_of_one_handle_read_it_across_resets_without_errors(name):
    """6 threads on one handle read limit, count, held and keys, and set the limit in place, while
    another process resets the segment 300 times: no call raises."""
    with Concurrency(name, 3) as conc:
        resetter = subprocess.Popen([sys.executable, "-c", RESETS, name, "300"], cwd=ROOT)
        errors: list[str] = []

        def job(call) -> None:
            while resetter.poll() is None:
                try:
                    call()
                except Exception as exc:  # every error counts against the handle
                    errors.append(f"{type(exc).__name__}: {exc}")

        calls = [lambda: conc.limit, lambda: conc.count("k"), lambda: conc.held("k"), conc.keys,
                 lambda: conc.set_limit(3), lambda: conc.try_acquire("k") and conc.release("k")]  # fmt: skip
        threads = [threading.Thread(target=job, args=(call,)) for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert resetter.wait() == 0
        assert errors == []
        assert conc.count("k") == 0 and not conc.closed
        conc.unlink()


def _cut_short_follow(conc: Concurrency, monkeypatch) -> None:
    """A follow interrupted after the old segment was marked retired, before the new one was
    bound (as an exception from a signal handler, or a fork by another thread, lands there)."""
    real = concurrency_module.ConcurrencyEngine

    def interrupted(window):
        monkeypatch.setattr(concurrency_module, "ConcurrencyEngine", real)
        raise KeyboardInterrupt("injected in the follow")

    monkeypatch.setattr(concurrency_module, "ConcurrencyEngine", interrupted)
    with pytest.raises(KeyboardInterrupt):
        conc.try_acquire("k")
    assert conc._seg.retired  # bound to the retired segment: the state the fix repairs


def test_a_follow_cut_short_is_finished_by_the_next_call(name, monkeypatch):
    with Concurrency(name, 2) as conc:
        subprocess.run([sys.executable, "-c", RESETS, name, "1"], cwd=ROOT, check=True, timeout=60)
        _cut_short_follow(conc, monkeypatch)
        assert conc.try_acquire("k") and conc.count("k") == 1  # before: spun for ever
        assert conc.limit == 2
        conc.release("k")
        conc.unlink()


def test_a_child_forked_mid_follow_acquires_in_the_new_segment(name, monkeypatch):
    with Concurrency(name, 2) as conc:
        subprocess.run([sys.executable, "-c", RESETS, name, "1"], cwd=ROOT, check=True, timeout=60)
        _cut_short_follow(conc, monkeypatch)
        pid = os.fork()
        if pid == 0:  # the child: exit code 0 if its acquire answers (with a slot) in the new segment
            ok = False
            try:
                ok = conc.acquire("k", timeout=0) and conc.count("k") == 1
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        conc.unlink()


HOLDS_THE_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_a_reset_that_cannot_get_the_movers_lock_says_so(name):
    """Another process holds the name's mover lock (a mover stopped by SIGSTOP, a debugger):
    a reset raises SegmentNotReadyError and changes nothing. Before, it returned as if done, the
    slots held still counting (a carry) and held() reading 0."""
    with Concurrency(name, 2) as conc:
        assert conc.acquire("k", timeout=0) and conc.acquire("k", timeout=0)
        argv = [sys.executable, "-c", HOLDS_THE_LOCK, path_of(name)]
        holder = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
            conc._opts = dataclasses.replace(conc._opts, ready_timeout=0.2)
            with pytest.raises(shmwin.SegmentNotReadyError, match="replacing it"):
                conc.set_limit(5, on_change="reset")
            assert (conc.limit, conc.count("k"), conc.held("k")) == (2, 2, 2)
        finally:
            holder.communicate("\n", timeout=60)
        conc.set_limit(5, on_change="reset")  # the lock free: the reset goes through
        assert (conc.limit, conc.count("k"), conc.held("k")) == (5, 0, 0)
        conc.release("k")
        conc.release("k")
        conc.unlink()


def test_a_child_forked_while_its_parent_holds_a_segment_lock_does_not_keep_it(name):
    """A child forked while a thread of its parent reads the limit under the segment file's shared
    lock (an opener does): once the parent lets go, a reset gets the lock at once, the child
    still alive. Before, the child held the lock for its whole life (every reset waited it out)."""
    with Concurrency(name, 2) as conc:
        assert conc.acquire("k", timeout=0)
        read, write = os.pipe()
        with conc._seg.engine.no_mover(5):
            pid = os.fork()
            if pid == 0:  # the child: lives until the parent is done
                os.close(write)
                os.read(read, 1)
                os._exit(0)
        os.close(read)
        try:
            conc._opts = dataclasses.replace(conc._opts, ready_timeout=0.5)
            conc.set_limit(4, on_change="reset")
            assert (conc.limit, conc.count("k")) == (4, 0)  # a reset: the slot held forgotten
        finally:
            os.close(write)
            os.waitpid(pid, 0)
        conc.release("k")
        conc.unlink()


@pytest.mark.parametrize("other", ["a name alike to 150 characters", "a name ending .moving-1-2"])
def test_a_reset_leaves_other_names_segments_alone(name, other):
    """A reset clears the passing segments dead movers of its name left; a live process's
    segment whose name reads like one (another name alike in its first 150 characters, in the
    middle of its own move; or a user's own name) stays."""
    alike_name = other.startswith("a name alike")
    mine = name + "x" * (155 - len(name)) if alike_name else name
    theirs = f"{mine[:150]}.moving-{os.getpid()}-7" if alike_name else f"{mine}.moving-1-2"
    dead = f"{mine[:150]}.moving-{2**22 + 7}-1"  # no such process (past pid_max's default)
    with Concurrency(mine, 2) as conc, Concurrency(theirs, 2) as alike, Concurrency(dead, 2):
        conc.set_limit(3, on_change="reset")
        assert alike.acquire("k", timeout=0)
        with Concurrency.attach(theirs) as again:
            assert again.limit == 2 and again.count("k") == 1
        assert dead not in shmwin.names()  # a dead mover's: cleared
        alike.release("k")
        for n in (mine, theirs, dead):
            shmwin.unlink(n)
