"""Attacks on the key cache through its keys: equal keys of other objects and types, the churn
rule while other processes clear and reclaim the rows it names, keys of one tag and one place
(long probe chains), a row given to a key of the same tag elsewhere, the limits storage's,
token bucket's and concurrency's keys, rows dropped by a rebuild elsewhere, and a random walk
of two Cores against a model. The harness: tests/support/keycache.py."""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os

import pytest
from support.helpers import run_python
from support.keycache import (
    RATE,
    T0,
    Blob,
    S,
    Text,
    cacheable,
    copy_of,
    one_tag_and_place,
    read_elsewhere,
    read_here,
    variants,
)

import shmwin
from shmwin import Concurrency, Limiter, ManualClock, TokenBucket

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]


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
