"""A concurrency reset that fails or dies part way changes nothing, and one that succeeds gives
the new limit a segment made as a fresh open of it would be. Found by the red team of the
one-reset fix: the reset wrote its limit in place in the old segment before making the new one,
so a reset that could not make it (a full /dev/shm) or died making it left the new limit in
force in the old segment, and other processes took slots under it (48 past a limit of 2)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys

import pytest
from support.helpers import ROOT
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

import shmwin
from shmwin import Concurrency

pytestmark = pytest.mark.integration

DIES_MAKING_ITS_SEGMENT = """
import os, signal, sys
from shmwin.backends.shm.window import ShmWindow
from shmwin import Concurrency

create = ShmWindow.create.__func__

def dying(cls, name, *args, **kwargs):
    if ".moving-" in name:  # the reset's new segment, under its passing name
        os.kill(os.getpid(), signal.SIGKILL)
    return create(cls, name, *args, **kwargs)

ShmWindow.create = classmethod(dying)
Concurrency.attach(sys.argv[1]).set_limit(int(sys.argv[2]), on_change="reset")
"""


@pytest.mark.parametrize(("old", "new"), [(2, 5), (5, 2)], ids=["raised", "lowered"])
def test_a_reset_killed_making_its_segment_changes_nothing(name, old, new):
    """SIGKILL while the reset makes its new segment: the old segment, its limit and its slots
    stay as they were (no slot free past the old limit, none forgotten), and the name works on."""
    with Concurrency(name, old) as holder:
        assert all(holder.acquire("k", timeout=0) for _ in range(old))
        argv = [sys.executable, "-c", DIES_MAKING_ITS_SEGMENT, name, str(new)]
        proc = subprocess.run(argv, cwd=ROOT, timeout=60)
        assert proc.returncode == -9
        with Concurrency.attach(name) as other:
            assert (other.limit, other.count("k")) == (old, old)
            assert not other.acquire("k", timeout=0)  # the old slots still count, under the old limit
            other.set_limit(new, on_change="reset")  # the next reset goes through
            assert (other.limit, other.count("k")) == (new, 0)
        holder.release("k")  # in the old segment, counting nowhere
        assert sorted(n for n in shmwin.names() if n.startswith(name)) == [name]  # no passing segment left
        holder.unlink()


FULL_WHILE_OTHERS_TAKE = r"""
import os, subprocess, sys
import shmwin
from shmwin import Concurrency
from shmwin.backends.shm.window import ShmWindow

TAKE = "from shmwin import Concurrency; print(Concurrency.attach('x').acquire('k', timeout=0))"
c = Concurrency("x", 2, capacity=64)
assert c.acquire("k", timeout=0) and c.acquire("k", timeout=0)
st = os.statvfs("/dev/shm")
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
taken = []
create = ShmWindow.create.__func__

def another_process_takes_then_create(cls, name, *args, **kwargs):
    out = subprocess.run([sys.executable, "-c", TAKE], capture_output=True, text=True, check=True)
    taken.append(out.stdout.strip())  # while the reset is under way: which limit is in force?
    return create(cls, name, *args, **kwargs)

ShmWindow.create = classmethod(another_process_takes_then_create)
failed = 0
for _ in range(3):
    try:
        c.set_limit(50, on_change="reset")
    except shmwin.OutOfSpaceError:
        failed += 1
assert failed == 3, "a reset made its new segment in a full /dev/shm"
assert taken == ["False"] * 3, taken  # the old limit (2) in force all along
assert (c.limit, c.count("k")) == (2, 2), (c.limit, c.count("k"))
print("RESULT ok")
"""


@needs_namespace
def test_a_reset_that_does_not_fit_lets_no_slot_past_the_old_limit():
    """A reset to 50 that cannot make its new segment (a full /dev/shm), three times: another
    process asking for a slot while each is under way is refused (limit 2, 2 held)."""
    proc = run_in_namespace(python_argv(FULL_WHILE_OTHERS_TAKE), shm_size="1m", hidepid=None)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, describe(proc)


def _holds_one(name: str, answers, stop) -> None:
    with Concurrency.attach(name) as conc:
        answers.put(conc.acquire("k", timeout=0))
        stop.wait(60)


def _processes_admitted(name: str, processes: int) -> int:
    """How many of ``processes`` forked processes, each asking one slot of "k" and holding it, got one."""
    ctx = multiprocessing.get_context("fork")
    answers, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_holds_one, args=(name, answers, stop)) for _ in range(processes)]
    for proc in procs:
        proc.start()
    try:
        return sum(answers.get(timeout=60) for _ in procs)
    finally:
        stop.set()
        for proc in procs:
            proc.join(60)


@pytest.mark.parametrize("how", ["set_limit", "open"])
def test_a_reset_to_a_higher_limit_has_room_for_its_holders(name, how):
    """Limit 1 reset to 20: 12 processes asking one slot each all get one, as in a fresh open of
    limit 20. Before, the new segment kept the old one's holder entries (8 for limit 1): 8 got one."""
    with Concurrency(name, 1) as conc:
        if how == "set_limit":
            conc.set_limit(20, on_change="reset")
            assert _processes_admitted(name, 12) == 12
        else:
            with Concurrency(name, 20, on_change="reset"):
                assert _processes_admitted(name, 12) == 12
        assert conc.limit == 20
        conc.unlink()


def test_a_reset_keeps_holder_entries_its_opener_chose(name):
    """Opened with ``holders=16`` (chosen: limit 1's default is 8): a reset to 20 keeps 16
    entries, so an opener passing ``holders=16`` still attaches. (Entries equal to the old limit's
    default read as the default: they follow the new limit.)"""
    with Concurrency(name, 1, holders=16) as conc:
        conc.set_limit(20, on_change="reset")
        with Concurrency(name, 20, holders=16) as again:
            assert again.limit == 20
        with pytest.raises(shmwin.GeometryMismatchError, match="holders=16"):
            Concurrency(name, 20, holders=40)
        conc.unlink()
