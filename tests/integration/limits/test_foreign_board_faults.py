"""limits' ``get`` of a foreign key ("user:42") when segments and boards go away under it: a
segment another process removed (or removed and made again) is let go at the next listing, so
no count goes where nobody reads and the new one is the one read; a board removed between a
lister's open and its read, or by hand, is not kept; a segment whose creator died before
sizing it counts 0 without a wait; a full /dev/shm while the board is made is no SIGBUS
(boards.py, limits_segments._foreign_fixed, fixedsum.c). Red team's findings on getfast. The
tests marked ``sanitize`` also run against the sanitized cores (scripts/checks.d/50-sanitizers.sh)."""

from __future__ import annotations

import copy
import os
import pickle

import pytest
from limits.storage import storage_from_string
from support.helpers import run_python
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

import shmwin
import shmwin.integrations.limits
from shmwin import _core
from shmwin.backends.shm import boards, segment


@pytest.fixture
def storage(name: str):
    s = storage_from_string(f"shm://{name}")
    yield s
    s.segments.close()
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)
    if os.path.exists(boards.path_of(name)):
        os.unlink(boards.path_of(name))


_ELSEWHERE = """
import sys
from limits.storage import storage_from_string
import shmwin, shmwin.integrations.limits
s = storage_from_string("shm://" + sys.argv[1])
"""


def _elsewhere(name: str, code: str) -> str:
    """``code`` run in another process, ``s`` its storage of ``name``; what it printed."""
    return run_python(_ELSEWHERE + code, name).stdout.strip()


def test_a_segment_another_process_removes_is_let_go_and_counting_goes_on_where_all_read(storage, name):
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    _elsewhere(name, f"assert shmwin.unlink({name + '.fixed.1h'!r})")
    assert storage.get("user:42") == 1
    assert [storage.incr("user:42", 3600) for _ in range(3)] == [1, 2, 3]  # a new 1h segment
    assert _elsewhere(name, "print(s.get('user:42'))") == "4"
    _elsewhere(name, "s.incr('user:42', 3600, 10)")
    assert storage.get("user:42") == 14
    assert _elsewhere(name, "print(s.get('user:42'))") == "14"


def test_a_segment_removed_and_made_again_elsewhere_is_the_one_read(storage, name):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    _elsewhere(name, f"assert shmwin.unlink({name + '.fixed.1m'!r}); s.incr('user:42', 60, 5)")
    assert storage.get("user:42") == 5
    assert storage.incr("user:42", 60) == 6  # into the new segment, not the unlinked one
    assert _elsewhere(name, "print(s.get('user:42'))") == "6"


def test_a_lister_that_reads_a_removers_value_keeps_no_dead_board(storage, name, monkeypatch):
    """The remover (segment._forget_board) unlinks the board, then writes a new value in it. A
    lister that opened the board before the unlink and read the value after it must not keep
    it: nobody will write that board again."""
    storage.incr("user:42", 60)
    storage.incr("user:42", 1)
    assert storage.get("user:42") == 2
    real_open = boards.Board.open

    def open_then_remover_runs(prefix: str, *, create: bool) -> boards.Board | None:
        board = real_open(prefix, create=create)
        monkeypatch.setattr(boards.Board, "open", real_open)  # once
        assert shmwin.unlink(f"{name}.fixed.1s")  # the remover: board unlinked, then a new value
        return board

    _elsewhere(name, "s.incr('user:7', 60)")  # a new value: the next get lists
    monkeypatch.setattr(boards.Board, "open", open_then_remover_runs)
    assert storage.get("user:42") == 1
    _elsewhere(name, "s.incr('user:42', 3600, 7)")  # a new segment: a value on the board at the path
    assert storage.get("user:42") == 8
    assert storage._foreign_get("user:42") == 8  # and the fast path is back


def test_the_remover_unlinks_the_board_before_its_new_value(storage, name):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    held = storage.segments._board
    assert held is not None and held.is_current()
    before = held.value()
    _elsewhere(name, f"assert shmwin.unlink({name + '.fixed.1m'!r})")
    assert held.value() != before and not held.is_current()
    assert storage.get("user:42") == 0


@pytest.mark.sanitize
def test_a_board_removed_by_hand_is_noticed_at_the_recheck(storage, name):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    assert storage.segments.foreign._native.recheck_ns == 1_000_000_000  # fixedsum.c RECHECK_NS
    os.unlink(boards.path_of(name))  # by hand: no new value written
    _elsewhere(name, "s.incr('user:42', 3600, 5)")  # a new board, a new value: not ours
    storage.segments.foreign._native.recheck_ns = 0  # as a second later
    assert storage.get("user:42") == 6
    storage.segments.foreign._native.recheck_ns = 1_000_000_000
    assert storage._foreign_get("user:42") == 6  # on the board at the path now
    _elsewhere(name, "s.incr('user:42', 86400, 1)")
    assert storage.get("user:42") == 7


def test_a_segment_whose_creator_died_before_sizing_it_counts_zero_without_waiting(storage, name):
    storage.incr("user:42", 60, 3)
    half = segment.path_of(f"{name}.fixed.5m")
    os.close(os.open(half, os.O_CREAT | os.O_RDWR, 0o600))  # SIGKILL between O_CREAT and ftruncate
    try:
        assert storage.get("user:42") == 3
        # a fresh process would have waited ~5 s, then raised SegmentNotReadyError
        assert _elsewhere(name, "print(s.get('user:42'), s.get('user:7'))") == "3 0"
    finally:
        os.unlink(half)


def test_a_missing_board_is_made_again_by_the_next_lister_while_a_fixed_window_exists(storage, name):
    storage.incr("user:42", 60)
    os.unlink(boards.path_of(name))
    fresh = storage_from_string(f"shm://{name}")
    assert fresh.get("user:42") == 1  # found by listing: no board made before a fixed window is
    assert fresh.get("user:42") == 1
    assert os.path.exists(boards.path_of(name))  # made again: the fast path is back
    assert fresh.segments.foreign.get("user:42") == 1
    fresh.segments.close()


def test_no_board_is_made_for_a_storage_without_fixed_windows(make_name):
    name = make_name("nofixed")
    s = storage_from_string(f"shm://{name}")
    assert s.get("user:42") == 0
    assert not os.path.exists(boards.path_of(name))  # nothing would ever remove it


FULL = """
import errno, os, sys
from limits.storage import storage_from_string
import shmwin.integrations.limits
from shmwin.backends.shm import boards
s = storage_from_string("shm://full")
s.incr("user:42", 60, 2)
os.unlink(boards.path_of("full"))
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_WRONLY, 0o600)
try:
    while True:
        os.write(fd, b"x" * 4096)
except OSError as err:
    assert err.errno == errno.ENOSPC, err
os.close(fd)
boards.touch("full")  # a creator's: no page for the board, no SIGBUS
assert boards.Board.open("full", create=True) is None
fresh = storage_from_string("shm://full")
print(fresh.get("user:42"), s.get("user:42"), fresh.get("user:7"))
"""


@needs_namespace
def test_a_full_dev_shm_while_the_board_is_made_is_no_sigbus():
    proc = run_in_namespace(python_argv(FULL), shm_size="1m")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.split() == ["2", "2", "0"]


def test_a_fresh_storage_pickles_and_copies(make_name):
    name = make_name("pickle")
    s = storage_from_string(f"shm://{name}")
    for copied in (pickle.loads(pickle.dumps(s)), copy.deepcopy(s)):
        assert copied.get("user:42") == 0
        copied.segments.close()


@pytest.mark.sanitize
def test_fixedsum_init_called_again_lets_go_of_its_board(storage):
    storage.incr("user:42", 60, 2)
    assert storage.get("user:42") == 2
    native = storage.segments.foreign._native
    assert native.get("user:42") == 2
    native.__init__()
    assert native.get("user:42") is None and native.sum("user:42") == 0
    assert storage.get("user:42") == 2  # the storage lists again
    assert isinstance(pickle.loads(pickle.dumps(_core.FixedSum())), _core.FixedSum)


@pytest.mark.sanitize
def test_bytes_keys_are_counted_and_read_as_memory_storage_does(storage):
    memory = storage_from_string("memory://")
    for s in (storage, memory):
        s.incr(b"k", 60, 2)
        s.incr("k", 60, 1)
    assert storage.get(b"k") == memory.get(b"k") == 2
    assert storage.get("k") == memory.get("k") == 1
    assert storage.get(b"k/1/1/hour") == memory.get(b"k/1/1/hour") == 0
