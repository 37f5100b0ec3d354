"""Red team: the per-process key cache (core/keycache.c) is only ever a hint.

The cache maps a key object (exact str/bytes of at most 128 characters) to a (row, generation)
it saw; a hit is confirmed against the row's generation under the row's lock, and a miss falls
back to the shared index. Here it is attacked with keys equal but of other objects, keys of
one tag and first place, tables grown and dropped (the churn rule) while other processes clear
and reclaim the rows it names, a table reallocated while a hit waits on a row lock (another
thread, a signal handler), fork, spawn, the GC and close(). Every count is read back by another
Core (a fresh attach, mostly in another process): a count landing on another key, lost, or
doubled fails.
"""

from __future__ import annotations

import gc
import itertools
import json
import multiprocessing as mp
import os
import signal
import sys
import threading

import pytest
from support.helpers import run_python, wait_stopped

import shmwin
from shmwin import Concurrency, Limiter, ManualClock, TokenBucket, _core

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

S = 10**9
T0 = 10 * S
RATE = "1000000/hour"


class Text(str):
    """A str subclass: never cached (not exact), the same key as the str of its text."""


class Blob(bytes):
    """A bytes subclass: never cached, the same key as the bytes of its content."""


def copy_of(key: str | bytes) -> str | bytes:
    """A new object equal to key (never the same object, except the interned empty ones)."""
    if isinstance(key, bytes):
        return bytes(bytearray(key))
    return "".join(list(key))


READ = """
import ast, json, sys
from shmwin import Limiter, ManualClock
lim = Limiter.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
keys = ast.literal_eval(open(sys.argv[3]).read())
print(json.dumps([lim.stats(k).used for k in keys]))
lim.close()
"""


def read_elsewhere(name: str, now_ns: int, keys: list, tmp_path) -> list[int]:
    """Each key's count as an unrelated ``python -c`` process reads it (a cold Core)."""
    path = tmp_path / f"keys-{os.getpid()}-{len(keys)}.txt"
    path.write_text(repr(keys))
    return json.loads(run_python(READ, name, str(now_ns), str(path)).stdout)


def read_here(name: str, now_ns: int, keys: list) -> list[int]:
    """Each key's count as a fresh Core of this process reads it (its own, empty cache)."""
    other = Limiter.attach(name, clock=ManualClock(now_ns))
    try:
        return [other.stats(k).used for k in keys]
    finally:
        other.close()


def cacheable(key: str | bytes) -> bool:
    return type(key) in (str, bytes) and len(key) <= 128


# -- keys equal but of other objects ------------------------------------------------------------

ODD_KEYS: list[str | bytes] = [
    "plain", b"plain", "", b"", "é", "é".encode(), "日本語-🎉", "\x00nul", "nul\x00", b"\xff\xfe\x00",
    "x" * 31, "x" * 32, "x" * 33, "x" * 127, "x" * 128, "x" * 129, "x" * 128 + "z", "x" * 127 + "z",
    b"x" * 128, b"x" * 129, "é" * 128, "é" * 129, "é" * 127 + "e", "🎉" * 128, "🎉" * 129,
    "k" * 5000, "k" * 4999 + "j", "j" + "k" * 4999, b"k" * 5000,
    "LIMITER/203.0.113.7/route/login/10/1/minute", "LIMITER/203.0.113.7/route/login/10/1/minutf",
]  # fmt: skip


def test_equal_keys_of_other_objects_and_types_count_on_their_own_key(name, tmp_path):
    """Each key hit by its own object, a new equal object and a subclass instance: one key,
    whose count another process reads exactly; str and bytes of one text are two keys; keys
    of 128 characters are cached, 129 not, and one entry per key whatever the objects."""
    assert len(set(map(repr, ODD_KEYS))) == len(ODD_KEYS)
    clock = ManualClock(T0)
    want = [0] * len(ODD_KEYS)
    with Limiter(name, RATE, clock=clock) as lim:
        for rnd in range(3):
            for i, key in enumerate(ODD_KEYS):
                sub = Blob(key) if isinstance(key, bytes) else Text(key)
                for obj, cost in ((key, i + 1), (copy_of(key), 1), (sub, 2)):
                    assert lim.hit(obj, cost)
                    want[i] += cost
            if rnd == 0:  # the cache now holds every cacheable key once
                assert lim._backend._core.cached == sum(map(cacheable, ODD_KEYS))
        assert lim._backend._core.cached == sum(map(cacheable, ODD_KEYS))
        assert read_elsewhere(name, clock(), ODD_KEYS, tmp_path) == want
        assert read_here(name, clock(), ODD_KEYS) == want
        assert [lim.stats(copy_of(k)).used for k in ODD_KEYS] == want
        lim.unlink()


def test_a_key_that_cannot_be_encoded_is_an_error_every_time_and_counts_nothing(name):
    clock = ManualClock(T0)
    with Limiter(name, RATE, clock=clock) as lim:
        assert lim.hit("ok")
        for _ in range(3):
            with pytest.raises(UnicodeEncodeError):
                lim.hit("bad\ud800")
            with pytest.raises(TypeError):
                lim.hit(12345)  # type: ignore[arg-type]
            for bad in (bytearray(b"ok"), memoryview(b"ok")):
                with pytest.raises(TypeError):
                    lim.hit(bad)  # type: ignore[arg-type]
        assert lim._backend._core.cached == 1
        assert lim.stats("ok").used == 1
        lim.unlink()


# -- the churn rule, with other processes clearing and reclaiming --------------------------------

PHASE = """
import ast, sys
from shmwin import Limiter, ManualClock
lim = Limiter.attach(sys.argv[1], clock=ManualClock(path=sys.argv[2]), on_full="raise")
for op, key, cost in ast.literal_eval(open(sys.argv[3]).read()):
    if op == "hit":
        assert lim.hit(key, cost), key
    else:
        lim.clear(key)
lim.close()
"""


def run_phase(name: str, clock_path, ops: list, tmp_path) -> None:
    path = tmp_path / "ops.txt"
    path.write_text(repr(ops))
    run_python(PHASE, name, str(clock_path), str(path))


def test_stale_entries_of_rows_cleared_and_reclaimed_elsewhere_never_count_on_other_keys(name, tmp_path):
    """A table of 64 rows. Round after round this process hits 64 new keys (its cache grows,
    and drops itself on churn: at 4 x keys + 256 entries); another process then clears half of
    them and gives their rows to its own keys, and, past the window, reclaims the rest. This
    process then hits its old keys again through its stale entries: each must be counted
    anew on its own key, or refused (table full), never on the key now in its row."""
    cap = 64
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    with Limiter(name, "1000000/minute", capacity=cap, clock=clock, on_full="raise", decisions=False) as lim:
        core = lim._backend._core
        sizes: list[int] = []
        for rnd in range(12):
            mine = [f"r{rnd}-mine-{i}" for i in range(cap)]
            for i, key in enumerate(mine):
                assert lim.hit(key, i + 1)
            # another process: clear the first half, give those rows to its keys
            theirs = [f"r{rnd}-theirs-{i}" for i in range(cap // 2)]
            ops = [("clear", k, 0) for k in mine[: cap // 2]]
            ops += [("hit", k, 1000 + i) for i, k in enumerate(theirs)]
            run_phase(name, clock_path, ops, tmp_path)
            # every row is taken: a cleared key of mine has no row to go back to
            for key in mine[: cap // 2]:
                with pytest.raises(shmwin.KeyTableFullError):
                    lim.hit(copy_of(key) if key.endswith("3") else key, 7)
            for key in mine[cap // 2 :]:
                assert lim.hit(key, 1)  # a live entry: counted on its own row
            got = read_here(name, clock(), theirs + mine)
            assert got[: cap // 2] == [1000 + i for i in range(cap // 2)]
            assert got[cap // 2 :] == [0] * (cap // 2) + [i + 2 for i in range(cap // 2, cap)]
            # past the window every key is idle: another process reclaims all their rows
            clock.advance(120)
            ops = [("hit", f"r{rnd}-late-{i}", 1 + i) for i in range(cap)]
            run_phase(name, clock_path, ops, tmp_path)
            for key in mine[::7]:  # stale entries everywhere: full, never counted elsewhere
                with pytest.raises(shmwin.KeyTableFullError):
                    lim.hit(key, 5)
            late = read_here(name, clock(), [f"r{rnd}-late-{i}" for i in range(cap)])
            assert late == [1 + i for i in range(cap)]
            clock.advance(120)  # every key idle again: the next round reclaims them
            sizes.append(core.cached)
        assert any(b < a for a, b in itertools.pairwise(sizes)), sizes  # the churn rule dropped the table
        assert max(sizes) <= 4 * cap + 256 + cap, sizes
        lim.unlink()


def test_a_cache_grown_many_times_then_dropped_keeps_every_count_exact(name, tmp_path):
    """5000 keys (the table doubles from 64 to 8192 entries), all hit again by new objects,
    then cleared one by one from another process while this one goes on: the cache drops
    itself (churn) with counts exact before and after."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    keys = [f"grow-{i}" for i in range(5000)]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        core = lim._backend._core
        for i, key in enumerate(keys):
            assert lim.hit(key, 1 + i % 7)
        assert core.cached == len(keys)
        for key in keys:
            assert lim.hit(copy_of(key), 1)
        assert core.cached == len(keys)
        want = [2 + i % 7 for i in range(len(keys))]
        assert read_elsewhere(name, clock(), keys, tmp_path) == want
        run_phase(name, clock_path, [("clear", k, 0) for k in keys[:4900]], tmp_path)
        for key in keys[:4900:10]:  # stale: made anew
            assert lim.hit(key, 3)
        assert core.cached <= 490  # 5000 entries, 590 live keys: the churn rule dropped the table
        for i in range(3000):  # fresh keys, each cleared: it drops the table again
            assert lim.hit(f"churn-{i}", 1)
            lim.clear(f"churn-{i}")
        assert core.cached < 4 * 590 + 256
        assert read_elsewhere(name, clock(), keys[:4900:10], tmp_path) == [3] * 490
        assert read_elsewhere(name, clock(), keys[4900:], tmp_path) == want[4900:]
        assert read_here(name, clock(), keys[1:4900:10]) == [0] * 490
        lim.unlink()


# -- one tag, one place: long probe chains in a big table ----------------------------------------


def typed_hash(key: str | bytes) -> int:
    """keycache.c's typed_hash: Python's hash, bytes told apart from str."""
    h = hash(key) & (2**64 - 1)
    return h ^ 0x5BD1E9955BD1E995 if isinstance(key, bytes) else h


def one_tag_and_place(mask: int, want_pairs: int) -> tuple[list[str | bytes], list[str | bytes]]:
    """Keys of one place in a table of mask + 1 entries (a probe chain), and pairs of keys of
    one tag and one place (bytes among them: the typed hash), found by the birthday rule."""
    seen: dict[tuple[int, int], str | bytes] = {}
    pairs: list[str | bytes] = []
    by_place: dict[int, list[str | bytes]] = {}
    i = 0
    while len(pairs) < 2 * want_pairs:
        i += 1
        key: str | bytes = f"t{i}" if i % 2 else f"t{i}".encode()
        h = typed_hash(key)
        by_place.setdefault(h & mask, []).append(key)
        found = seen.setdefault((h >> 48, h & mask), key)
        if found is not key:
            pairs += [found, key]
    chain = max(by_place.values(), key=len)
    return chain[:40], pairs


def test_keys_of_one_tag_and_one_place_in_a_big_table_count_on_their_own_rows(name, tmp_path):
    """3000 fillers grow the table to 4096 entries; then pairs of keys of one tag and one
    place there, and a chain of keys of one place, hit by their objects and by new equal
    ones, in orders that probe past each other: every count exact from another process."""
    mask = 4095
    chain, pairs = one_tag_and_place(mask, 3)
    fillers = [f"fill-{i}" for i in range(3000)]
    keys = list(dict.fromkeys(chain + pairs))
    clock = ManualClock(T0)
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        core = lim._backend._core
        for key in fillers:
            lim.hit(key)
        assert 3 * 2048 // 4 < core.cached <= 3 * 4096 // 4  # the table is 4096 entries now
        want = dict.fromkeys(keys, 0)
        for rnd in range(3):
            order = keys if rnd % 2 == 0 else keys[::-1]
            for i, key in enumerate(order):
                obj = key if rnd == 0 else copy_of(key)
                assert lim.hit(obj, 1 + i % 5)
                want[key] += 1 + i % 5
        assert core.cached == len(fillers) + len(keys) <= 3 * 4096 // 4  # still 4096 entries
        assert read_elsewhere(name, clock(), keys, tmp_path) == [want[k] for k in keys]
        # clear every other one elsewhere: the survivors' entries sit past stale ones
        other = Limiter.attach(name, clock=clock)
        for key in keys[::2]:
            other.clear(key)
        other.close()
        for key in keys:
            assert lim.hit(copy_of(key), 1)
        expect = [1 if j % 2 == 0 else want[k] + 1 for j, k in enumerate(keys)]
        assert read_elsewhere(name, clock(), keys, tmp_path) == expect
        lim.unlink()


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


@pytest.mark.failpoints
@pytest.mark.parametrize("clear_it", [False, True])
def test_a_thread_waiting_on_a_row_lock_survives_the_table_grown_and_dropped(name, tmp_path, clear_it):
    """A thread's hit of "k" waits on k's row lock (another process stopped holding it) with
    the cache's entry read; meanwhile this process's main thread grows the table to 4096
    entries, then clears those keys and drops the table (churn), and maybe another thread
    clears "k" while both wait. The waiting hit then counts exactly once, on "k", never through
    the old table (the sanitizer job sees any read of it)."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    told = Telling(clock)
    with Limiter(name, RATE, clock=told, decisions=False) as lim:
        core = lim._backend._core
        assert lim.hit("k")
        keys = keys_off_lock(lim, "k", 3000, "grow")
        last = keys.pop()
        holder = start_holder(name, clock_path)
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
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    told = Telling(clock)
    with Limiter(name, RATE, clock=told, decisions=False) as lim:
        core = lim._backend._core
        assert lim.hit("k")
        keys = keys_off_lock(lim, "k", 3000, "sig")
        last = keys.pop()
        holder = start_holder(name, clock_path)
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
    kept = copy_of("kept-key")
    base = sys.getrefcount(kept)
    assert lim.hit(kept) and lim.hit("k")
    assert sys.getrefcount(kept) == base + 1  # the cache's reference
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
        assert sys.getrefcount(kept) == base + 1  # a call is inside: the table stays
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
    assert core.cached == 0 and sys.getrefcount(kept) == base  # the last call out dropped it
    with pytest.raises(shmwin.WindowClosedError):
        lim.hit("k")
    del lim, core
    box.clear()
    gc.collect()
    assert sys.getrefcount(kept) == base  # the Core is gone: its table with it
    used = read_here(name, clock(), ["k", "kept-key"])
    assert used == [2, 1]  # "k": its first hit and the holder's; the closed one counted nothing
    Limiter.attach(name).unlink()


# -- references: the cache holds keys, and lets them go ------------------------------------------


def refs_of(*objs: object) -> list[int]:
    """Each object's reference count, all measured alike."""
    return [sys.getrefcount(o) for o in objs]


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


def _spawned(name: str, clock_path: str, keys: list[str], rounds: int) -> None:
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path))
    for _ in range(rounds):
        for key in keys:
            assert lim.hit(copy_of(key))
    lim.close()


def test_spawned_processes_and_this_one_hit_the_same_keys_through_their_caches(name, tmp_path):
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    keys = [f"sp-{i}" for i in range(300)] + ["é" * 128, "x" * 129, ""]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_spawned, args=(name, str(clock_path), keys, 5)) for _ in range(2)]
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


def _hammer(name: str, clock_path: str, keys: list[str], n: int) -> None:
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path))
    for _ in range(n):
        for key in keys:
            assert lim.hit(copy_of(key))
    os._exit(0)


def test_threads_hitting_hot_keys_while_others_grow_and_churn_the_table(name, tmp_path):
    """Four threads hit four hot keys while two others insert and clear thousands of keys of
    the same Limiter (the table grows, is dropped, grows again) and another process hits the
    same hot keys (their row locks are contended): every hot count exact."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    hot = [f"hot-{i}" for i in range(4)]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        p = mp.get_context("fork").Process(target=_hammer, args=(name, str(clock_path), hot, 1500))
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


# -- one tag and place, the row given to the other key elsewhere ----------------------------------


def test_a_row_given_to_a_key_of_the_same_tag_and_place_elsewhere_is_told_apart(name):
    """a and b share the cache's tag and first place. This process caches a in the last free
    row of 4; another Core clears a and b takes that very row. Here b (new objects) must be
    counted on its row, and a (through its stale entry, then new objects) never on b's."""
    a, b = one_tag_and_place(63, 1)[1]
    clock = ManualClock(T0)
    with Limiter(name, RATE, capacity=4, clock=clock, on_full="raise", decisions=False) as lim:
        core = lim._backend._core
        for i in range(3):
            assert lim.hit(f"f{i}")
        assert lim.hit(a, 3)
        slot = core.find(a)[0]
        other = Limiter.attach(name, clock=clock, on_full="raise")
        try:
            other.clear(a)
            assert other.hit(b, 5)
            assert other._backend._core.find(b)[0] == slot
            for _ in range(2):
                assert lim.hit(copy_of(b), 1)  # a's entry is probed first: told apart by object
                with pytest.raises(shmwin.KeyTableFullError):
                    lim.hit(a, 2)  # the stale entry: a's row is b's now, and no row is free
                with pytest.raises(shmwin.KeyTableFullError):
                    lim.hit(copy_of(a), 2)
                assert lim.hit(b, 1)
            assert other.stats(b).used == 5 + 4
            assert other.stats(a).used == 0
            other.clear(b)  # b's row is free: a takes it (b's entry here is stale now)
            assert lim.hit(copy_of(a), 2)
            with pytest.raises(shmwin.KeyTableFullError):
                lim.hit(b, 1)  # the stale entry names a's row now
            assert other.stats(a).used == 2 and other.stats(b).used == 0
            assert core.find(a)[0] == slot
        finally:
            other.close()
        lim.unlink()


# -- the shm:// limits storage, the token bucket, the concurrency ---------------------------------

START_S = 1_800_000_000  # a wall-clock time that is a multiple of every period used here


def test_limits_storage_keys_made_anew_each_call_count_on_their_own_keys(name, monkeypatch):
    """limits builds each key anew ("LIMITER/..."): every hit is a new object, some longer than
    the cache takes; two storages (their own Cores) read each other's counts exactly, and a
    clear by one is seen by the other's next hit."""
    import time

    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import (
        FixedWindowRateLimiter,
        MovingWindowRateLimiter,
        SlidingWindowCounterRateLimiter,
    )

    import shmwin.integrations.limits

    c = ManualClock(START_S * S)
    monkeypatch.setattr(time, "time", lambda: c() / S)
    item = parse("1000/hour")
    idents = ["203.0.113.7", "é" * 40, "x" * 200, "", "x" * 199 + "y"]
    s1, s2 = storage_from_string(f"shm://{name}"), storage_from_string(f"shm://{name}")
    try:
        for kind in (FixedWindowRateLimiter, MovingWindowRateLimiter, SlidingWindowCounterRateLimiter):
            one, two = kind(s1), kind(s2)
            for _ in range(3):
                for i, ident in enumerate(idents):
                    assert one.hit(item, ident, cost=i + 1)
            used = [1000 - two.get_window_stats(item, ident).remaining for ident in idents]
            assert used == [3 * (i + 1) for i in range(len(idents))], kind
            two.clear(item, idents[0])
            assert one.hit(item, idents[0], cost=2) and two.hit(item, idents[2])
            assert 1000 - one.get_window_stats(item, idents[0]).remaining == 2
            assert 1000 - one.get_window_stats(item, idents[2]).remaining == 10
    finally:
        s1.segments.close()
        s2.segments.close()
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)


def test_token_bucket_and_concurrency_keys_through_stale_and_new_objects(make_name):
    clock = ManualClock(T0)
    with TokenBucket(make_name("tb"), "1/hour", burst=10, clock=clock, decisions=False) as tb:
        other = TokenBucket.attach(tb.name, clock=clock)
        try:
            for i in range(2000):  # the table grows under the key
                assert tb.hit(f"tb-{i}")
            taken = sum(tb.hit(k) for k in ["key", copy_of("key"), Text("key")] * 5)
            assert taken == 10 and other.stats("key").used == 10
            other.clear("key")  # this process's entry is stale now
            taken = sum(tb.hit(k) for k in ["key", copy_of("key")] * 6)
            assert taken == 10 and other.stats("key").used == 10
            assert other.stats("tb-0").used == 1 and other.stats("tb-1999").used == 1
        finally:
            other.close()
        tb.unlink()
    conc = Concurrency(make_name("cc"), 3, clock=clock)
    watcher = Concurrency.attach(conc.name, clock=clock)
    try:
        for i in range(1000):
            assert conc.try_acquire(f"c-{i}")
        got = [conc.try_acquire(k) for k in ["slot", copy_of("slot"), Text("slot"), "slot"]]
        assert got == [True, True, True, False]
        assert watcher.count("slot") == 3 and watcher.count(copy_of("slot")) == 3
        for k in [copy_of("slot"), Text("slot"), "slot"]:
            conc.release(k)
        assert watcher.count("slot") == 0 and watcher.count("c-999") == 1
        for i in range(1000):
            conc.release(copy_of(f"c-{i}"))
        assert watcher.count("c-0") == 0 and watcher.count("c-999") == 0
    finally:
        watcher.close()
        conc.unlink()
        conc.close()


# -- rows dropped by a rebuild elsewhere; a random walk against a model ---------------------------


def test_idle_keys_dropped_by_a_rebuild_elsewhere_are_counted_anew_here(name, tmp_path):
    """This process caches 60 keys; past the window another process makes 3000 keys (the
    index grows, its rebuild drops the idle keys, their rows go to new keys). The stale
    entries here must find their rows changed: each old key counted anew, no new key touched."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    old = [f"old-{i}" for i in range(60)]
    with Limiter(name, "1000000/minute", clock=clock, decisions=False) as lim:
        for i, key in enumerate(old):
            assert lim.hit(key, 1 + i)
        clock.advance(120)
        run_phase(name, clock_path, [("hit", f"new-{i}", 1 + i % 11) for i in range(3000)], tmp_path)
        slots = {lim._backend._core.find(k) for k in old} - {None}
        assert len(slots) < len(old)  # the rebuild dropped (most of) them
        for key in old:
            assert lim.hit(key if key.endswith("7") else copy_of(key), 2)
        new = [f"new-{i}" for i in range(3000)]
        want = [2] * 60 + [1 + i % 11 for i in range(3000)]
        assert read_elsewhere(name, clock(), old + new, tmp_path) == want
        lim.unlink()


def variants(key: str | bytes, pick: int) -> str | bytes:
    """key itself, a new equal object, or a subclass instance."""
    if pick == 0:
        return key
    if pick == 1:
        return copy_of(key)
    return Blob(key) if isinstance(key, bytes) else Text(key)


@pytest.mark.parametrize(("seed", "capacity"), [(0, 8), (1, 8), (2, 8), (3, 32), (4, 32)])
def test_a_random_walk_of_two_cores_matches_a_model(name, seed, capacity):
    """Two Cores of this process (two caches) hit and clear 24 keys -- str and bytes of one
    text, 128 and 129 characters, keys of one tag and place -- by their objects, new equal
    ones and subclasses, while time jumps past the window; a third, fresh Core reads every
    count now and then against a model. Rows of cleared and idle keys are reused; with 8
    rows the table is often full, exactly when the model says so (its live keys)."""
    import random

    rng = random.Random(seed)
    pairs = one_tag_and_place(63, 3)[1]
    universe: list[str | bytes] = list(dict.fromkeys([
        "a", b"a", "b", b"b", "é" * 128, "é" * 129, "z" * 128, "z" * 129, "", b"", *pairs,
        "LIMITER/x/1/minute", "LIMITER/x/1/minutf", "q" * 300, "q" * 299 + "r",
    ]))[:24]  # fmt: skip
    clock = ManualClock(T0)
    model = dict.fromkeys(universe, 0)
    fulls = 0
    opts = {"capacity": capacity, "clock": clock, "on_full": "raise", "decisions": False}
    with Limiter(name, "1000000/minute", **opts) as a:
        assert a._backend._core.layout["n_rows"] == capacity
        b = Limiter.attach(name, clock=clock, on_full="raise")
        try:
            for step in range(2000):
                lim = a if rng.random() < 0.6 else b
                key = rng.choice(universe)
                op = rng.random()
                if op < 0.75:
                    cost = rng.randint(1, 9)
                    full = model[key] == 0 and sum(n > 0 for n in model.values()) >= capacity
                    try:
                        assert lim.hit(variants(key, rng.randrange(3)), cost)
                        model[key] += cost
                        assert not full, step
                    except shmwin.KeyTableFullError:
                        assert full, step
                        fulls += 1
                elif op < 0.97:
                    lim.clear(variants(key, rng.randrange(3)))
                    model[key] = 0
                else:
                    clock.advance(120)
                    model = dict.fromkeys(universe, 0)
                if step % 50 == 49:
                    assert read_here(name, clock(), universe) == [model[k] for k in universe], step
            assert read_here(name, clock(), universe) == [model[k] for k in universe]
            assert (fulls > 100) == (capacity < len(universe)), fulls
        finally:
            b.close()
        a.unlink()


def test_a_table_past_2_mib_is_mapped_forked_and_dropped_with_counts_exact(name, tmp_path):
    """100,000 keys: the table (131,072 entries of 16 bytes) is mapped on its own. A forked
    child hits through the inherited table while the parent clears most keys; the parent's
    next new key drops the table (churn) and unmaps it; counts exact from another process."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    n = 100_000
    keys = [f"big-{i}" for i in range(n)]
    with Limiter(name, RATE, clock=clock, decisions=False) as lim:
        core = lim._backend._core
        for key in keys:
            assert lim.hit(key)
        assert core.cached == n

        def child() -> None:
            ok = core.cached == n
            for key in keys[::97]:
                ok &= lim.hit(copy_of(key), 2) and lim.hit(key, 1)
            os._exit(0 if ok else 3)

        p = mp.get_context("fork").Process(target=child)
        p.start()
        p.join(120)
        assert p.exitcode == 0
        for key in keys[: n - 1000]:
            lim.clear(key)
        assert core.cached == n  # cleared entries stay, forgotten
        assert lim.hit("after")  # 100,001 entries, 1,001 live keys: dropped
        assert core.cached == 1
        for key in keys[::997]:
            assert lim.hit(copy_of(key), 5)
        model = dict.fromkeys(keys, 1)
        for key in keys[::97]:
            model[key] += 3
        model.update(dict.fromkeys(keys[: n - 1000], 0))
        for key in keys[::997]:
            model[key] += 5
        sample = keys[::97] + keys[::997] + keys[n - 1000 :: 7]
        assert read_elsewhere(name, clock(), sample, tmp_path) == [model[k] for k in sample]
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
