"""limits' ``get`` of a foreign key reads each fixed window's row without its row lock
(core/fixedsum.c ``peek_units``): the row's generation around the loads says the row stayed the
key's, and its lock's seq word (format 12, core.h ``seq_at``: odd while ``fixed_incr`` or
``reset`` changes rows in place under the lock) says no section ran in between; anything else
falls back to the read under the lock. These tests hold it to the locked read's answers: across
real processes counting, clearing and resetting while others get, never another key's count
nor half a section (a writer stopped or killed between its stores), and an odd word left by a
dead writer healed. Writers and readers read a manual clock (each its own, at one time)."""

from __future__ import annotations

import os
import signal
import struct
import threading

import pytest
from support.badwords import geometry_of
from support.failpoints import CTX, KILL, strike
from support.foreign import shm_storage
from support.helpers import wait_stopped

from shmwin import ManualClock, _core
from shmwin.backends.shm import format as fmt
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of
from shmwin.integrations.limits_fixed import FixedWindows

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # sanitize: 50-sanitizers.sh too

NS = 10**9
T0 = 1_900_000_000 * NS
PERIOD_S = 60


def _open(name: str, now_ns: int, create: bool = False) -> FixedWindows:
    windows = FixedWindows.open(name, PERIOD_S * NS, ManualClock(now_ns), None, create)
    assert windows is not None
    return windows


def _summing(*windows: FixedWindows, now_ns: int = T0 + 1) -> _core.FixedSum:
    """A FixedSum over ``windows``' cores at one manual time (no board: sum() reads none)."""
    s = _core.FixedSum()
    s.set(None, 0, tuple(w.fixed_engine._core for w in windows), ManualClock(now_ns))
    return s


def _seq_words(name: str) -> list[int]:
    """Every key row lock's seq word of segment ``name``."""
    g, lay, _, _ = geometry_of(name)
    with open(path_of(name), "rb") as f:
        raw = f.read(lay.locks_off + g.n_locks * layout.LOCK_BYTES)
    return [
        struct.unpack_from("<q", raw, lay.locks_off + i * layout.LOCK_BYTES + fmt.LOCK_SEQ_OFF)[0]
        for i in range(layout.FIRST_KEY_LOCK, g.n_locks)
    ]


@pytest.fixture
def fixed(name: str):
    """Segment ``name``.fixed.60, made at T0; removed after."""
    windows = _open(f"{name}.fixed.{PERIOD_S}", T0, create=True)
    yield windows
    windows.counts.unlink()
    windows.close()


# -- real processes: writers, clearers and resetters while the parent gets ------------------------


def _reuse_rows(name: str, rounds: int, done) -> None:  # type: ignore[no-untyped-def]
    """Child: "a" counted 1 then cleared, "b" counted 1000 then cleared (the row "a" left: the
    free list gives it back first), every 64th round a reset of every row."""
    windows = _open(name, T0)
    for i in range(rounds):
        windows.incr("a", 1)
        windows.clear("a")
        windows.incr("b", 1000)
        windows.clear("b")
        if i % 64 == 0:
            windows.incr("a", 1)
            windows.reset()
    windows.close()
    done.set()


def test_a_get_never_reads_another_keys_count_in_a_row_given_over(fixed):
    done = CTX.Event()
    child = CTX.Process(target=_reuse_rows, args=(fixed.counts.name, 3000, done))
    summing, seen_a, seen_b = _summing(fixed), set(), set()
    child.start()
    while not done.is_set():
        seen_a.add(summing.sum("a"))
        seen_b.add(summing.sum("".join(["b"])))  # a new equal object: its row's text compared
    child.join(60)
    assert child.exitcode == 0
    assert seen_a <= {0, 1} and seen_b <= {0, 1000}, (seen_a, seen_b)


def _count(name: str, key: str, n: int, start) -> None:  # type: ignore[no-untyped-def]
    windows = _open(name, T0)
    start.wait(30)
    for _ in range(n):
        windows.incr(key, 1)
    windows.close()


def test_gets_while_other_processes_count_are_exact(name):
    periods = [_open(f"{name}.fixed.{s}", T0, create=True) for s in (60, 3600, 86400)]
    start, n = CTX.Event(), 2000
    names = [w.counts.name for w in periods for _ in range(2)]  # two writers a period
    writers = [CTX.Process(target=_count, args=(each, "user:42", n, start)) for each in names]
    summing, last, reads = _summing(*periods), 0, 0
    try:
        for p in writers:
            p.start()
        start.set()
        while any(p.is_alive() for p in writers) or reads == 0:
            got = summing.sum("user:42")
            assert last <= got <= 6 * n, f"read {got} after {last}"  # counts only grow, none invented
            last, reads = got, reads + 1
        for p in writers:
            p.join(60)
            assert p.exitcode == 0
        assert summing.sum("user:42") == 6 * n
    finally:
        for w in periods:
            w.counts.unlink()
            w.close()


def test_a_seq_word_left_odd_is_read_under_the_lock_and_healed(fixed):
    fixed.incr("user:42", 3)
    summing = _summing(fixed)
    assert summing.sum("user:42") == 3
    g, lay, _, _ = geometry_of(fixed.counts.name)
    with open(path_of(fixed.counts.name), "r+b") as f:  # every key lock's word odd: a section died inside
        for i in range(layout.FIRST_KEY_LOCK, g.n_locks):
            f.seek(lay.locks_off + i * layout.LOCK_BYTES + fmt.LOCK_SEQ_OFF)
            f.write(struct.pack("<q", 7))
    assert summing.sum("user:42") == 3  # read under the lock, which makes the word even again
    words, (slot, _) = _seq_words(fixed.counts.name), fixed.fixed_engine._core.find("user:42")
    assert words[slot % len(words)] == 8  # the key's lock, healed by the reader that held it
    assert words.count(7) == len(words) - 1  # the others as they were
    fixed.incr("user:42", 1)
    assert summing.sum("user:42") == 4


def test_storage_get_is_the_native_call_and_rejects_wrong_calls(name):
    with shm_storage(name) as storage:
        storage.incr("user:42", 60, 2)
        assert storage.get("user:42") == 2 and storage.get(b"user:42") == 0
        get = type(storage).__dict__["get"].__wrapped__  # limits' wrapper around StorageGet
        assert isinstance(get, _core.StorageGet) and get(storage, "user:42") == 2
        with pytest.raises(TypeError, match="storage and a key"):
            get(storage)
        with pytest.raises(TypeError, match="storage and a key"):
            get(storage, key="user:42")
        with pytest.raises(TypeError, match="str or bytes"):
            storage.get(42)
        with pytest.raises(TypeError, match="not a FixedSum"):
            get(object.__new__(type("Other", (), {"_foreign_sum": 1})), "k")


# -- fail points: a writer stopped or killed between its stores -----------------------------------


def _stop_in_new_window(name: str, ready) -> None:  # type: ignore[no-untyped-def]
    """Child: past the key's window, stop (SIGSTOP) after fixed_incr's store 2 -- the new
    window's start stored, the old count (5) still there -- holding the row's lock."""
    windows = _open(name, T0 + (PERIOD_S + 1) * NS)
    ready.set()
    _core.failpoint("fixed_incr", 2, signal.SIGSTOP)
    windows.incr("user:42", 1)
    os._exit(0)


@pytest.mark.failpoints
def test_a_get_never_reads_half_a_fixed_incr(fixed):
    fixed.incr("user:42", 5)
    summing = _summing(fixed, now_ns=T0 + (PERIOD_S + 2) * NS)  # the old window is over: 0 now
    assert summing.sum("user:42") == 0  # (and the key's row in this process's key cache)
    ready = CTX.Event()
    child = CTX.Process(target=_stop_in_new_window, args=(fixed.counts.name, ready))
    child.start()
    answers: list[object] = []
    try:
        ready.wait(30)
        wait_stopped(child.pid)
        reader = threading.Thread(target=lambda: answers.append(summing.sum("user:42")))
        reader.start()
        reader.join(0.3)  # a torn read (the new start with the old count) would answer 5 at once
        assert answers in ([], [0]), answers  # it waits for the row's lock instead
        os.kill(child.pid, signal.SIGCONT)
        reader.join(60)
    finally:
        os.kill(child.pid, signal.SIGCONT)
        child.join(60)
    assert child.exitcode == 0 and answers[-1] == 1  # the new window, whole


@pytest.mark.failpoints
def test_a_fixed_incr_killed_between_its_stores_reads_as_the_locked_read_and_heals(fixed):
    fixed.incr("user:42", 5)
    later = T0 + (PERIOD_S + 2) * NS
    summing = _summing(fixed, now_ns=later)
    assert summing.sum("user:42") == 0
    name = fixed.counts.name
    with strike(
        "fixed_incr", 2, KILL, lambda _: _open(name, T0 + (PERIOD_S + 1) * NS), lambda w: w.incr("user:42", 1)
    ):
        assert any(q & 1 for q in _seq_words(name))  # the dead section's mark
        # the tear its store order allows (the new start, the old count: refusals early), read
        # under the lock, as fixed_get reads it; the word even again after
        assert summing.sum("user:42") == 5 == _open(name, later).get("user:42")
        assert not any(q & 1 for q in _seq_words(name))
        assert summing.sum("user:42") == 5  # and now without the lock
        _open(name, later).incr("user:42", 1)
        assert summing.sum("user:42") == 6
