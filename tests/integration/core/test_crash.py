"""Killed lock holders: nobody stalls, nothing that returned is lost, nothing hangs."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest
from support.helpers import stop_inside, wait_stopped

import shmwin
from shmwin import Window, _core

VICTIMS = 5


def _survivor(name: str, stop, done, max_gap_ns, slot: int) -> None:
    w = Window.attach(name)
    n, worst, last = 0, 0, time.monotonic_ns()
    while not stop.is_set():
        w.add(1, "survivor")
        n += 1
        now = time.monotonic_ns()
        worst, last = max(worst, now - last), now
    done[slot], max_gap_ns[slot] = n, worst
    w.close()


def _victim(name: str, progress, slot: int) -> None:
    w = Window.attach(name)
    while True:
        w.add(1, "victim")
        progress[slot] += 1  # after add() returned: this count must survive


def test_sigkill_in_locked_add_loop_loses_nothing_and_stalls_nobody(name):
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    done, max_gap = ctx.Array("q", 2, lock=False), ctx.Array("q", 2, lock=False)
    progress = ctx.Array("q", VICTIMS, lock=False)
    with Window(name, span="1h", fields=("survivor", "victim"), mode="locked") as w:
        survivors = [ctx.Process(target=_survivor, args=(name, stop, done, max_gap, i)) for i in range(2)]
        for p in survivors:
            p.start()
        for i in range(VICTIMS):
            victim = ctx.Process(target=_victim, args=(name, progress, i))
            victim.start()
            deadline = time.monotonic() + 30
            while progress[i] < 2_000 and time.monotonic() < deadline:
                time.sleep(0.01)  # let it get deep into its loop (not a time boundary)
            os.kill(victim.pid, signal.SIGKILL)
            victim.join()
            assert victim.exitcode == -signal.SIGKILL
        stop.set()
        for p in survivors:
            p.join(60)
            assert p.exitcode == 0
        totals = w.totals()
        assert totals["survivor"] == sum(done)
        # each victim may have died after its add() landed but before it counted it
        assert sum(progress) <= totals["victim"] <= sum(progress) + VICTIMS
        assert min(progress) >= 2_000
        assert max(max_gap) < 1.5e9, f"a survivor stalled for {max(max_gap) / 1e9:.2f}s"
        w.unlink()


def _die_holding_the_lock(name: str) -> None:
    w = Window.attach(name)
    _core.failpoint("add_locked", 1, signal.SIGKILL)  # dies after the first store of a locked add
    w.add(1)


@pytest.mark.failpoints
def test_holder_killed_inside_the_lock_is_recovered_at_once(name):
    ctx = mp.get_context("fork")
    with Window(name, mode="locked", lock_timeout=60) as w:
        w.add(1)
        p = ctx.Process(target=_die_holding_the_lock, args=(name,))
        p.start()
        p.join()
        assert p.exitcode == -signal.SIGKILL
        started, waits = time.monotonic(), _core.lock_waits()
        w.add(1)  # the kernel hands us the dead holder's lock (EOWNERDEAD)
        w.add(1)
        assert _core.lock_waits() == waits, "slept on the dead holder's lock"
        assert time.monotonic() - started < 30  # not the 60 s lock timeout, whatever the load
        assert 3 <= w.total() <= 4  # the victim's add may have landed before it died: never lost
        w.unlink()


@pytest.mark.failpoints
def test_a_live_holder_that_never_lets_go_is_a_timeout_not_a_hang(name):
    ctx = mp.get_context("fork")
    with Window(name, mode="locked", lock_timeout=0.6) as w:
        holding = ctx.Event()
        p = ctx.Process(target=stop_inside, args=(name, "add_locked", holding))
        p.start()
        assert holding.wait(30)
        wait_stopped(p.pid)  # stopped inside the section, holding the row lock
        started = time.monotonic()
        with pytest.raises(shmwin.LockTimeoutError, match="live thread"):
            w.add(1)
        assert 0.5 < time.monotonic() - started < 5
        assert w.total() == 0
        os.kill(p.pid, signal.SIGKILL)
        p.join()
        w.add(2)  # the holder is gone: the window works again
        assert w.total() == 2
        w.unlink()


LIMIT, KEYS = 25, 40


def _hitter(name: str, clock_path: str, admitted, seed: int) -> None:
    """Hit rotating keys for ever; count each admission only after hit() returned True."""
    import random

    lim = shmwin.Limiter.attach(name, clock=shmwin.ManualClock(path=clock_path))
    rng = random.Random(seed)
    while True:
        k = rng.randrange(KEYS)
        if lim.hit(f"client-{k}"):
            admitted[k] += 1


def test_random_sigkill_storm_over_rotating_keys_never_over_admits_or_hangs(name, tmp_path):
    """The issue's storm: workers hitting rotating keys are SIGKILLed at random instants
    (inside and outside sections, inserts included) and replaced. Time is frozen, so each
    key may admit at most LIMIT in all. Afterwards no key is over, none hangs, and the
    running totals match the buckets (repairs ran)."""
    import random

    clock_path = str(tmp_path / "clock")
    clock = shmwin.ManualClock(10**12, path=clock_path)
    ctx = mp.get_context("fork")
    admitted = ctx.Array("q", KEYS, lock=False)
    rng = random.Random(11)
    with shmwin.Limiter(name, f"{LIMIT}/minute", capacity=KEYS * 2, clock=clock, lock_timeout=5) as lim:
        workers = [ctx.Process(target=_hitter, args=(name, clock_path, admitted, i)) for i in range(4)]
        for p in workers:
            p.start()
        for kill in range(120):
            time.sleep(rng.uniform(0.0005, 0.01))
            victim = rng.randrange(len(workers))
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].join()
            workers[victim] = ctx.Process(target=_hitter, args=(name, clock_path, admitted, 100 + kill))
            workers[victim].start()
        for p in workers:
            os.kill(p.pid, signal.SIGKILL)
            p.join()
        reader = Window.attach(name, clock=clock)
        started = time.monotonic()
        for k in range(KEYS):
            key = f"client-{k}"
            counted = reader.total(key=key)
            assert admitted[k] <= counted <= LIMIT, (key, admitted[k], counted)
            assert lim.stats(key).used == counted  # totals repaired to what the buckets hold
            assert not lim.hit(key) or counted < LIMIT
        assert time.monotonic() - started < 5  # no key or lock hung
        assert sum(admitted) >= KEYS * LIMIT // 2  # the storm did real work
        reader.close()
        lim.unlink()
