"""Junk, truncated, half-built and oversized segments: a clear error, never a crash or a hang."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time

import pytest
from support.helpers import ROOT, run_all

import shmwin
from shmwin import Window, geometry
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of


def _make(name: str, **kw) -> Window:
    return Window(name, span=10, buckets=10, fields=("ok",), **kw)


def _poke(name: str, offset: int, data: bytes) -> None:
    fd = os.open(path_of(name), os.O_RDWR)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


@pytest.mark.parametrize("opener", [Window.attach, lambda n: _make(n)])
def test_junk_magic(name, opener):
    _make(name).close()
    _poke(name, 0, b"GARBAGE!")
    with pytest.raises(shmwin.CorruptSegmentError, match="not a shmwin segment"):
        opener(name)
    shmwin.unlink(name)


def test_overwritten_geometry_fails_the_checksum(name):
    _make(name).close()
    _poke(name, 40, (999).to_bytes(4, "little"))
    with pytest.raises(shmwin.CorruptSegmentError, match="checksum"):
        Window.attach(name)
    shmwin.unlink(name)


def test_other_format_version(name):
    _make(name).close()
    _poke(name, 8, (6).to_bytes(4, "little"))  # the format before a limiter's compact rings
    with pytest.raises(shmwin.IncompatibleVersionError, match="version 6"):
        Window.attach(name)
    assert issubclass(shmwin.IncompatibleVersionError, shmwin.SegmentError)
    shmwin.unlink(name)


def test_other_format_version_names_the_segment_and_what_to_do(name):
    """The version error names the segment and the command that removes it (before: "segment
    has format version 10; this shmwin reads version 11", no name, no hint)."""
    _make(name).close()
    _poke(name, 8, (layout.FORMAT_VERSION - 1).to_bytes(4, "little"))
    with pytest.raises(shmwin.IncompatibleVersionError) as err:
        Window.attach(name)
    message = str(err.value)
    assert f"window {name!r}" in message and f"version {layout.FORMAT_VERSION - 1}" in message
    assert f"`shmwin rm {name}`" in message
    shmwin.unlink(name)


@pytest.mark.parametrize("new_size", [64, 4096, 8192, "bigger"])
def test_truncated_or_resized_segment(name, new_size):
    w = _make(name)
    size = w.nbytes
    w.close()
    os.truncate(path_of(name), size + 4096 if new_size == "bigger" else new_size)
    with pytest.raises(shmwin.CorruptSegmentError):
        Window.attach(name)
    shmwin.unlink(name)


def _create_bare(name: str, size: int) -> None:
    """What a creator leaves when it dies right after shm_open(O_CREAT | O_EXCL) (and ftruncate)."""
    fd = os.open(path_of(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    os.close(fd)


def test_creator_died_before_sizing(name):
    _create_bare(name, 0)
    started = time.monotonic()
    with pytest.raises(shmwin.SegmentNotReadyError, match="never sized") as err:
        Window.attach(name, ready_timeout=0.3)
    assert isinstance(err.value, TimeoutError)
    assert time.monotonic() - started < 3
    with pytest.raises(shmwin.SegmentNotReadyError):
        Window(name, ready_timeout=0.3)
    shmwin.unlink(name)


def test_creator_died_before_writing_the_magic(name):
    _create_bare(name, 65536)
    with pytest.raises(shmwin.SegmentNotReadyError, match="never marked ready"):
        Window.attach(name, ready_timeout=0.3)
    shmwin.unlink(name)


def test_a_foreign_file_under_the_prefix(name):
    with open(path_of(name), "wb") as f:
        f.write(os.urandom(10_000))
    with pytest.raises(shmwin.CorruptSegmentError):
        Window.attach(name)
    shmwin.unlink(name)


def test_corrupt_lock_table(name):
    w = _make(name)
    locks_off = w._backend._lay.locks_off
    w.close()
    _poke(name, locks_off + 64 + 16, b"\xff\xff\xff\xff")  # lock 1's kind word
    with pytest.raises(shmwin.CorruptSegmentError, match="lock 1"):
        Window.attach(name)
    shmwin.unlink(name)


def test_lock_owned_by_a_thread_that_no_longer_exists_is_an_error_not_a_hang(name):
    """A forged owner tid is indistinguishable from a holder in another PID namespace, so it is
    not judged dead: it is a LockTimeoutError after lock_timeout that says so, never a hang."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid is now a thread id that does not exist
    w = _make(name, mode="locked", lock_timeout=0.5)
    _poke(name, w._backend._lay.locks_off + 64, gone.pid.to_bytes(4, "little"))  # forged futex word
    started = time.monotonic()
    with pytest.raises(shmwin.LockTimeoutError, match="cannot see"):
        w.add()
    assert time.monotonic() - started < 5
    w.close()
    w.unlink()


def test_a_lock_word_naming_no_thread_is_corrupt_not_a_hang(name):
    w = _make(name, mode="locked", lock_timeout=30)
    _poke(name, w._backend._lay.locks_off + 64, (0x80000000).to_bytes(4, "little"))  # waiters bit, no owner
    started = time.monotonic()
    with pytest.raises(shmwin.CorruptSegmentError, match="names no thread"):
        w.add()
    assert time.monotonic() - started < 5  # two wait slices, not the 30 s lock timeout
    w.close()
    w.unlink()


def test_reads_ignore_junk_epochs(name):
    w = _make(name)
    w.add(5)
    rows_off = w._backend._lay.rows_off
    _poke(name, rows_off + 3 * 16, (2**62).to_bytes(8, "little", signed=True))  # a future epoch
    _poke(name, rows_off + 3 * 16 + 8, (123).to_bytes(8, "little"))
    assert w.total() == 5
    w.close()
    w.unlink()


def _unshare_works() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"], capture_output=True
    )
    return probe.returncode == 0


FULL_SHM = """
import shmwin
from shmwin import Window
small = Window("full-small", span=10, buckets=10)  # ~25 kB: fits in 1 MiB
try:
    Window("full-big", span=100000, buckets=100000)  # ~50 MB: does not
except shmwin.OutOfSpaceError as exc:
    assert isinstance(exc, OSError) and exc.errno == 28, exc
    assert "full-big" in str(exc) and "bytes" in str(exc), exc
    print("refused:", exc)
else:
    raise SystemExit("a too-big window was created")
assert shmwin.names() == ["full-small"], shmwin.names()  # nothing half-built left
small.add(3)
assert small.total() == 3
"""


@pytest.mark.skipif(not _unshare_works(), reason="needs root and mount namespaces for a small /dev/shm")
def test_full_dev_shm_is_an_error_at_create_time():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f'mount -t tmpfs -o size=1m tmpfs /dev/shm && exec "{sys.executable}" -c "$0"', FULL_SHM],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "refused: " in proc.stdout and "needs" in proc.stdout


def _attach_when_it_appears(name: str, geometry, results, slot: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            w = Window.attach(name)
            break
        except shmwin.WindowNotFoundError:
            if time.monotonic() > deadline:
                raise
    try:
        results[slot] = 1 if w.geometry == geometry and 0 <= w.total() <= 2 else 2  # others may add
        w.add()
    finally:
        w.close()


def test_an_attach_racing_a_create_never_sees_a_half_built_segment(make_name):
    ctx = mp.get_context("fork")
    for round_ in range(4):
        name = make_name(f"race{round_}")
        big = geometry.Geometry((geometry.Ring(10**9, 200_000),), ("ok",), n_stripes=8)  # ~30 MB
        results = ctx.Array("b", 3, lock=False)
        procs = [
            ctx.Process(target=_attach_when_it_appears, args=(name, big, results, i)) for i in range(3)
        ]
        for p in procs:
            p.start()
        with Window(name, span=200_000, buckets=200_000, fields=("ok",), stripes=8) as w:
            for p in procs:
                p.join(60)
                assert p.exitcode == 0
            assert list(results) == [1, 1, 1]
            assert w.total() == 3
            w.unlink()


def _create_or_attach_and_add(name: str, n: int) -> None:
    w = Window(name, span="1h", fields=("ok",))
    for _ in range(n):
        w.add()
    w.close()


def test_concurrent_create_or_attach_agree_on_one_segment(name):
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_create_or_attach_and_add, args=(name, 1000)) for _ in range(6)]
    run_all(procs, timeout_s=60)
    with Window.attach(name) as w:
        assert w.total() == 6000
        w.unlink()


def test_a_lowered_rows_in_use_word_does_not_hide_counts(name):
    """rows_in_use is outside the header checksum: readers must not trust it to skip rows."""
    with Window(name, span=60, buckets=60, stripes=4) as w:
        def child() -> None:
            w.add(300)
        for _ in range(3):
            p = mp.get_context("fork").Process(target=child)
            p.start()
            p.join()
        w.add(100)
        assert w.total() == 1000
        fd = os.open(shmwin.backends.shm.segment.path_of(name), os.O_RDWR)
        os.pwrite(fd, (1).to_bytes(8, "little"), layout.ROWS_IN_USE_OFF)  # lowered to row 0 alone
        os.close(fd)
        with Window.attach(name) as fresh:
            assert fresh.total() == 1000
        w.unlink()


@pytest.mark.parametrize("offset", [layout.INDEX_OFF, layout.ROWS_TOP_OFF, layout.KEYS_OFF])
def test_junk_in_the_key_tables_state_words_is_refused_on_attach(name, offset):
    """The key table's state words are outside the header checksum: junk there is a clear
    CorruptSegmentError at attach, never a wild read."""
    with Window(name, span=60, buckets=6, keyed=True) as w:
        w.add(1, key="a")
        fd = os.open(shmwin.backends.shm.segment.path_of(name), os.O_RDWR)
        os.pwrite(fd, (1 << 60).to_bytes(8, "little"), offset)
        os.close(fd)
        with pytest.raises(shmwin.CorruptSegmentError, match="key table is corrupt"):
            Window.attach(name)
        w.unlink()


@pytest.mark.parametrize("field", ["chunks_off", "n_chunks"])
@pytest.mark.parametrize("resealed", [False, True], ids=["checksum", "resealed"])
def test_a_moving_logs_chunk_heap_in_the_header_is_checked(name, field, resealed):
    """Role moving-log: the chunk heap's offset and size are in the checksummed header, and
    must be what the geometry gives (a junk one resealed with a good checksum too)."""
    import zlib

    from shmwin.integrations.limits_moving import MovingLogs

    m = MovingLogs.open(name, 100, 10**10, 1024, shmwin.ManualClock(10**12), 8, create=True)
    m.hit("k", 1)
    m.close()
    offset = {"chunks_off": 176, "n_chunks": 184}[field]
    header = shmwin.backends.shm.format.HEADER
    assert header[[f[0] for f in header].index(field)][1] == offset
    with open(path_of(name), "rb") as f:
        page = bytearray(f.read(layout.HEADER_BYTES))
    moved = int.from_bytes(page[offset : offset + 8], "little") + 4096
    page[offset : offset + 8] = moved.to_bytes(8, "little")
    if resealed:
        page[layout.HEADER_CRC_OFF : layout.HEADER_CRC_OFF + 4] = zlib.crc32(
            page[layout.CRC_START : layout.CRC_END]
        ).to_bytes(4, "little")
    _poke(name, 0, bytes(page))
    try:
        complaint = "offsets do not match" if resealed else "checksum"
        with pytest.raises(shmwin.CorruptSegmentError, match=complaint):
            Window.attach(name)
    finally:
        shmwin.unlink(name)
