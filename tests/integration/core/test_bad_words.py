"""One bad word in a live segment: a clear ShmwinError, never a SystemError, a signal, a
hang, a multi-GiB reservation, or undefined behaviour in the core.

The first tests each aim at one input once found to misbehave; the fuzz at the end spoils
every kind of word of every kind of segment with extreme, random and bit-flipped values and
calls every reader and writer, in the process attached when the word went bad and in a
fresh one. scripts/checks.d/50-sanitizers.sh runs this file (marker ``sanitize``) against a
core built with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import faulthandler
import os
import random
import signal
import subprocess
import sys
import time
from contextlib import suppress
from typing import Any

import pytest
from support import badwords
from support.badwords import FINE, INT64_MIN, NOW, S, open_kind, run_calls, spoil
from support.helpers import ROOT
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

import shmwin
from shmwin import CorruptSegmentError, ManualClock, Window, _core
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of

pytestmark = pytest.mark.sanitize
_W = layout.WORD_BYTES


@pytest.fixture
def keyed(name):
    w = Window(name, span=60, buckets=6, keyed=True, clock=ManualClock(NOW), lock_timeout=0.5)  # 2**24 keys
    for key in ("a", "b", "c"):
        w.add(1, key=key)
    yield w
    w.close()
    w.unlink()


def word(name: str, offset: int) -> int:
    with open(path_of(name), "rb") as f:
        return int.from_bytes(os.pread(f.fileno(), _W, offset), "little", signed=True)


def keyed_reads(w: Window, by_key_only: bool = False) -> list:
    """Every keyed read: by key (Core.find: the index, then the rows), then of the whole table
    (the rows up to rows_top, read in Python)."""
    by_key = [lambda: w.total(key="a"), lambda: w.totals(key="a"), lambda: w.series(key="a"),
              lambda: w.rate(key="a")]  # fmt: skip
    return by_key if by_key_only else [*by_key, lambda: w.total(), lambda: w.keys(), lambda: w.top(2)]


def test_find_with_a_bad_index_descriptor_is_a_corrupt_segment(keyed, name):
    """Found: Core.find treated find_key's error (-1) as found and built a tuple from
    uninitialised words: a SystemError in a process attached before the word went bad."""
    spoil(name, layout.INDEX_OFF, 3)  # a plausible descriptor, without its check
    with pytest.raises(CorruptSegmentError, match="index descriptor"):
        keyed._backend._core.find("a")
    for read in keyed_reads(keyed, by_key_only=True):
        with pytest.raises(CorruptSegmentError):
            read()
    with pytest.raises(CorruptSegmentError):
        keyed.add(1, key="new")
    assert keyed.total() == 3  # the rows alone: the index is not read
    with pytest.raises(CorruptSegmentError, match="key table is corrupt"):
        Window.attach(name)


def test_a_key_count_of_int64_min_is_refused_not_overflowed(keyed, name):
    """Found: remember() computed 4 * keys, which overflows when keys is -2**63."""
    spoil(name, layout.KEYS_OFF, INT64_MIN)
    keyed.add(1, key="a")  # a known key: no count is consulted
    with pytest.raises(CorruptSegmentError, match="counts"):
        keyed.add(1, key="new")
    with pytest.raises(CorruptSegmentError, match="key table is corrupt"):
        Window.attach(name)


def _free_row(w: Window, name: str) -> int:
    """Clear key "b": its row goes on the free list, and is the next one a new key takes."""
    row = w._backend._keys.find("b")[0]
    w.clear("b")
    assert word(name, layout.FREE_HEAD_OFF) == row + 1
    return row


def test_a_free_rows_generation_of_int64_min_is_refused(keyed, name):
    """Found: assign() negated the old generation of the row it takes (-INT64_MIN)."""
    lay = keyed._backend._lay
    row = _free_row(keyed, name)
    spoil(name, lay.rows_off + row * lay.row_bytes, INT64_MIN)
    with pytest.raises(CorruptSegmentError, match="impossible generation"):
        keyed.add(1, key="new")
    assert keyed.total(key="a") == 1  # nothing written: the rest of the table works


INTERRUPTED_INSERT = """
import sys
from shmwin import ManualClock, Window
w = Window.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
w.add(1, key="interrupted")
raise SystemExit("the fail point never fired")
"""


@pytest.mark.failpoints
@pytest.mark.parametrize("spoiled", ["row", "entry"])
def test_a_repair_after_an_interrupted_insert_meets_int64_min_generations(keyed, name, spoiled):
    """Found: repair_keys() negated the generation of a row (and of an entry) it found
    unpublished after an insert was killed midway: -INT64_MIN. A junk entry becomes a
    tombstone, a junk row is left out (named and freed by none), and the table goes on."""
    lay, g = keyed._backend._lay, keyed.geometry
    taken = _free_row(keyed, name)  # the row the insert takes
    env = dict(os.environ, PYTHONPATH=str(ROOT), SHMWIN_FAILPOINT=f"insert:3:{int(signal.SIGKILL)}")
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_INSERT, name, str(NOW)], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, describe(proc)
    p = word(name, lay.locks_off + layout.LOCK_INTENT_OFF)  # LOCK_KEYS's intent: the entry written
    base = lay.index_copy(word(name, layout.INDEX_OFF) & 0xFFFFFFFF, g.key_slots)[0]
    entry = base + layout.KEY_ENTRY_BYTES * p
    row = lay.rows_off + taken * lay.row_bytes
    assert word(name, row) < 0 and word(name, entry) < 0  # both unpublished: stores 2 and 3
    spoil(name, row if spoiled == "row" else entry, INT64_MIN)
    keyed.add(1, key="new")  # takes LOCK_KEYS, whose owner died: the repair runs first
    assert keyed.total(key="new") == 1 and keyed.total(key="a") == 1
    assert sorted(keyed.keys()) == ["a", "c", "new"]


def test_a_hugely_negative_rows_reserved_is_refused_before_any_reservation(keyed, name):
    """Found: row_pages() multiplied rows_reserved (-2**62) by the row size and handed the
    wrapped offset to posix_fallocate and madvise."""
    blocks = os.stat(path_of(name)).st_blocks
    spoil(name, layout.ROWS_RESERVED_OFF, -(2**62))
    with pytest.raises(CorruptSegmentError, match="rows_reserved"):
        keyed.add(1, key="new")
    keyed.add(1, key="a")  # a key this process knows: its row is reserved whatever the word says
    with pytest.raises(CorruptSegmentError):
        keyed.total(key="b")  # a lookup reads the words
    assert os.stat(path_of(name)).st_blocks == blocks


@pytest.mark.parametrize("bit", [23, 31, 40])
def test_a_flipped_bit_in_rows_top_reserves_nothing(keyed, name, bit):
    """Found: with bit 23 of rows_top flipped, one insert reserved and populated 3.2 GiB of
    /dev/shm in 1.8 s (bit 23 of a larger table: 13 GB, a 10 s stall)."""
    blocks = os.stat(path_of(name)).st_blocks
    spoil(name, layout.ROWS_TOP_OFF, word(name, layout.ROWS_TOP_OFF) ^ (1 << bit))
    started = time.monotonic()
    with pytest.raises(CorruptSegmentError, match="rows_top"):
        keyed.add(1, key="new")
    for read in keyed_reads(keyed):
        with pytest.raises(CorruptSegmentError):
            read()
    assert time.monotonic() - started < 2
    assert os.stat(path_of(name)).st_blocks == blocks


def test_a_bad_rows_top_is_raised_where_a_row_would_be_followed(keyed, name):
    """find_key checks rows_top at the first index entry of the key's hash, not before its
    probe (a foreign key's sum probes every fixed window: issue #30): a key found raises, as
    every insert does; a key whose probe ends at an entry never used follows no row, counts 0."""
    spoil(name, layout.ROWS_TOP_OFF, word(name, layout.ROWS_TOP_OFF) ^ (1 << 23))
    core = keyed._backend._core
    with pytest.raises(CorruptSegmentError, match="rows_top"):
        core.find("a")
    with pytest.raises(CorruptSegmentError, match="rows_top"):
        keyed.add(1, key="new")
    assert core.find("absent") is None  # no entry of its hash: nothing followed


FULL_TMPFS = """
import os, signal, struct, subprocess, sys
import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of
w = Window("full", span=60, buckets=6, clock=ManualClock(1000 * 10**9), keyed=True)
n = 0
try:
    while True:  # fill the tmpfs with keys: no room for one more row
        w.add(1, key=f"k{n}")
        n += 1
except shmwin.OutOfSpaceError:
    pass
g, lay = w.geometry, w._backend._lay
offset, value = {
    "rows_reserved": (layout.ROWS_RESERVED_OFF, lay.n_rows),
    "rows_top": (layout.ROWS_TOP_OFF, lay.n_rows),
    "index": (layout.INDEX_OFF, 2 * g.index_levels - 1),
}[sys.argv[1]]
fd = os.open(path_of("full"), os.O_RDWR)  # within the word's bounds, past what is reserved
tag = struct.unpack("<q", os.pread(fd, 8, offset))[0] & ~0xFFFFFFFF  # the old value's
os.pwrite(fd, (value | tag).to_bytes(8, "little", signed=True), offset)
os.close(fd)
def every_call(w):
    for call in (lambda: w.total(key="k1"), lambda: w.total(), lambda: w.keys(), lambda: w.top(3),
                 lambda: w.add(1, key="new"), lambda: w.add(1, key="k2"), lambda: w.clear("k3"),
                 lambda: w.totals(), lambda: w.reset()):
        try:
            call()
        except shmwin.ShmwinError as exc:
            print(type(exc).__name__, flush=True)
every_call(w)
child = subprocess.run([sys.executable, "-c", sys.argv[2]], capture_output=True, text=True)
assert child.returncode == 0, (child.returncode, child.stderr)
print(child.stdout, "fresh ok", n)
"""
FRESH = """
import shmwin
from shmwin import Window
try:
    Window.attach("full")
except shmwin.CorruptSegmentError as exc:
    print("CorruptSegmentError")
"""


@needs_namespace
@pytest.mark.parametrize("spoiled", ["rows_reserved", "rows_top", "index"])
def test_a_state_word_past_the_reservation_on_a_full_tmpfs_is_no_sigbus(spoiled):
    """A value within the word's own bounds but past what the file reserves would send a
    reader into the holes of the sparse file: on a full tmpfs, a SIGBUS. The words carry a
    check, so it is a CorruptSegmentError, in the attached process and in a fresh one."""
    proc = run_in_namespace(python_argv(FULL_TMPFS, spoiled, FRESH), shm_size="2m", hidepid=None, timeout=120)
    assert proc.returncode == 0, describe(proc)
    assert "fresh ok" in proc.stdout and proc.stdout.count("CorruptSegmentError") >= 2, describe(proc)
    assert "Error" not in proc.stdout.replace("CorruptSegmentError", ""), describe(proc)


# -- the fuzz ------------------------------------------------------------------------------

# Segments spoiled, then attached by one fresh process. 200, not 48: each fresh process's start
# (an interpreter importing shmwin: 0.1 CPU-s, several times that under ASan's malloc) was paid
# 59 times in the fuzz, now 18; the same trials, each still attached fresh, and the child names
# each segment before its calls, so a crash still points at its culprit. 200 segments held at
# once are 4 MiB of /dev/shm (16-20 KiB each) and 200 descriptors.
CHUNK = 200
REPAIRED = (2, 3, 4)  # junk values also tried behind a repair: INT64_MIN, INT64_MAX, random
Trial = tuple[int, int, bool]  # word, junk value, a section interrupted first


def _die_inside(kind: str, name: str, clock: ManualClock, dier: badwords.Dier) -> None:
    """A writer dies (SIGKILL) midway through a section, holding its lock: the next call to
    take that lock repairs first (EOWNERDEAD), over whatever word is spoiled."""
    status = dier.kill_inside(kind, name, clock())
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def _trial(kind: str, name: str, trial: Trial, dier: badwords.Dier | None) -> tuple[Any, str, list[str]]:
    """Spoil word i of a new segment with junk value j (after a section died inside it, if
    asked) and call everything: the segment's object, what was done, the outcomes that are bugs."""
    i, j, interrupted = trial
    obj, clock = open_kind(kind, name, create=True)
    if interrupted:
        assert dier is not None
        _die_inside(kind, name, clock, dier)
    offset = badwords.words(name)[i]
    current = word(name, offset)
    value = list(badwords.junk(random.Random(f"{kind}:{i}"), current))[j]
    spoil(name, offset, value)
    what = f"{kind} word {offset} {current:#x} -> {value:#x}{' after a death inside' if interrupted else ''}"
    return obj, what, run_calls(kind, obj, clock, f"{kind}:{i}:{j}")


def _chunk(kind: str, trials: list[Trial], make_name, dier: badwords.Dier | None) -> list[str]:
    opened, done, bad = {}, {}, []
    try:
        for trial in trials:
            name = make_name("-".join(str(int(x)) for x in trial))
            obj, what, found = _trial(kind, name, trial, dier)
            opened[name], done[name] = obj, what
            bad += [f"{what} (attached): {line}" for line in found]
        seeds = [f"{name}={kind}:{i}:{j}" for name, (i, j, _) in zip(opened, trials, strict=True)]
        proc = subprocess.run(
            [sys.executable, badwords.__file__, kind, *seeds], capture_output=True, text=True, timeout=300,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        lines = proc.stdout.splitlines()
        at = [line.split()[1] for line in lines if line.startswith("at ")]
        culprit = done.get(at[-1], "") if at else ""
        assert proc.returncode == 0 and f"done {len(opened)}" in lines, f"{culprit}\n{describe(proc)}"
        assert f"core {_core.__file__}" in lines, describe(proc)  # the same build
        bad += [f"{done[line.split()[1]]} (fresh): {line}" for line in lines if line.startswith("BAD ")]
    finally:
        for name, obj in opened.items():
            with suppress(*FINE):
                obj.close()
            shmwin.unlink(name)
    return bad


def _n_words(kind: str, make_name) -> int:
    probe = make_name("probe")
    obj, _ = open_kind(kind, probe, create=True)
    n_words = len(badwords.words(probe))
    obj.close()
    shmwin.unlink(probe)
    return n_words


@pytest.mark.parametrize("kind", badwords.KINDS)
def test_junk_in_any_word_of_a_live_segment(kind, make_name):
    """Every word worth spoiling (badwords.words), set to 0, -1, INT64_MIN, INT64_MAX, a
    random value and two bit flips of itself (seeded), then every reader and writer called."""
    n_words = _n_words(kind, make_name)
    _fuzz(kind, [(i, j, False) for i in range(n_words) for j in range(7)], make_name)


@pytest.mark.failpoints
@pytest.mark.parametrize("kind", [k for k in badwords.KINDS if k != "unkeyed"])
def test_junk_in_any_word_after_a_writer_died_inside(kind, make_name):
    """For keyed kinds, the extremes and the random value again, after a writer died inside a
    section (a fail point), so that the call that takes its lock repairs over the junk."""
    n_words = _n_words(kind, make_name)
    _fuzz(kind, [(i, j, True) for i in range(n_words) for j in REPAIRED], make_name)


def _fuzz(kind: str, trials: list[Trial], make_name) -> None:
    faulthandler.dump_traceback_later(900, exit=True)  # a hang in this process: a loud failure
    dier = badwords.Dier(dict(os.environ, PYTHONPATH=str(ROOT))) if any(t[2] for t in trials) else None
    assert dier is None or dier.core == _core.__file__, dier.core  # the same build
    try:
        bad = []
        for at in range(0, len(trials), CHUNK):
            bad += _chunk(kind, trials[at : at + CHUNK], make_name, dier)
    finally:
        faulthandler.cancel_dump_traceback_later()
        if dier is not None:
            dier.close()
    assert not bad, "\n".join(bad[:40])


def test_the_fuzz_spoils_what_it_says(name):
    """The junk values, and words() pointing at words the calls read."""
    values = list(badwords.junk(random.Random(1), 0b1010))
    assert values[:4] == [0, -1, INT64_MIN, 2**63 - 1] and len(values) == 7
    assert all(INT64_MIN <= v < 2**63 for v in values)
    assert all(bin((v ^ 0b1010) & (2**64 - 1)).count("1") == 1 for v in values[5:])
    w, _ = open_kind("keyed", name, create=True)
    offsets = badwords.words(name)
    assert len(offsets) == len(set(offsets)) and all(o % _W == 0 for o in offsets)
    assert layout.ROWS_TOP_OFF in offsets and w._backend._lay.rows_off + 0 in offsets
    assert NOW // S == 1000
    w.close()
    w.unlink()
