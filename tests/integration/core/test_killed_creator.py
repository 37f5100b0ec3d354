"""A process SIGKILLed while it creates a segment leaves nothing behind: the next open of the
name creates it at once and counts (it used to find a half-built segment, wait 5 s for its
magic, then raise SegmentNotReadyError until someone ran ``shmwin rm``: red team rtwin, 14 of
40 creators killed at random moments).

The creator is a real ``python -c`` process stopped inside ``Segment.create`` at each of its
steps (handing the file to its owner, reserving its pages, initialising it, just before it
names it) and SIGKILLed there; then other processes open the name."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from support.helpers import ROOT, run_python

import shmwin
from shmwin import Limiter, Window
from shmwin.backends.shm import segment

# the child stops at STEP (prints "stopped", then sleeps) and is killed there
CREATOR = """
import sys, time
from shmwin.backends.shm import segment
kind, name, step = sys.argv[1:4]

def stop_before(real):
    def stopped(*args, **kwargs):
        print("stopped", flush=True)
        time.sleep(600)
        return real(*args, **kwargs)
    return stopped

if step == "init":  # the initialiser runs with the file sized and reserved
    real_create = segment.Segment.create.__func__
    def create(cls, name, size, perm, init, **kw):
        return real_create(cls, name, size, perm, stop_before(init), **kw)
    segment.Segment.create = classmethod(create)
else:
    setattr(segment, step, stop_before(getattr(segment, step)))
if kind == "window":
    from shmwin import Window
    Window(name, span=60, buckets=60, fields=("a", "b"))
else:
    from shmwin import Limiter
    Limiter(name, "5/minute")
"""
RACER = """
import sys
from shmwin import Window
w = Window(sys.argv[1], span=60)
w.add()
print(w.total())
"""
STEPS = ["_give", "_reserve", "init", "_name_it"]


def _kill_while_creating(kind: str, name: str, step: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", CREATOR, kind, name, step], env=env,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "stopped", f"the creator never reached {step}"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL


def _left(name: str) -> list[str]:
    stem = os.path.basename(segment.path_of(name))
    return [e for e in os.listdir(segment.SHM_DIR) if e.startswith(stem)]


@pytest.mark.parametrize("step", STEPS)
def test_a_window_creator_killed_at_any_step_leaves_nothing_and_the_next_open_counts(name, step):
    _kill_while_creating("window", name, step)
    assert _left(name) == [] and name not in shmwin.names()
    with Window(name, span=60, buckets=60, fields=("a", "b"), ready_timeout=0.5) as w:
        w.add(2, "a")
        # another process, attaching by name, sees the count at once
        out = run_python("import sys; from shmwin import Window\n"
                         "w = Window.attach(sys.argv[1]); print(w.totals()['a'])", name)  # fmt: skip
        assert out.stdout.strip() == "2"
        w.unlink()


@pytest.mark.parametrize("step", STEPS)
def test_a_limiter_creator_killed_at_any_step_leaves_nothing_and_the_limit_holds(name, step):
    _kill_while_creating("limiter", name, step)
    assert _left(name) == []
    with Limiter(name, "5/minute", ready_timeout=0.5) as lim:
        assert [lim.hit("k") for _ in range(6)] == [True] * 5 + [False]
        lim.unlink()


def test_two_creators_racing_one_name_make_one_segment_and_share_it(name):
    """The name is given only once the segment is whole: of creators racing, one names its
    segment and the others attach to it (WindowExistsError inside, never a second segment)."""
    code = RACER
    procs = [subprocess.Popen([sys.executable, "-c", code, name], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]  # fmt: skip
    totals = [int(p.communicate(timeout=60)[0]) for p in procs]
    try:
        assert all(p.returncode == 0 for p in procs)
        assert all(1 <= t <= 6 for t in totals), totals  # each saw its own add, at least
        assert _left(name) == [os.path.basename(segment.path_of(name))]
        with Window.attach(name) as w:
            assert w.total() == 6  # one window: no add went to a segment that lost the race
    finally:
        shmwin.unlink(name)
