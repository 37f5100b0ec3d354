"""limits' ``get`` of a key its strategies did not build ("user:42"), answered by one native call
over every fixed-window segment of the storage (core/fixedsum.c, ``FixedSum``) while the
storage's board holds the value it held at the last listing: no Python frame beyond
``ShmStorage.get``. These tests hold it to what the Python path guaranteed: a segment made or
removed by another process is seen at the next call, expiry follows limits' clock (a mocked
``time.time`` too), a segment removed under the call is no crash, junk is a clear error, and a
wrong argument is a TypeError, never a crash (test_foreign_keys.py holds the listing's rules)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from limits.storage import storage_from_string
from support.helpers import ROOT, run_python

import shmwin
import shmwin.integrations.limits
from shmwin import _core
from shmwin.backends.shm import boards
from shmwin.backends.shm.segment import path_of
from shmwin.errors import CorruptSegmentError, WindowClosedError
from shmwin.integrations import limits_segments
from shmwin.integrations.limits_counters import UNIT
from shmwin.integrations.limits_fixed import FixedWindows

# the tests marked ``sanitize`` also run against the sanitized cores (scripts/checks.d/50-sanitizers.sh)
T0 = 1_900_000_000.5  # a wall time in seconds, as time.time() gives it (x 10**9: exact in a float)


@pytest.fixture
def storage(name: str):
    s = storage_from_string(f"shm://{name}")
    yield s
    s.segments.close()
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)


def _fixed(storage, period_s: int) -> FixedWindows:
    found = storage.segments._fixed(period_s, create=False)
    assert isinstance(found, FixedWindows)
    return found


def _python_path_forbidden(*_args: object) -> None:
    raise AssertionError("the storage's Python path ran")


# -- the native call answers while the board holds ------------------------------------------------


def test_while_the_board_holds_one_native_call_answers(storage, monkeypatch):
    for period_s in (60, 3600, 86400):
        storage.incr("user:42", period_s, 2)
    assert storage.get("user:42") == 6  # the first get lists the segments
    monkeypatch.setattr(limits_segments.StorageSegments, "get", _python_path_forbidden)
    assert storage._foreign_get("user:42") == 6
    assert storage.get("user:42") == 6 and storage.get("user:7") == 0
    assert storage.get("".join(["user:", "42"])) == 6  # an equal key, another object


def test_a_segment_another_process_makes_is_counted_at_the_next_call(storage, name):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    run_python(
        """
        import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits
        storage_from_string("shm://" + sys.argv[1]).incr("user:42", 7200, 3)
        """,
        name,
    )
    assert storage._foreign_get("user:42") is None  # the board moved: the storage looks again
    assert storage.get("user:42") == 4
    assert storage._foreign_get("user:42") == 4  # and the native call answers again


def test_a_segment_another_process_removes_under_us_is_no_crash_and_not_counted(storage, name):
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    run_python("import sys, shmwin; assert shmwin.unlink(sys.argv[1])", f"{name}.fixed.1h")
    assert storage._foreign_get("user:42") is None  # still mapped here, but the board moved
    assert storage.get("user:42") == 1


def test_a_process_attaching_by_name_sums_the_same(storage, name):
    storage.incr("user:42", 60, 2)
    storage.incr("user:42", 3600, 0.5)
    out = run_python(
        """
        import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits
        s = storage_from_string("shm://" + sys.argv[1])
        print(s.get("user:42"), s._foreign_get("user:42"), s.get("user:7"))
        """,
        name,
    ).stdout.split()
    assert out == ["2.5", "2.5", "0"] and storage.get("user:42") == 2.5


def test_a_key_that_may_be_limits_own_takes_the_python_path(storage):
    storage.incr("user/42", 60)
    storage.incr("user/42", 3600)
    storage.incr("LIMITER/user/10/1/minute", 60, 4)  # limits' own: one period's segment
    storage.incr("ip:10.0.0.1/api/login", 60, 3)
    assert storage.get("user:0") == 0  # listed: the board holds
    # a "/" alone no longer sends a key to Python: only a granularity after the last one may
    assert storage._foreign_get("user/42") == 2 and storage.get("user/42") == 2
    assert storage._foreign_get("ip:10.0.0.1/api/login") == 3
    assert storage._foreign_get("LIMITER/user/10/1/minute") is None
    assert storage.get("LIMITER/user/10/1/minute") == 4
    assert storage._foreign_get("app/1/hour") is None and storage.get("app/1/hour") == 0  # Python reads it


def test_counts_come_back_in_hits_as_memory_storage_gives_them(storage):
    memory = storage_from_string("memory://")
    for amount, expiry in ((0.5, 60), (0.25, 3600), (1, 86400)):
        storage.incr("k", expiry, amount)
        memory.incr("k", expiry, amount)
    assert storage.get("k") == memory.get("k") == 1.75 and isinstance(storage.get("k"), float)
    storage.incr("k", 60, 0.25)
    assert storage.get("k") == 2 and isinstance(storage.get("k"), int)
    fixed = _fixed(storage, 60)
    fixed.counts._backend._q[_state_word(fixed, "k") + 1] = 2**63 - 3  # a count near the top, in units
    assert storage.get("k") == pytest.approx((2**63 - 3 + 1250) / UNIT)  # saturating, as the cores count


# -- time: limits' clock, read once a call ---------------------------------------------------------


@pytest.mark.parametrize("kind", [float, int])
def test_expiry_follows_a_mocked_time_time(storage, monkeypatch, kind):
    now = [T0 if kind is float else int(T0)]
    monkeypatch.setattr(time, "time", lambda: now[0])
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    now[0] += 59
    assert storage._foreign_get("user:42") == 2
    now[0] += 1  # the 60 s window ended exactly one period after its first hit
    assert storage._foreign_get("user:42") == 1 and storage.get("user:42") == 1
    now[0] += 3600
    assert storage.get("user:42") == 0


def test_a_clock_that_gives_no_time_is_an_error(storage, monkeypatch):
    storage.incr("user:42", 60)
    storage.get("user:42")
    for junk, error in ((None, TypeError), (-1.0, ValueError), (float("nan"), ValueError), ("1", TypeError)):
        monkeypatch.setattr(time, "time", lambda junk=junk: junk)
        with pytest.raises(error):
            storage.get("user:42")


# -- many processes making and removing segments while one gets ------------------------------------

CHILD_ENV = dict(os.environ, PYTHONPATH=str(ROOT))  # this build of the core (a sanitizer's: its preload too)
_MAKER = """
import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits
s = storage_from_string("shm://" + sys.argv[1])
for period_s in range(int(sys.argv[2]), int(sys.argv[3])):
    s.incr("user:42", period_s)
"""
_REMOVER = """
import sys, time, shmwin
from shmwin.rate import format_ns
name, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
left = set(range(first, last, 2))  # every other period: removed once it exists
deadline = time.monotonic() + 60
while left and time.monotonic() < deadline:
    for period_s in sorted(left):
        if shmwin.unlink(f"{name}.fixed.{format_ns(period_s * 10**9)}"):
            left.discard(period_s)
sys.exit(1 if left else 0)
"""


def test_processes_making_and_removing_segments_while_another_gets(storage, name):
    first, last = 101, 125  # 24 periods of their own: 2 makers (12 each), 1 remover (every other)
    children = [
        subprocess.Popen([sys.executable, "-c", code, name, *map(str, span)], env=CHILD_ENV)
        for code, span in (
            (_MAKER, (first, first + 12)),
            (_MAKER, (first + 12, last)),
            (_REMOVER, (first, last)),
        )
    ]
    answers = []
    try:
        while any(c.poll() is None for c in children):
            answers.append(storage.get("user:42"))
    finally:
        for c in children:
            assert c.wait(timeout=120) == 0
    assert all(isinstance(a, int) and 0 <= a <= last - first for a in answers)
    kept = [n for n in shmwin.names() if n.startswith(f"{name}.fixed.")]
    assert len(kept) == 12  # the even periods' (from 101: every other one removed)
    assert storage.get("user:42") == 12  # the last removal took the board: listed, as before boards
    storage.incr("other", 7 * 86400)  # a new segment: a board again
    assert storage.get("user:42") == 12 and storage._foreign_get("user:42") == 12


# -- junk: a clear error ---------------------------------------------------------------------------


def _state_word(fixed: FixedWindows, key: str) -> int:
    b = fixed.counts._backend
    row, _ = b._core.find(key)
    return (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0]


@pytest.mark.sanitize
def test_a_corrupt_state_word_is_a_corrupt_segment_error(storage):
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    fixed = _fixed(storage, 3600)
    fixed.counts._backend._q[_state_word(fixed, "user:42")] = -5  # an impossible window start
    with pytest.raises(CorruptSegmentError, match="window start"):
        storage._foreign_get("user:42")
    with pytest.raises(CorruptSegmentError, match="window start"):
        storage.get("user:42")


def test_a_junk_file_among_the_storage_s_segments_is_a_corrupt_segment_error(storage, name):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    with open(path_of(f"{name}.fixed.2h"), "wb") as junk:
        junk.write(b"\x07" * 5000)
    boards.touch(name)  # as a maker would: readers look again
    with pytest.raises(CorruptSegmentError):
        storage.get("user:42")


def test_a_closed_storage_looks_again_instead_of_reading_closed_cores(storage):
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 1
    storage.segments.close()
    assert storage._foreign_get("user:42") is None
    assert storage.get("user:42") == 1  # reopened by name


# -- the native type: wrong arguments are TypeErrors -----------------------------------------------


@pytest.mark.sanitize
def test_wrong_arguments_are_type_errors_not_crashes(storage):
    storage.incr("user:42", 60)
    core = _fixed(storage, 60).fixed_engine._core
    board = boards.Board.open(storage.segments.prefix, create=False)
    assert board is not None
    s = _core.FixedSum()
    for bad in ((1,), ()), ((), {"x": 1}):
        with pytest.raises(TypeError):
            _core.FixedSum(*bad[0], **bad[1])
    for args in (
        (None, 0, ()),  # three
        (None, 0, [core], None),  # a list
        (None, 0, (core, "x"), None),
        (None, 0, (storage.segments,), None),
        (None, 0, (), 5),  # no callable
        (5, 0, (), None),  # no buffer
        (board.mapped, "0", (), None),  # seen not an int
    ):
        with pytest.raises(TypeError):
            s.set(*args)
    with pytest.raises(ValueError, match="8 aligned bytes"):
        s.set(b"1234", 0, (), None)
    s.set(board.mapped, board.value(), (core,), None)
    for key in (5, None, ("user:42",)):
        with pytest.raises(TypeError):
            s.get(key)
    assert s.get(b"user:42") == 0  # bytes, as memory:// keeps them: another key than the str
    for key in (5, None, 1.5):
        with pytest.raises(TypeError):
            s.sum(key)
    assert s.get("user:42") == 1 and s.sum(b"user:42") == 0  # bytes: another key than the str
    s.set(board.mapped, board.value(), (core,), lambda: "soon")
    with pytest.raises(ValueError, match="clock"):
        s.sum("user:42")
    never = _core.FixedSum.__new__(_core.FixedSum)  # __init__ never ran
    assert never.get("k") is None
    with pytest.raises(RuntimeError):
        never.sum("k")


@pytest.mark.sanitize
def test_a_core_removed_then_closed_under_it(storage, name):
    storage.incr("user:42", 60)
    fixed = _fixed(storage, 60)
    s = _core.FixedSum()
    s.set(None, 0, (fixed.fixed_engine._core,), lambda: int(time.time() * 1e9))
    assert s.sum("user:42") == 1 and s.get("user:42") is None  # no board: get leaves it to the storage
    assert shmwin.unlink(f"{name}.fixed.1m")  # removed: still mapped while its core is held
    assert s.sum("user:42") == 1
    fixed.close()
    with pytest.raises(WindowClosedError):
        s.sum("user:42")
