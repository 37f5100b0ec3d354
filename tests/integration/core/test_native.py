"""The native core's promises: uninterruptible sections, close safety, bounded loops.

Fail points at every store are in core/failpoints/ (one file per section); here, exceptions raised at
*random* instants by a signal handler, every public call after close(), corrupted
row headers, and the constants C and layout.py must share.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time

import numpy as np
import pytest

import shmwin
from shmwin import Limiter, ManualClock, Window, _core
from shmwin.backends.shm import format as layout_words
from shmwin.backends.shm import layout

S = 1_000_000_000


def test_c_and_layout_share_every_constant():
    """Every constant the core was compiled with (its layout.h, generated from layout_words.py),
    by name, is the Python description's; layout.py names the ones it exports the same way."""
    assert dict(_core.LAYOUT) == layout_words.constants()
    assert len(_core.LAYOUT) > 90
    shared = set(layout.__all__) & set(_core.LAYOUT)
    assert {"KEY_ROW_GEN", "INDEX_ENTRY_PLACE", "LOCK_INTENT_OFF", "ROWS_TOP_OFF"} <= shared
    assert all(getattr(layout, name) == _core.LAYOUT[name] for name in shared)
    assert all(getattr(layout_words, name) == value for name, value in _core.LAYOUT.items())
    assert _core.MUTEX_BYTES <= layout.LOCK_INTENT_OFF
    assert _core.LAYOUT["EMPTY_EPOCH"] == shmwin.geometry.EMPTY_EPOCH == -(2**63)


class Interrupted(Exception):
    pass


def _storm(seconds_per_alarm: float, calls: int, body) -> int:
    """Run ``body(i)`` for i in range(calls) while SIGALRM raises at random instants; how many
    raised. The handler raises only while armed and disarms as it raises, so at most one
    exception is in flight. It is armed only inside ``guarded``, a frame of its own below this
    loop's ``try``: where the interpreter checks for signals does not matter (3.13 checks at a
    loop's backward jump, which is outside the ``try`` around it, CPython gh-130279), since an
    exception raised anywhere in ``guarded`` or below reaches the caller at its call, inside the
    ``try``."""
    rng = random.Random(7)
    raised, i, armed, running = 0, 0, [False], [True]

    def alarm(signum, frame):
        # Python runs this handler late, possibly after the storm's setitimer(0): re-arming
        # then would leave SIGALRM's default action (exit) armed once the handler is restored
        if running[0]:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.2, 1.8) * seconds_per_alarm)
        if armed[0]:
            armed[0] = False
            raise Interrupted

    def guarded(i: int) -> None:
        armed[0] = True
        try:
            body(i)
        finally:
            armed[0] = False

    old = signal.signal(signal.SIGALRM, alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds_per_alarm)
        while i < calls:
            try:
                guarded(i)
                i += 1
            except Interrupted:
                raised += 1
    finally:
        running[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return raised


def _hit_from_another_process(name: str, keys: list[str], out, now_ns: int) -> None:
    lim = Limiter.attach(name, clock=ManualClock(now_ns))
    started = time.monotonic()
    for i, key in enumerate(keys):
        out[i] = lim.hit(key)
    out[len(keys)] = int((time.monotonic() - started) * 1000)
    lim.close()


def test_exceptions_at_random_instants_leak_no_lock_and_never_over_admit(name):
    clock = ManualClock(1000 * S)
    keys = [f"client-{i}" for i in range(200)]  # rotating keys: inserts are interrupted too
    with Limiter(name, "10/minute", capacity=400, clock=clock, lock_timeout=5) as lim:
        raised = _storm(0.0001, 60_000, lambda i: lim.hit(keys[i % len(keys)]))
        assert raised > 50, "the storm should have interrupted many calls"
        w = Window.attach(name, clock=clock)
        for key in keys:  # strict: never more than 10 counted, and running totals match buckets
            stats = lim.stats(key)
            assert stats.used == w.total(key=key) <= 10, key
        w.close()
        # no lock leaked and no key stalled: another process gets prompt answers for every key
        ctx = mp.get_context("fork")
        out = ctx.Array("q", len(keys) + 1, lock=False)
        p = ctx.Process(target=_hit_from_another_process, args=(name, keys, out, clock()))
        p.start()
        p.join(60)
        assert p.exitcode == 0 and out[len(keys)] < 3000
        assert not any(out[: len(keys)])  # every key is full: refused, not hung
        lim.unlink()


def test_exceptions_at_random_instants_lose_no_returned_add(name):
    for mode in ("striped", "locked"):
        with Window(f"{name}{mode[0]}", span="1h", buckets=60, mode=mode) as w:
            calls = returned = 0

            def add(i):
                nonlocal calls, returned
                calls += 1
                w.add(1)
                returned += 1  # reached only if add() returned

            raised = _storm(0.0001, 200_000, add)
            assert raised > 50
            # an exception lands before a call or after it returned, never inside it: every
            # returned add is counted, and none is counted twice
            assert returned <= w.total() <= calls
            w.unlink()


def test_every_call_after_close_raises_window_closed(make_name):
    w = Window(make_name("w"), span=60, buckets=60, fields=("a", "b"))
    k = Window(make_name("k"), span=60, buckets=60, capacity=8)
    lim = Limiter(make_name("l"), "5/minute")
    cores = (w._backend._core, lim._backend._core)
    saved = [w.add, k.add, k.add_and_total, lim.hit, cores[0].add, cores[1].check, cores[1].reset]
    k.add(1, key="x")
    for obj in (w, k, lim):
        obj.unlink()
        obj.close()
        obj.close()  # idempotent
    calls = [
        lambda: w.add(), lambda: w.add(1, "b"), lambda: w.add_many([1, 2]), lambda: w.total(),
        lambda: w.totals(), lambda: w.rate(), lambda: w.series(), lambda: w.reset(),
        lambda: w.reclaim(), lambda: w.stripe_owners(),
        lambda: k.add(1, key="x"), lambda: k.add_and_total(1, key="x"), lambda: k.total(key="x"),
        lambda: k.keys(), lambda: k.top(), lambda: k.clear("x"),
        lambda: lim.hit("x"), lambda: lim.test("x"), lambda: lim.stats("x"), lambda: lim.stats_all("x"),
        lambda: lim.clear("x"), lambda: lim.acquire("x", timeout=0),
        lambda: saved[0](), lambda: saved[1](1, key="x"), lambda: saved[2](1, key="x"),
        lambda: saved[3]("x"), lambda: saved[4](), lambda: saved[5]("x", 1, True), lambda: saved[6](),
    ]  # fmt: skip
    for i, call in enumerate(calls):
        with pytest.raises(shmwin.WindowClosedError):
            call()
        assert i >= 0


def test_a_saved_bound_add_keeps_its_window_open(name):
    add = Window(name, span=60, buckets=60).add  # the Window object itself is dropped at once
    add(5)
    with Window.attach(name) as w:
        assert w.total() == 5
        w.unlink()


def test_a_corrupted_row_header_is_an_error_not_a_spin(name):
    with Window(name, span=60, buckets=60, capacity=8, lock_timeout=2) as w:
        w.add(1, key="victim")
        (slot, _generation) = w._backend._core.find("victim")
        row_off = w._backend._lay.rows_off + slot * w._backend._lay.row_bytes
        fd = os.open(shmwin.backends.shm.segment.path_of(name), os.O_RDWR)
        os.pwrite(fd, (987654).to_bytes(8, "little"), row_off)  # the row's copy of the generation
        os.close(fd)
        fresh = Window.attach(name, lock_timeout=60)  # no cached slot: it must look the key up
        started = time.monotonic()
        with pytest.raises(shmwin.CorruptSegmentError, match="disagree"):
            fresh.add(1, key="victim")
        assert time.monotonic() - started < 30  # not a wait for the 60 s lock timeout (load: < 1 s)
        fresh.add(1, key="other")  # the rest of the table still works
        assert fresh.total(key="other") == 1
        fresh.close()
        w.unlink()


def test_float_clocks_from_time_mocking_libraries_work(name):
    now = [1000.0 * S]
    with Limiter(name, "2/second", clock=lambda: now[0]) as lim:
        assert [lim.hit("k") for _ in range(3)] == [True, True, False]
        now[0] += 1.1 * S
        assert lim.hit("k")
        lim.unlink()


def test_bad_clocks_are_clear_errors(make_name):
    bad = ((lambda: -5, ValueError), (lambda: None, TypeError), (lambda: 1 / 0, ZeroDivisionError))
    for clock, error in bad:
        with Window(make_name("w"), span=60, buckets=60, clock=clock) as w:
            with pytest.raises(error):
                w.add()
            w.unlink()


def test_a_clock_behind_the_head_counts_late_never_early(name):
    """An injected clock is read before the lock: a process whose reading lags another's
    must not roll a ring back (that would forget hits and admit early)."""
    now = [100 * S]
    with Limiter(name, "3/minute", clock=lambda: now[0]) as lim:
        assert lim.hit("k") and lim.hit("k")
        now[0] -= 30 * S  # this process's reading lags the head by 30 s
        assert lim.hit("k") and not lim.hit("k")
        now[0] += 30 * S + 64 * S  # a period and a bucket after the newest hit
        assert lim.hit("k")
        lim.unlink()


def test_costs_accept_integral_floats_and_refuse_the_rest(name):
    with Limiter(name, "5/minute") as lim:
        assert lim.hit("k", 2.0) and lim.hit("k", np.int64(2))
        assert lim.stats("k").used == 4
        for bad in (1.5, 0, -1, True, "2", None):
            with pytest.raises(ValueError, match="cost"):
                lim.hit("k", bad)
        assert lim.test("k", 0)
        assert lim.stats("k").used == 4  # nothing counted by the refused calls
        lim.unlink()


def test_float_windows_refuse_nan_and_infinity(name):
    with Window(name, span=60, buckets=60, dtype="float64") as w:
        w.add(1.5)
        for bad in (float("nan"), float("inf"), -float("inf")):
            with pytest.raises(ValueError, match="finite"):
                w.add(bad)
        with pytest.raises(ValueError, match="finite"):
            w.add_many([1.0, float("nan")])
        assert w.total() == 1.5
        w.unlink()


def test_int_overflow_is_refused_before_anything_is_written(name):
    with Window(name, span=60, buckets=60) as w:
        w.add(2**63 - 10)
        with pytest.raises(OverflowError):
            w.add(np.int64(100))
        with pytest.raises(OverflowError):
            w.add(2**64)
        assert w.total() == 2**63 - 10
        w.unlink()


# -- regressions found by red-teaming the core --------------------------------------------


def test_a_huge_cost_is_refused_and_changes_nothing(name):
    with Limiter(name, "10/minute") as lim:
        assert lim.hit("k")
        assert not lim.hit("k", 2**63 - 1)  # would overflow used + cost: refused, not admitted
        assert lim.stats("k").used == 1
        assert sum(lim.hit("k") for _ in range(20)) == 9
        assert lim.acquire("k", timeout=0, cost=2**62) is False
        lim.unlink()


def _poke_word(name: str, offset: int, value: int) -> None:
    fd = os.open(shmwin.backends.shm.segment.path_of(name), os.O_RDWR)
    os.pwrite(fd, value.to_bytes(8, "little", signed=True), offset)
    os.close(fd)


def test_an_impossible_head_epoch_is_an_error_not_a_loop(name):
    with Limiter(name, "10/minute", lock_timeout=60) as lim:
        lim.hit("k")
        slot, _ = lim._backend._core.find("k")
        lay = lim.window._backend._lay
        head = lay.rows_off + slot * lay.row_bytes + lay.ring_words[0] * 8
        for junk in (2**63 - 1, -5):
            _poke_word(name, head, junk)
            started = time.monotonic()
            for call in (lambda: lim.test("k"), lambda: lim.stats("k"), lambda: lim.hit("k")):
                with pytest.raises(shmwin.CorruptSegmentError, match="impossible epoch"):
                    call()
            assert time.monotonic() - started < 30  # no wait for the 60 s lock timeout
        assert lim.hit("other")  # the rest of the limiter still works
        lim.unlink()


def test_a_junk_running_total_is_recomputed_not_trusted(name):
    with Limiter(name, "10/minute") as lim:
        for _ in range(3):
            lim.hit("k")
        slot, _ = lim._backend._core.find("k")
        lay = lim.window._backend._lay
        _poke_word(name, lay.rows_off + slot * lay.row_bytes + (lay.ring_words[0] + 1) * 8, -(2**63) + 1)
        assert lim.stats("k").used == 3  # recomputed from the buckets
        assert sum(lim.hit("k") for _ in range(20)) == 7
        lim.unlink()


CLOSE_VS_READERS = """
import sys, threading
from shmwin import Window
for keyed in (0, 8):
    for _ in range(200):
        w = Window(sys.argv[1], span=60, buckets=60, capacity=keyed)
        w.add(1, key="k" if keyed else None)
        stop = threading.Event()
        def read():
            while not stop.is_set():
                try:
                    w.total()
                except Exception:
                    pass
        t = threading.Thread(target=read)
        t.start()
        w.close()
        stop.set()
        t.join()
        w.unlink()
print("survived")
"""


def test_close_while_another_thread_reads_never_crashes(name):
    from support.helpers import run_python

    assert "survived" in run_python(CLOSE_VS_READERS, name).stdout


BAD_FLOAT_CLOCK = """
import sys
from shmwin import Window
class Tagged(float):
    def __repr__(self):
        return f"Tagged({self.tag})"
def clock():
    value = Tagged(-1.0)
    value.tag = "x" * 100
    return value
w = Window(sys.argv[1], span=60, buckets=60, clock=clock)
for _ in range(1000):
    try:
        w.add()
    except ValueError as exc:
        assert "Tagged(xxx" in str(exc), exc
w.close()
w.unlink()
print("survived")
"""


def test_a_bad_float_from_the_clock_is_reported_without_use_after_free(name):
    from support.helpers import run_python

    assert "survived" in run_python(BAD_FLOAT_CLOCK, name).stdout


def test_the_key_cache_never_keeps_big_keys_and_is_dropped_at_close(name):
    with Limiter(name, "10/minute", capacity=100) as lim:
        for i in range(50):
            lim.hit(f"{i}".ljust(100_000, "x"))
        lim.hit("small")
        assert lim._backend._core.cached == 1  # only the short key is cached
        core = lim._backend._core
        lim.unlink()
    assert core.cached == 0


def test_the_key_cache_finds_equal_keys_that_are_other_objects_and_keeps_kinds_apart(name):
    """The cache's one open-addressed table, grown several times (3,000 keys: probes run
    past entries of other keys): a key made again as a new object is the same key, b"k1"
    and "k1" are two keys, and every count is the one a fresh process reads."""
    n = 3000
    with Limiter(name, "1000/minute", clock=ManualClock(10 * S)) as lim:
        keys = [f"k{i}" for i in range(n)]
        for k in keys:
            lim.hit(k)
        copies = ["".join(("k", str(i))) for i in range(n)]  # equal, never identical
        assert copies[7] == keys[7] and copies[7] is not keys[7]
        for k in copies:
            lim.hit(k)
        for k in reversed(keys):
            lim.hit(k, 2)
        for i in range(0, n, 3):
            lim.hit(keys[i].encode())
        core = lim._backend._core
        assert core.cached == n + len(range(0, n, 3))  # str and bytes entries, never a copy's
        other = Limiter.attach(name, clock=ManualClock(10 * S))
        try:
            str_used = [other.stats(k).used for k in keys]
            bytes_used = [other.stats(k.encode()).used for k in keys]
        finally:
            other.close()
        assert str_used == [4] * n  # 1 + 1 + 2: a copy counted on its key
        assert bytes_used == [1 if i % 3 == 0 else 0 for i in range(n)]  # b"k0" is its own key
        lim.unlink()


def _same_tag_and_place(mask: int, prefix: str) -> tuple[str, str]:
    """Two str keys the key cache cannot tell apart by its entry (keycache.c): the same 16-bit
    tag (the hash's top bits) and the same first place in a table of mask + 1 entries."""
    seen: dict[tuple[int, int], str] = {}
    for i in range(1_000_000):
        key = f"{prefix}{i}"
        h = hash(key) & (2**64 - 1)
        found = seen.setdefault((h >> 48, h & mask), key)
        if found != key:
            return found, key
    raise AssertionError("no two keys share a tag and a place")


@pytest.mark.parametrize(
    "prefix",
    ["tag-", "a key longer than a row stores, so kept as digests: ", "clé-"],
    ids=["short: its row holds its text", "long: objects compared", "not ASCII: objects compared"],
)
def test_keys_of_one_tag_and_place_are_told_apart(name, prefix):
    """b's first probe meets a's entry (same tag, same place): a short key is checked against
    the row (which holds a), a long or non-ASCII one against a's object; either way b is looked
    for again, then made, and every hit after, by the same objects or by new equal ones,
    counts on its own key."""
    a, b = _same_tag_and_place(63, prefix)  # the cache's first table: 64 entries
    clock = ManualClock(10 * S)
    with Limiter(name, "100/minute", clock=clock) as lim:
        lim.hit(a, 3)
        lim.hit(b, 5)
        for _ in range(2):
            lim.hit(b[:1] + b[1:], 1)  # a new object equal to b: a's entry is probed first
            lim.hit(a[:1] + a[1:], 2)
            lim.hit(b, 1)
        assert lim._backend._core.cached == 2
        other = Limiter.attach(name, clock=clock)
        try:
            assert other.stats(a).used == 3 + 2 * 2
            assert other.stats(b).used == 5 + 2 * 2
        finally:
            other.close()
        lim.unlink()


def test_a_cached_key_whose_row_went_to_another_key_is_looked_up_again(name):
    """This process caches "client-a"; another clears it and "client-b" takes its row. A hit
    with the same object (taken on its word) or with an equal new object (checked against
    the row) must find the row changed and count "client-a" anew, never on "client-b"."""
    clock = ManualClock(10 * S)
    with Limiter(name, "100/minute", capacity=4, clock=clock) as lim:
        a = "client-a"
        lim.hit(a, 5)
        for key in (a, "".join(("client", "-a"))):
            other = Limiter.attach(name, clock=clock)
            try:
                other.clear("client-a")
                other.hit("client-b", 7)
                lim.hit(key, 2)
                assert other.stats("client-a").used == 2
                assert other.stats("client-b").used == 7
                other.clear("client-b")
            finally:
                other.close()
            lim.clear(a)
        lim.unlink()


def test_add_many_refuses_a_sum_past_int64_instead_of_wrapping(make_name):
    with Window(make_name("w"), span=60, buckets=60) as w:
        w.add(1)
        with pytest.raises(OverflowError):
            w.add_many([2**62, 2**62])
        now = time.monotonic_ns()
        with pytest.raises(OverflowError):
            w.add_many([2**62, 2**62], at=[now, now])
        assert w.total() == 1
        w.unlink()


def test_float_windows_never_accumulate_to_infinity(name):
    # a manual clock: both adds in one bucket, which the check covers (on the host clock a second
    # boundary between them put them in two, each finite: CI on 3.13). A window's total over
    # several buckets can still reach inf: each bucket is checked, not their sum.
    with Window(name, span=60, buckets=60, dtype="float64", clock=ManualClock(1000 * S)) as w:
        w.add(1e308)
        with pytest.raises(OverflowError):
            w.add(1e308)
        with pytest.raises(OverflowError):
            w.add(10**400)
        assert w.total() == 1e308
        w.unlink()


def test_a_cleared_key_is_reusable_at_once_even_just_after_boot(name):
    """clear() marks the entry idle with a time long ago, not 0: on a host up for less than
    the span (a "5/day" limiter on its first day) the entry is still reusable at once."""
    with Limiter(name, "5/day", capacity=2, on_full="deny", clock=ManualClock(5 * S)) as lim:
        assert lim.hit("a") and lim.hit("b")
        assert not lim.hit("c")  # the table holds two live keys
        lim.clear("a")
        assert lim.hit("c")  # takes the cleared key's place
        assert lim.stats("b").used == 1
        lim.unlink()
