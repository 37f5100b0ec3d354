"""Attacks on the key cache through time and processes: a table reallocated or dropped while a
hit waits on a row lock (another thread, a signal handler, close()), the references it holds,
fork and spawn, threads churning the table, a clock that runs Python inside the call, forked
workers with stale inherited caches. The harness: tests/support/keycache.py."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.helpers import wait_stopped
from support.keycache import RATE, T0, Text, copy_of, one_tag_and_place, read_elsewhere, read_here, variants
from support.workers import limiter_hits_by_copies

import shmwin
from shmwin import Limiter, ManualClock, _core

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]


# -- a table reallocated (or dropped) while a hit waits on a row lock ----------------------------


def _holder(name: str, clock_path: str, key: str, ready) -> None:
    """Child: stop (SIGSTOP) inside the hit section of ``key``, holding its row lock; on
    SIGCONT finish that hit and exit."""
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path))
    ready.set()
    _core.failpoint("hit", 1, signal.SIGSTOP)
    assert lim.hit(key)
    os._exit(0)


def start_holder(name: str, clock_path, key: str = "k") -> mp.Process:
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_holder, args=(name, str(clock_path), key, ready))
    p.start()
    assert ready.wait(30)
    wait_stopped(p.pid)
    return p


def lock_of(lim: Limiter, key: str) -> int:
    core = lim._backend._core
    slot, _ = core.find(key)
    return slot % core.layout["n_key_locks"]


class Telling:
    """A clock (a shared manual one) that tells when a given thread reads it: inside its call."""

    def __init__(self, clock: ManualClock):
        self.clock = clock
        self.thread: threading.Thread | None = None
        self.read = threading.Event()

    def __call__(self) -> int:
        if threading.current_thread() is self.thread:
            self.read.set()
        return self.clock()


def wait_blocked(told: Telling, body: str) -> None:
    """Until told.thread is blocked in the native wait of its call: it read the clock (inside
    the call, after enter()), and its newest frame is ``body`` again, not the clock's. Between
    the clock and the lock's wait the call never gives the GIL up, so seeing that frame (we
    hold the GIL) means it is waiting, the GIL released."""
    import time

    assert told.thread is not None and told.thread.ident is not None
    deadline = time.monotonic() + 30
    while not (told.read.is_set() and sys._current_frames()[told.thread.ident].f_code.co_name == body):
        assert time.monotonic() < deadline and told.thread.is_alive()
        time.sleep(0.001)


def keys_off_lock(lim: Limiter, avoid: str, n: int, tag: str) -> list[str]:
    """n keys, made now by another Core (each counted once), none in a row of ``avoid``'s lock
    (the others made are cleared)."""
    other = Limiter.attach(lim.name, clock=ManualClock(T0))
    try:
        made = [f"{tag}-{i}" for i in range(n + n // 4)]
        for key in made:
            assert other.hit(key)
        kept = [k for k in made if lock_of(other, k) != lock_of(other, avoid)][:n]
        for key in set(made) - set(kept):
            other.clear(key)
        return kept
    finally:
        other.close()


@contextmanager
def k_held_elsewhere(
    name: str, tmp_path: Path, tag: str
) -> Iterator[tuple[Limiter, ManualClock, Telling, list[str], str, mp.Process]]:
    """A limiter (its clock told, under a ManualClock of a file) whose "k" is counted once, 2999
    keys of other locks made by another Core (``keys_off_lock``), one more key kept aside
    (``last``), and a process holding k's row lock, stopped (``start_holder``): (limiter, clock,
    told, keys, last, holder). The limiter is closed after the test (which unlinks it)."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    told = Telling(clock)
    with Limiter(name, RATE, clock=told, decisions=False) as lim:
        assert lim.hit("k")
        keys = keys_off_lock(lim, "k", 3000, tag)
        last = keys.pop()
        yield lim, clock, told, keys, last, start_holder(name, clock_path)


@pytest.mark.failpoints
@pytest.mark.parametrize("clear_it", [False, True])
def test_a_thread_waiting_on_a_row_lock_survives_the_table_grown_and_dropped(name, tmp_path, clear_it):
    """A thread's hit of "k" waits on k's row lock (another process stopped holding it) with
    the cache's entry read; meanwhile this process's main thread grows the table to 4096
    entries, then clears those keys and drops the table (churn), and maybe another thread
    clears "k" while both wait. The waiting hit then counts exactly once, on "k", never through
    the old table (the sanitizer job sees any read of it)."""
    with k_held_elsewhere(name, tmp_path, "grow") as (lim, clock, told, keys, last, holder):
        core = lim._backend._core
        threads: list[threading.Thread] = []
        errors: list[BaseException] = []

        def hit_k() -> None:
            try:
                assert lim.hit("k")
            except BaseException as e:
                errors.append(e)

        def clear_k() -> None:
            try:
                lim.clear("k")
            except BaseException as e:
                errors.append(e)

        try:
            threads.append(threading.Thread(target=hit_k))
            told.thread = threads[0]
            threads[0].start()
            wait_blocked(told, "hit_k")  # its entry for "k" read, waiting on k's row lock
            for key in keys:  # found in the index: the table grows from 64 to 4096 entries
                assert lim.hit(key)
            assert core.cached == len(keys) + 1
            for key in keys:
                lim.clear(key)
            assert lim.hit(last)  # 3000 entries, 3 live keys: the churn rule drops the table
            assert core.cached == 1
            if clear_it:  # waits on k's lock too: which of the two goes first is the kernel's
                threads.append(threading.Thread(target=clear_k))
                threads[1].start()
            assert threads[0].is_alive()  # still waiting: the holder holds k's row lock
            os.kill(holder.pid, signal.SIGCONT)
            holder.join(30)
            assert holder.exitcode == 0
            for t in threads:
                t.join(30)
                assert not t.is_alive()
            assert not errors, errors
        finally:
            if holder.is_alive():
                os.kill(holder.pid, signal.SIGKILL)
                holder.join()
        used = read_here(name, clock(), ["k", keys[0], keys[-1], last])
        assert used[1:] == [0, 0, 2]
        assert used[0] in ((0, 1) if clear_it else (3,)), used
        lim.unlink()


@pytest.mark.failpoints
@pytest.mark.parametrize("clear_it", [False, True])
def test_a_signal_handler_hitting_other_keys_while_a_hit_waits_on_its_row_lock(name, tmp_path, clear_it):
    """The main thread's hit of "k" (cached) waits on k's row lock, held by a stopped process.
    A signal handler runs inside that wait and hits 3000 other keys of this Limiter (the table
    grows to 4096 entries), clears them and drops the table (churn), lets the holder finish,
    and maybe clears "k". The interrupted hit then counts exactly once on "k"."""
    with k_held_elsewhere(name, tmp_path, "sig") as (lim, clock, told, keys, last, holder):
        core = lim._backend._core
        state: dict[str, object] = {"ran": False, "sizes": []}
        handled = threading.Event()
        errors: list[BaseException] = []

        def handler(signum, frame) -> None:
            # inside the hit's wait: it read the clock, and the frame it runs in is the test's
            # (not the clock's); else the sender tries again. And never twice.
            if not told.read.is_set() or frame is None or frame.f_code is not this or state["ran"]:
                return
            state["ran"] = True  # a handler runs again at any bytecode of this one
            try:
                sizes = state["sizes"]
                assert isinstance(sizes, list)
                for key in keys:
                    assert lim.hit(key)
                sizes.append(core.cached)
                for key in keys:
                    lim.clear(key)
                assert lim.hit(last)
                sizes.append(core.cached)
                os.kill(holder.pid, signal.SIGCONT)
                holder.join(30)
                if clear_it:
                    lim.clear("k")
            except BaseException as e:
                errors.append(e)
            handled.set()

        def sender() -> None:
            while not handled.is_set():
                os.kill(os.getpid(), signal.SIGUSR1)
                handled.wait(0.05)

        this = sys._getframe().f_code
        told.thread = threading.current_thread()
        was = signal.signal(signal.SIGUSR1, handler)
        t = threading.Thread(target=sender)
        try:
            t.start()
            assert lim.hit("k")
            told.thread = None
        finally:
            handled.set()
            t.join()
            signal.signal(signal.SIGUSR1, was)
            if holder.is_alive():
                os.kill(holder.pid, signal.SIGKILL)
                holder.join()
        assert not errors, errors
        assert holder.exitcode == 0
        assert state["sizes"] == [len(keys) + 1, 1]  # grown to 3001 entries, then dropped
        used = read_here(name, clock(), ["k", keys[0], last])
        assert used == [1 if clear_it else 3, 0, 2], used
        lim.unlink()


@pytest.mark.failpoints
def test_close_while_a_hit_waits_on_a_row_lock_releases_the_cache_once(name, tmp_path):
    """close() while another thread's hit waits: the table is kept (a call is inside), the
    waiting hit fails closed and counts nothing, and the cache's references to the keys go
    as that call leaves, not only once the Core does."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    told = Telling(clock)
    lim = Limiter(name, RATE, clock=told, decisions=False)
    kept, control = copy_of("kept-key"), copy_of("kept-key")  # control: never given to shmwin
    assert refs_beyond(kept, control) == 0
    assert lim.hit(kept) and lim.hit("k")
    assert refs_beyond(kept, control) == 1  # the cache's reference
    holder = start_holder(name, clock_path)
    outcome: list[object] = []
    box = [lim]  # the waiter's only way to the Limiter: emptied before the Core must go

    def waiter() -> None:
        try:
            outcome.append(box[0].hit("k"))
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=waiter)
    told.thread = t
    try:
        t.start()
        wait_blocked(told, "waiter")  # inside the call: close() must keep the table
        lim.close()
        assert refs_beyond(kept, control) == 1  # a call is inside: the table stays
        os.kill(holder.pid, signal.SIGCONT)
        holder.join(30)
        t.join(30)
    finally:
        if holder.is_alive():
            os.kill(holder.pid, signal.SIGKILL)
            holder.join()
    assert len(outcome) == 1
    assert isinstance(outcome[0], shmwin.WindowClosedError), outcome  # closed while it waited
    core = lim._backend._core
    assert core.cached == 0 and refs_beyond(kept, control) == 0  # the last call out dropped it
    with pytest.raises(shmwin.WindowClosedError):
        lim.hit("k")
    del lim, core
    box.clear()
    gc.collect()
    assert refs_beyond(kept, control) == 0  # the Core is gone: its table with it
    used = read_here(name, clock(), ["k", "kept-key"])
    assert used == [2, 1]  # "k": its first hit and the holder's; the closed one counted nothing
    Limiter.attach(name).unlink()


# -- references: the cache holds keys, and lets them go ------------------------------------------


def refs_of(*objs: object) -> list[int]:
    """Each object's reference count, all measured alike."""
    return [sys.getrefcount(o) for o in objs]


def refs_beyond(obj: object, control: object) -> int:
    """The references to ``obj`` beyond those to ``control``, a like object that shmwin never saw,
    measured together: what the caller's own loads add cancels out. (CPython 3.14 borrows a
    local's reference at some loads and takes one at others: `sys.getrefcount(kept)` counted 1
    before a try/finally and 2 after it, with the cache empty.)"""
    mine, theirs = refs_of(obj, control)
    return mine - theirs


def test_the_cache_holds_one_reference_per_key_and_lets_it_go(name, tmp_path):
    """A cached key is held once (new equal objects add nothing, a cleared key is still held),
    long keys and subclasses never; the churn rule and close() let every key go; keys whose last
    reference was the cache, and new equal ones after the GC, count on their own keys."""
    clock = ManualClock(T0)
    lim = Limiter(name, RATE, clock=clock, decisions=False)
    held, long_key, sub = copy_of("held-key"), "L" * 129, Text("sub-key")
    refs = refs_of(held, long_key, sub)
    for _ in range(3):
        assert lim.hit(held) and lim.hit(copy_of(held)) and lim.hit(long_key) and lim.hit(sub)
    assert refs_of(held, long_key, sub) == [refs[0] + 1, refs[1], refs[2]]
    lim.clear(held)  # forgotten (generation 0), still held
    assert refs_of(held) == [refs[0] + 1]
    for i in range(1000):  # temporaries: their only reference left is the cache
        assert lim.hit(f"tmp-{i}", 1 + i % 3)
    gc.collect()
    for i in range(1000):
        assert lim.hit(f"tmp-{i}", 1)
    assert read_here(name, clock(), [f"tmp-{i}" for i in range(1000)]) == [2 + i % 3 for i in range(1000)]
    for i in range(1000):  # few live keys, many entries: the churn rule drops the table
        lim.clear(f"tmp-{i}")
    for i in range(300):
        assert lim.hit(f"churn-{i}")
        lim.clear(f"churn-{i}")
    assert refs_of(held) == [refs[0]]
    assert lim.hit(held)
    assert refs_of(held) == [refs[0] + 1]
    lim.close()
    assert refs_of(held) == [refs[0]]  # close() with no call inside: the table goes
    assert read_here(name, clock(), ["held-key", "L" * 129, "sub-key"]) == [1, 3, 3]
    Limiter.attach(name).unlink()


# -- fork and spawn -------------------------------------------------------------------------------


def test_a_forked_child_uses_the_inherited_cache_and_the_parent_its_stale_one(name, tmp_path):
    """The parent caches 2000 keys; another Core clears 500 of them and gives their rows to
    other keys before the fork. The child hits every key with the inherited objects and new
    ones, clears 500 more and makes 500 keys; the parent hits every key again with its cache,
    stale for 1000 of them. Every count exact."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    keys = [f"fk-{i}" for i in range(2000)]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        for key in keys:
            assert lim.hit(key)
        other = Limiter.attach(name, clock=clock)
        for key in keys[1500:]:
            other.clear(key)
        for i in range(500):
            assert other.hit(f"other-{i}")
        other.close()

        def child() -> None:
            ok = lim._backend._core.cached == 2000
            for key in keys:
                ok &= lim.hit(key) and lim.hit(copy_of(key))
            for key in keys[:500]:
                lim.clear(key)
            for i in range(500):
                ok &= lim.hit(f"child-{i}")
            os._exit(0 if ok else 3)

        p = mp.get_context("fork").Process(target=child)
        p.start()
        p.join(60)
        assert p.exitcode == 0
        for key in keys:
            assert lim.hit(key)
        got = read_elsewhere(name, clock(), [*keys, "other-0", "other-499", "child-0", "child-499"], tmp_path)
        assert got[:500] == [1] * 500
        assert got[500:1500] == [4] * 1000
        assert got[1500:2000] == [3] * 500
        assert got[2000:] == [1, 1, 1, 1]
        lim.unlink()


def test_spawned_processes_and_this_one_hit_the_same_keys_through_their_caches(name, tmp_path):
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    keys = [f"sp-{i}" for i in range(300)] + ["é" * 128, "x" * 129, ""]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=limiter_hits_by_copies, args=(name, str(clock_path), keys, 5))
            for _ in range(2)
        ]
        for p in procs:
            p.start()
        for _ in range(5):
            for key in keys:
                assert lim.hit(key)
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        assert read_elsewhere(name, clock(), keys, tmp_path) == [15] * len(keys)
        lim.unlink()


# -- threads ---------------------------------------------------------------------------------------


def test_threads_hitting_hot_keys_while_others_grow_and_churn_the_table(name, tmp_path):
    """Four threads hit four hot keys while two others insert and clear thousands of keys of
    the same Limiter (the table grows, is dropped, grows again) and another process hits the
    same hot keys (their row locks are contended): every hot count exact."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    hot = [f"hot-{i}" for i in range(4)]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        p = mp.get_context("fork").Process(
            target=limiter_hits_by_copies, args=(name, str(clock_path), hot, 1500)
        )
        p.start()
        errors: list[BaseException] = []

        def hitter() -> None:
            try:
                for i in range(1000):
                    for key in hot:
                        assert lim.hit(key if i % 2 else copy_of(key))
            except BaseException as e:
                errors.append(e)

        def churner(tag: str) -> None:
            try:
                for i in range(3000):
                    assert lim.hit(f"{tag}-{i}", 2)
                    if i % 3:
                        lim.clear(f"{tag}-{i}")
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=hitter) for _ in range(4)]
        threads += [threading.Thread(target=churner, args=(t,)) for t in ("ca", "cb")]
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        finally:
            sys.setswitchinterval(old)
        p.join(300)
        assert not errors, errors
        assert p.exitcode == 0
        kept = [f"ca-{i}" for i in range(0, 3000, 3)] + [f"cb-{i}" for i in range(0, 3000, 3)]
        got = read_elsewhere(name, clock(), hot + kept + ["ca-1", "cb-2"], tmp_path)
        assert got == [4 * 1000 + 1500] * 4 + [2] * len(kept) + [0, 0]
        lim.unlink()


# -- a clock that runs Python inside the call, before its key is looked up ------------------------


def test_a_clock_that_churns_the_table_or_closes_inside_a_hit(name):
    """The clock is Python, called inside hit() before the key is looked up: here it clears
    the very key being hit and churns the table (grown, then dropped), or closes the Limiter.
    The hit counts once on its key, or fails closed counting nothing; the table's references
    go with the Core."""
    manual = ManualClock(T0)
    plan: list[str] = []
    box: list[Limiter] = []

    def clock() -> int:
        if plan:
            lim = box[0]
            what = plan.pop()
            if what == "churn":
                lim.clear("k")
                for i in range(600):
                    assert lim.hit(f"c-{i}")
                    lim.clear(f"c-{i}")
            elif what == "close":
                lim.close()
        return manual()

    box.append(Limiter(name, RATE, clock=clock, decisions=False))
    core = box[0]._backend._core
    kept = copy_of("kept")
    base = refs_of(kept)[0]
    assert box[0].hit(kept) and box[0].hit("k", 4)
    plan.append("churn")
    assert box[0].hit("k", 2)  # "k" cleared inside, then made anew by this hit
    assert core.cached < 600 and read_here(name, manual(), ["k", "c-0", "kept"]) == [2, 0, 1]
    assert box[0].hit(kept)  # entered again after the drop
    plan.append("close")
    with pytest.raises(shmwin.WindowClosedError):
        box[0].hit("k", 3)
    # closed with a call inside: the table was kept then (today it stays until the Core goes;
    # dropping it once the last call has left would do as well)
    assert refs_of(kept)[0] in (base, base + 1)
    assert read_here(name, manual(), ["k", "kept"]) == [2, 2]
    del core
    box.clear()
    gc.collect()
    assert refs_of(kept) == [base]
    Limiter.attach(name).unlink()


# -- forked workers inherit stale caches, hitting at once -----------------------------------------


def _walker(lim: Limiter, universe: list, seed: int, ops: int, out) -> None:
    """Child body (forked: the parent's Limiter and its cache): hit random keys by random
    objects and send back what it counted per key."""
    import random

    rng = random.Random(seed)
    sums = [0] * len(universe)
    for _ in range(ops):
        i = rng.randrange(len(universe))
        cost = rng.randint(1, 5)
        assert lim.hit(variants(universe[i], rng.randrange(3)), cost)
        sums[i] += cost
    out.send(sums)
    os._exit(0)


def test_forked_workers_with_stale_inherited_caches_hit_at_once_and_sum_exactly(name):
    """Round after round this process forks 4 workers, which inherit its cache (stale for
    every key cleared or reclaimed since) and hit 24 keys at once with it; between rounds
    another Core clears half the keys, or time jumps past the window and other keys reclaim
    every row (then are cleared): every inherited entry is stale.
    Each key's count is exactly the sum of its round's hits."""
    import random

    rng = random.Random(7)
    pairs = one_tag_and_place(63, 3)[1]
    universe: list[str | bytes] = list(dict.fromkeys([
        "a", b"a", "é" * 128, "é" * 129, "", b"", *pairs, "z" * 128, "z" * 129, "q" * 300,
    ]))  # fmt: skip
    clock = ManualClock(T0)
    ctx = mp.get_context("fork")
    with Limiter(name, "1000000/minute", capacity=len(universe) + 2, clock=clock, decisions=False) as lim:
        other = Limiter.attach(name, clock=clock)
        try:
            model = [0] * len(universe)
            for rnd in range(6):
                for i, key in enumerate(universe):  # this process caches every key now
                    assert lim.hit(key, 1)
                    model[i] += 1
                if rnd % 2:  # every key idle: fillers reclaim every row, then leave
                    clock.advance(120)
                    fillers = [f"filler-{rnd}-{i}" for i in range(len(universe) + 2)]
                    for key in fillers:
                        assert other.hit(key)
                    for key in fillers:
                        other.clear(key)
                    assert all(lim._backend._core.find(k) is None for k in universe)
                    model = [0] * len(universe)
                else:
                    for i in rng.sample(range(len(universe)), len(universe) // 2):
                        other.clear(universe[i])
                        model[i] = 0
                pipes, procs = [], []
                for w in range(4):
                    mine, theirs = ctx.Pipe(duplex=False)
                    p = ctx.Process(target=_walker, args=(lim, universe, rnd * 10 + w, 300, theirs))
                    p.start()
                    pipes.append(mine)
                    procs.append(p)
                for mine, p in zip(pipes, procs, strict=True):
                    sums = mine.recv()
                    p.join(60)
                    assert p.exitcode == 0
                    model = [m + s for m, s in zip(model, sums, strict=True)]
                assert read_here(name, clock(), universe) == model, rnd
        finally:
            other.close()
        lim.unlink()
