"""A concurrency reset (``on_change="reset"``) under the handles that hold its slots: each slot
is given back in the segment it was taken in, whichever thread or task gives it back; a handle
keeps a replaced segment mapped only while it holds a slot there; a reset that fails changes
nothing. The reset is another process's (``python -c``), as an operator's ``shmwin set`` is."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
from support.helpers import ROOT
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

import shmwin
from shmwin import Concurrency

pytestmark = pytest.mark.integration


def reset(name: str, limit: int) -> None:
    """Another process resets the name's segment to ``limit`` (a new, empty segment)."""
    code = f"import shmwin\nshmwin.Concurrency.attach({name!r}).set_limit({limit}, on_change='reset')"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def other_acquires(name: str, key: str) -> bool:
    """Does another process get a slot of ``key`` now (it keeps none: it exits)?"""
    code = f"from shmwin import Concurrency\nprint(Concurrency.attach({name!r}).acquire({key!r}, timeout=0))"
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60, capture_output=True)
    return out.stdout.decode().strip() == "True"


def mapped_deleted(name: str) -> int:
    """Replaced (renamed over, so deleted) segments of ``name`` this process maps: their inodes."""
    with open("/proc/self/maps") as maps:
        lines = [line.split() for line in maps if line.rstrip().endswith(f".{name} (deleted)")]
    return len({fields[4] for fields in lines if fields[5].startswith("/dev/shm/")})


def test_threads_sharing_a_handle_across_resets_give_every_slot_back(name):
    """8 threads, one handle, acquire and release in a loop while another process resets the
    segment: no NotHeldError, and once they are done the key holds no slot. Before, each thread
    that met the reset reopened and rebound on its own: the slots of the other new segments were
    neither current nor remembered (1-4 of 4 held for ever, NotHeldError on release)."""
    with Concurrency(name, 4, processes=16) as conc:
        errors: list[str] = []
        go = threading.Event()

        def job() -> None:
            go.wait()
            for _ in range(300):
                try:
                    if conc.acquire("k", timeout=0.05):
                        conc.release("k")
                except Exception as exc:  # every error counts against the handle
                    errors.append(type(exc).__name__)

        threads = [threading.Thread(target=job) for _ in range(8)]
        for t in threads:
            t.start()
        go.set()
        for _ in range(3):  # while they work
            reset(name, 4)
        for t in threads:
            t.join()
        assert errors == []
        assert conc.count("k") == 0 and conc.held("k") == 0
        assert [other_acquires(name, "k") for _ in range(2)] == [True, True]
        assert mapped_deleted(name) == 0  # every replaced segment given back: it held nothing there
        conc.unlink()


def test_a_release_from_before_a_reset_never_frees_a_slot_taken_after_it(name):
    """Slot 1 taken before a reset to limit 1, slot 2 after it; slot 1's release goes to the old
    segment (counting nowhere): slot 2 still counts, and another process is refused. Before, the
    release freed slot 2 in the new segment, and a second holder came in, limit 1."""
    with Concurrency(name, 2) as conc:
        assert conc.acquire("k", timeout=0)  # slot 1
        reset(name, 1)
        assert conc.acquire("k", timeout=0) and conc.count("k") == 1  # slot 2, in the new segment
        conc.release("k")  # slot 1's holder is done
        assert conc.count("k") == 1 and conc.held("k") == 1
        assert not other_acquires(name, "k")  # limit 1: slot 2 is inside
        conc.release("k")  # slot 2's
        assert conc.count("k") == 0 and other_acquires(name, "k")
        with pytest.raises(shmwin.NotHeldError):
            conc.release("k")
        conc.unlink()


def test_an_async_hold_from_before_a_reset_gives_back_its_own_slot(name):
    """Request 1 inside before a reset to limit 1, request 2 after; request 1 ends first: request
    2's slot still counts, so a third is refused while request 2 runs."""
    conc = Concurrency(name, 2)

    async def main() -> list[str]:
        seen: list[str] = []
        first_in, first_out, second_in, second_out = (asyncio.Event() for _ in range(4))

        async def request(entered: asyncio.Event, leave: asyncio.Event) -> None:
            async with conc.hold_async("t", timeout=0):
                entered.set()
                await leave.wait()

        one = asyncio.create_task(request(first_in, first_out))
        await first_in.wait()
        await asyncio.to_thread(reset, name, 1)
        two = asyncio.create_task(request(second_in, second_out))
        await second_in.wait()
        first_out.set()
        await one  # request 1 gave its slot back
        try:
            async with conc.hold_async("t", timeout=0):
                seen.append("third admitted")
        except shmwin.ConcurrencyLimitError:
            seen.append("third refused")
        seen.append(f"count {conc.count('t')}")
        second_out.set()
        await two
        seen.append(f"count {conc.count('t')}")
        return seen

    try:
        assert asyncio.run(main()) == ["third refused", "count 1", "count 0"]
    finally:
        conc.unlink()
        conc.close()


def test_a_replaced_segment_stays_mapped_only_while_a_slot_is_held_there(name):
    """A handle follows a reset at its next call: the old segment is unmapped at once if it holds
    nothing there, else when its last slot there is given back. Before, every reset left the old
    segment mapped in every handle until close() (ENOMEM after 1768 resets of 2000 keys)."""
    with Concurrency(name, 3) as conc:
        assert conc.acquire("a", timeout=0)
        reset(name, 3)
        assert conc.count("b") == 0  # follows
        assert mapped_deleted(name) == 1  # slot "a" is held there
        conc.release("a")
        assert mapped_deleted(name) == 0
        for _ in range(3):
            reset(name, 3)
            assert conc.count("a") == 0 and mapped_deleted(name) == 0  # held nothing there
        conc.unlink()


def test_a_forked_child_follows_a_reset_without_its_parents_slots(name):
    """A child forked while its parent holds a slot in a segment later reset: the child holds none
    of them (its release is NotHeldError), and it keeps no replaced segment mapped."""
    with Concurrency(name, 2) as conc:
        assert conc.acquire("k", timeout=0)
        pid = os.fork()
        if pid == 0:  # the child: exit code 0 if all holds
            ok = False
            try:
                reset(name, 2)
                ok = conc.count("k") == 0 and conc.acquire("k", timeout=0) and mapped_deleted(name) == 0
                conc.release("k")
                try:
                    conc.release("k")
                    ok = False
                except shmwin.NotHeldError:
                    pass
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        conc.release("k")  # the parent's, in the old segment
        assert conc.count("k") == 0 and mapped_deleted(name) == 0
        conc.unlink()


FULL = r"""
import os
import shmwin
from shmwin import Concurrency

c = Concurrency("x", 3, capacity=64)
other = Concurrency.attach("x")
assert c.acquire("k", timeout=0) and other.acquire("k", timeout=0)
st = os.statvfs("/dev/shm")
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
try:
    c.set_limit(1, on_change="reset")
except shmwin.OutOfSpaceError:
    pass
else:
    raise AssertionError("a reset made its new segment in a full /dev/shm")
assert (c.limit, other.limit) == (3, 3), (c.limit, other.limit)  # as it was: nothing changed
assert c.acquire("k", timeout=0) and c.count("k") == 3  # the slots held still count, limit 3
assert sorted(shmwin.names()) == ["x"], shmwin.names()  # no passing segment left
os.close(fd)
os.unlink("/dev/shm/filler")
c.set_limit(1, on_change="reset")
assert (c.limit, other.limit, c.count("k")) == (1, 1, 0)
print("RESULT ok")
"""


@needs_namespace
def test_a_reset_that_does_not_fit_changes_nothing():
    """A reset whose new segment does not fit in /dev/shm raises OutOfSpaceError and leaves the
    limit as it was. Before, the limit was written in place first (3 -> 1), then the move failed."""
    proc = run_in_namespace(python_argv(FULL), shm_size="1m", hidepid=None)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, describe(proc)


HOLDER = """
import sys
from shmwin import Concurrency
c = Concurrency({name!r}, {limit}, on_change="reset")
assert all(c.acquire("k", timeout=0) for _ in range({limit}))
print("holding", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize("where", ["before-the-mover-attaches", "before-the-move-locks"])
def test_two_openers_resetting_at_once_make_one_reset(name, monkeypatch, where):
    """Two workers of a deploy open with the new limit and ``on_change="reset"`` at once: both
    found the old limit. The other one's reset lands just before ours (at ``where``), and it
    takes all 3 slots of the new limit: ours must not reset again (forgetting those 3) but find
    it done. Before, the second opener moved the first one's new segment too: 4 held, limit 3
    (real gunicorn, 3 workers HUPped under load)."""
    import shmwin.concurrency as module

    old = Concurrency(name, 4)
    holder: list[subprocess.Popen[str]] = []

    def their_reset() -> None:
        if not holder:  # once: another process resets to 3 and holds the 3 slots
            argv = [sys.executable, "-c", HOLDER.format(name=name, limit=3)]
            holder.append(
                subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            )
            assert holder[0].stdout is not None and holder[0].stdout.readline().strip() == "holding"

    if where == "before-the-mover-attaches":
        real = module.ShmWindow

        class Mover:  # the module's ShmWindow: its reset's mover is the one attach it makes
            @staticmethod
            def attach(*args):
                their_reset()
                return real.attach(*args)

        monkeypatch.setattr(module, "ShmWindow", Mover)
    else:
        move = module.live.move
        monkeypatch.setattr(module.live, "move", lambda *a, **k: (their_reset(), move(*a, **k))[1])
    try:
        with Concurrency(name, 3, on_change="reset") as ours:
            assert holder, "the race was not staged"
            assert ours.limit == 3 and ours.count("k") == 3
            assert not ours.try_acquire("k")  # the 3 slots of the other process's reset count
            assert not other_acquires(name, "k")
    finally:
        for proc in holder:
            proc.communicate("\n", timeout=60)
        old.close()
        shmwin.unlink(name)
