"""A key that limits' strategies did not build (django-ratelimit's, pyrate-limiter's, an app's
own: "user:42") has no period in it, so ``get`` looks in every fixed-window segment of the
storage. It finds them without listing /dev/shm at each call: while the storage's board
(boards.py, a word every creator of a fixed-window segment changes) holds the value read before
the last listing, not even a stat(); else the listing is kept while the directory's
modification time says nothing was created or removed (segment.listed_names). A segment another
process creates is seen at the next call, and one it removes is no longer counted."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from limits.storage import storage_from_string
from support.helpers import ROOT

import shmwin
import shmwin.integrations.limits
from shmwin.backends.shm import boards, segment
from shmwin.integrations import limits_segments


@pytest.fixture
def storage(name: str):
    s = storage_from_string(f"shm://{name}")
    yield s
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)


def _in_another_process(code: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", code, *args], check=True, timeout=60,
                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip


def _incr_in_another_process(name: str, key: str, expiry: int, times: int) -> None:
    code = (
        "import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits\n"
        "s = storage_from_string('shm://' + sys.argv[1])\n"
        "for _ in range(int(sys.argv[4])): s.incr(sys.argv[2], int(sys.argv[3]))\n"
    )
    _in_another_process(code, name, key, str(expiry), str(times))


def test_get_of_a_foreign_key_sums_every_fixed_segment_even_one_made_elsewhere_meanwhile(storage, name):
    storage.incr("user:42", 60)
    storage.incr("user:42", 60)
    assert storage.get("user:42") == 2
    _incr_in_another_process(name, "user:42", 3600, 3)  # a new segment (another period), another process
    assert storage.get("user:42") == 5
    _incr_in_another_process(name, "user:42", 86400, 1)
    assert storage.get("user:42") == 6
    assert storage.get("user:7") == 0


def test_the_listing_is_kept_while_dev_shm_does_not_change(monkeypatch, make_name):
    monkeypatch.setattr(segment, "SETTLED_NS", 0)  # keep even a listing made right after a change
    first = segment.listed_names()
    assert segment.listed_names() is first  # nothing changed: one stat(), no listing
    w = shmwin.Window(make_name("new"), span=1, buckets=1)
    try:
        after = segment.listed_names()
        assert after is not first and w.name in after  # created: listed again
    finally:
        w.unlink()
        w.close()
    assert w.name not in segment.listed_names()  # removed: listed again


def test_a_listing_made_within_a_clock_tick_of_a_change_is_not_kept(monkeypatch, make_name):
    monkeypatch.setattr(segment, "SETTLED_NS", 10**18)  # every change looks recent
    w = shmwin.Window(make_name("one"), span=1, buckets=1)  # a listing of one: () is a singleton
    try:
        first = segment.listed_names()
        assert w.name in first
        assert segment.listed_names() is not first  # listed again each time
        assert segment.listed_names() == first
    finally:
        w.unlink()
        w.close()


def _no_listing(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("listed or looked at /dev/shm")


def test_a_known_foreign_key_reads_the_board_only(storage, monkeypatch):
    """Once this process has found the storage's fixed windows, a get neither lists nor stats
    /dev/shm nor opens a file: it reads the board's word."""
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    monkeypatch.setattr(limits_segments, "listed_names", _no_listing)
    monkeypatch.setattr(segment, "listed_names", _no_listing)
    monkeypatch.setattr(boards.Board, "open", _no_listing)
    assert storage.get("user:42") == 2
    assert storage.get("user:7") == 0
    assert storage.get_expiry("user:42") > 0


def test_a_key_missed_then_made_by_another_process_in_a_new_segment_is_found(storage, name):
    storage.incr("user:1", 60)
    assert storage.get("user:42") == 0  # looked: nothing
    _incr_in_another_process(name, "user:42", 7200, 2)  # a new segment, after this one looked
    assert storage.get("user:42") == 2


def test_a_segment_another_process_removes_is_no_longer_counted(storage, name):
    storage.incr("user:42", 60)
    storage.incr("user:42", 3600)
    assert storage.get("user:42") == 2
    first_board = os.stat(boards.path_of(name)).st_ino
    _in_another_process("import sys, shmwin; assert shmwin.unlink(sys.argv[1])", f"{name}.fixed.1h")
    assert not os.path.exists(boards.path_of(name))  # its removal took the board with it
    assert storage.get("user:42") == 1  # no crash, and the removed one (still mapped here) is gone
    assert os.stat(boards.path_of(name)).st_ino != first_board  # the lister made a new one
    _incr_in_another_process(name, "user:42", 86400, 3)  # a new segment: a new value on it
    assert storage.get("user:42") == 4


def test_without_a_board_get_lists_as_before(storage, name):
    storage.incr("user:42", 60)
    os.unlink(boards.path_of(name))  # as an older shmwin leaves it: no board
    fresh = storage_from_string(f"shm://{name}")  # a process that never saw one
    assert fresh.get("user:42") == 1  # found by listing /dev/shm
    _incr_in_another_process(name, "user:42", 86400, 1)  # made: a board again
    assert fresh.get("user:42") == 2
