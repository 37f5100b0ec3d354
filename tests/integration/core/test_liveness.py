"""A stripe is never adopted while its owner lives, whatever /proc shows.

With /proc mounted ``hidepid=2`` and writers under two uids, each writer sees no trace of
the other in /proc. Liveness read from /proc took the other uid's live writer for dead:
both wrote one stripe, and 48,698-56,862 of 600,000 counts were lost. Liveness is now the
kernel's: each stripe's robust mutex is held by its owner's keeper thread.
"""

from __future__ import annotations

import os
import signal

import pytest
from support.rootenv import NOBODY, describe, needs_namespace, python_argv, run_in_namespace

from shmwin import Window

pytestmark = pytest.mark.integration

TWO_UIDS_UNDER_HIDEPID = """
import os, sys
from shmwin import Window
N = 200_000
w = Window("hidden", span=60, buckets=60, stripes=4, perm=0o666)
ready_r, ready_w = os.pipe()
go_r, go_w = os.pipe()

def writer(uid):
    if uid:
        os.setgroups([]); os.setgid(uid); os.setuid(uid)
    w.add(1)                       # claims a stripe
    os.write(ready_w, b"x")
    os.read(go_r, 1)               # everyone has claimed: write at once
    for _ in range(N - 1):
        w.add(1)
    os._exit(0)

pids = []
for uid in (0, NOBODY):           # root first: nobody claims while root's writer lives
    pid = os.fork()
    if pid == 0:
        writer(uid)
    os.read(ready_r, 1)
    pids.append(pid)
os.write(go_w, b"xx")
for pid in pids:
    assert os.waitpid(pid, 0)[1] == 0
rows = sorted(row for row, _, _ in w.stripe_owners())
print("rows", rows, "total", w.total())
assert len(set(rows)) == 2, rows
assert w.total() == 2 * N, w.total()
w.unlink()
""".replace("NOBODY", str(NOBODY))


@needs_namespace
def test_two_uids_under_hidepid_never_share_a_stripe():
    proc = run_in_namespace(python_argv(TWO_UIDS_UNDER_HIDEPID), hidepid=2, shm_size="8m")
    assert proc.returncode == 0, describe(proc)
    assert "total 400000" in proc.stdout


def test_a_killed_owners_stripe_is_adopted_with_its_counts(name):
    """The failure mode of kernel liveness is "slower", never "shared": a SIGKILLed owner's
    row is adopted (owner-dead), a live owner's never, and nothing counted is lost."""
    with Window(name, span=60, buckets=60, stripes=2) as w:
        pids = []
        for _ in range(2):  # two live owners take both stripes
            r, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                w.add(5)
                os.write(wr, b"x")
                signal.pause()
                os._exit(0)
            os.read(r, 1)
            pids.append(pid)
        assert sorted(row for row, _, alive in w.stripe_owners() if alive) == [1, 2]
        w.add(1)  # both stripes live: the shared row, under its lock
        assert w._backend._core.release_stripe() == 0
        os.kill(pids[0], signal.SIGKILL)
        os.waitpid(pids[0], 0)
        assert [alive for _, _, alive in w.stripe_owners()].count(False) == 1
        child = os.fork()
        if child == 0:  # a new writer adopts the dead owner's row, not the live one's
            w.add(7)
            rows = [row for row, pid, alive in w.stripe_owners() if pid == os.getpid() and alive]
            os._exit(0 if len(rows) == 1 else 1)
        assert os.waitpid(child, 0)[1] == 0
        assert w.total() == 5 + 5 + 1 + 7
        os.kill(pids[1], signal.SIGKILL)
        os.waitpid(pids[1], 0)
        w.unlink()
