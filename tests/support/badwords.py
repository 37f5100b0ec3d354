"""Junk words in live segments (tests/integration/core/test_bad_words.py): the four kinds of
segment, where their words are, the junk to write, and every reader and writer to call.

Importable by the fresh ``python -c`` child that attaches the corrupted segments, so the
parent (attached when the word went bad) and the child (attached after) run the same calls.
An outcome is fine when a call returns, or raises what shmwin documents for a bad segment or
bad counts: a :class:`ShmwinError` (CorruptSegmentError, ...), a ValueError, or an
OverflowError (an int64 count or total pushed past int64 by junk). Anything else -- a
SystemError, a TypeError, a signal, a hang, a sanitizer report -- is a bug.
"""

from __future__ import annotations

import mmap
import os
import random
import signal
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

from shmwin import Limiter, ManualClock, ShmwinError, Window, geometry
from shmwin.backends.shm import header, layout
from shmwin.backends.shm.segment import path_of

S = 10**9
NOW = 1000 * S
KINDS = ("keyed", "unkeyed", "limiter", "exact")
KEYS = ("a", "b", b"c")
CAPACITY = 48  # keyed kinds: the calls fill it (the index grows, rows are reserved), then reuse idle keys
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
FINE = (ShmwinError, ValueError, OverflowError)


def open_kind(kind: str, name: str, create: bool) -> tuple[Any, ManualClock]:
    """A window or limiter of ``kind``, created (and filled) or attached, and its clock; lock
    waits are short, so that a lock held by junk is a LockTimeoutError soon, never a hang."""
    clock = ManualClock(NOW)
    if not create:
        opener = Window.attach if kind in ("keyed", "unkeyed") else Limiter.attach
        return opener(name, clock=clock, lock_timeout=0.5), clock
    if kind in ("keyed", "unkeyed"):
        shape = {"capacity": CAPACITY} if kind == "keyed" else {"stripes": 2}
        w = Window(name, span=60, buckets=6, fields=("a", "b"), clock=clock, lock_timeout=0.5, **shape)
        for i, key in enumerate(KEYS):
            w.add(i + 1, key=key if kind == "keyed" else None)
            clock.advance(7)
            w.add(2, "b", key=key if kind == "keyed" else None)
        if kind == "keyed":
            w.add(1, key="gone")
            w.clear("gone")  # a row on the free list
        return w, clock
    exact = kind == "exact"
    lim = Limiter(name, "5/second;50/minute", capacity=CAPACITY, exact=exact, clock=clock, lock_timeout=0.5)
    for key in KEYS:
        for _ in range(3):
            lim.hit(key)
            clock.advance(0.3)
    lim.hit("gone")
    lim.clear("gone")
    return lim, clock


def _many(write: Callable[[str], object], prefix: str) -> None:
    """New keys up to the table's capacity and past it: the index grows (a rebuild), rows are
    reserved, and at capacity a rebuild looks for idle keys (KeyTableFullError if none)."""
    for i in range(CAPACITY + 2):
        write(f"{prefix}{i}")


def _later(clock: ManualClock, write: Callable[[str], object]) -> None:
    """Every key idle: new keys take idle keys' entries and rows, or a rebuild frees them."""
    clock.advance(120)
    for i in range(4):
        write(f"late{i}")


Call = Callable[[Any, ManualClock], object]


def calls(kind: str) -> list[tuple[str, Call]]:
    """Every reader and writer of ``kind``, each with the arguments the fuzz uses, in order."""
    if kind == "keyed":
        return [
            ("add", lambda w, _: w.add(1, key="a")),
            ("add new", lambda w, _: w.add(1, "b", key="new")),
            ("add_and_total", lambda w, _: w.add_and_total(2, key="b")),
            ("add_many", lambda w, _: w.add_many([1, 2, 3], key=b"c")),
            ("total key", lambda w, _: w.total(key="a")),
            ("total", lambda w, _: w.total()),
            ("totals key", lambda w, _: w.totals(key=b"c")),
            ("totals", lambda w, _: w.totals()),
            ("series key", lambda w, _: w.series(key="b")),
            ("rate key", lambda w, _: w.rate(key="a", last=60)),
            ("keys", lambda w, _: w.keys()),
            ("top", lambda w, _: w.top(3)),
            ("last_write_ns", lambda w, _: w.last_write_ns()),
            ("nbytes", lambda w, _: w.nbytes),
            ("clear", lambda w, _: w.clear("b")),
            ("add again", lambda w, _: w.add(1, key="b")),
            ("many keys", lambda w, _: _many(lambda k: w.add(1, key=k), "m")),
            ("idle keys", lambda w, clock: _later(clock, lambda k: w.add(1, key=k))),
            ("reset", lambda w, _: w.reset()),
        ]
    if kind == "unkeyed":
        return [
            ("add", lambda w, _: w.add(1)),
            ("add b", lambda w, _: w.add(2, "b")),
            ("add_many", lambda w, _: w.add_many([1, 2, 3])),
            ("add_and_total", lambda w, _: w.add_and_total(1)),
            ("total", lambda w, _: w.total()),
            ("totals", lambda w, _: w.totals()),
            ("series", lambda w, _: w.series()),
            ("rate", lambda w, _: w.rate(last=60)),
            ("last_write_ns", lambda w, _: w.last_write_ns()),
            ("reclaim", lambda w, _: w.reclaim()),
            ("stripe_owners", lambda w, _: w.stripe_owners()),
            ("later", lambda w, clock: (clock.advance(30), w.add(1), w.total())),
            ("reset", lambda w, _: w.reset()),
        ]
    return [
        ("hit", lambda lim, _: lim.hit("a")),
        ("hit new", lambda lim, _: lim.hit("new")),
        ("hit cost", lambda lim, _: lim.hit(b"c", cost=2)),
        ("test", lambda lim, _: lim.test("b")),
        ("stats", lambda lim, _: lim.stats("a")),
        ("stats_all", lambda lim, _: lim.stats_all(b"c")),
        ("acquire", lambda lim, _: lim.acquire("b", timeout=0)),
        ("window total", lambda lim, _: lim.window.total()),
        ("window totals key", lambda lim, _: lim.window.totals(key="a")),
        ("window keys", lambda lim, _: lim.window.keys()),
        ("clear", lambda lim, _: lim.clear("b")),
        ("hit again", lambda lim, _: lim.hit("b")),
        ("later", lambda lim, clock: (clock.advance(0.7), lim.hit("a"), lim.stats("a"))),
        ("many keys", lambda lim, _: _many(lim.hit, "m")),
        ("idle keys", lambda lim, clock: _later(clock, lim.hit)),
    ]


def run_calls(kind: str, obj: Any, clock: ManualClock, seed: str) -> list[str]:
    """Call everything, in an order shuffled by ``seed`` (a write to a key heals a junk word of
    its row: what runs before it reads the junk); the outcomes that are bugs, described."""
    bad = []
    order = calls(kind)
    random.Random(seed).shuffle(order)
    for what, call in order:
        try:
            call(obj, clock)
        except FINE as exc:
            if isinstance(exc, SystemError):  # (never a ShmwinError, but be sure)
                bad.append(f"{what}: {exc!r}")
        except Exception as exc:
            bad.append(f"{what}: {exc!r}")
    return bad


def geometry_of(name: str) -> tuple[geometry.Geometry, layout.Layout, geometry.Meta, int]:
    with open(path_of(name), "rb") as f:
        page, size = f.read(layout.HEADER_BYTES), os.fstat(f.fileno()).st_size
    g, lay, meta = header.unpack_header(page, size)
    return g, lay, meta, size


def words(name: str) -> list[int]:
    """Offsets of the words worth spoiling in segment ``name`` as it is now: the header's (the
    checksummed geometry, the counters after it, the key table's state), a lock's intent,
    the stripe table's, the current index's entries in use, and the rows' key headers, ring
    headers and buckets (the one written last, and the one after it)."""
    g, lay, _, _ = geometry_of(name)
    with open(path_of(name), "rb") as f:
        raw = f.read(lay.rows_off + lay.row_bytes * 3) if g.keyed else f.read()
    word = lambda off: struct.unpack_from("<q", raw, off)[0]  # noqa: E731
    out = [0, 8, 16, 24, 32, 40, 56, 64, 112, 128, 136, 144, 152, 768, 776, 1024]
    out.append(lay.locks_off + layout.LOCK_INTENT_OFF)
    rows = range(3)
    if g.keyed:
        out += [layout.INDEX_OFF + 8 * i for i in range(7)]
        index = word(layout.INDEX_OFF) & 0xFFFFFFFF
        base, slots = lay.index_copy(index, g.key_slots)
        entry = layout.KEY_ENTRY_BYTES
        used = [base + entry * p for p in range(slots) if word(base + entry * p) != 0][:4]
        out += [e + w for e in used for w in range(0, entry, 8)]  # its generation, its place
    else:
        out += [lay.stripes_off + r * layout.STRIPE_ENTRY_BYTES + w for r in rows for w in (0, 8, 16)]
    for r in rows:
        row = lay.rows_off + r * lay.row_bytes
        if g.keyed:
            out += [row + w for w in (0, 8, 16, 24)]  # gen, last_ns, ident, the key's first bytes
        for i, ring in enumerate(g.rings):
            head = row + lay.ring_words[i] * layout.WORD_BYTES
            if lay.compact(i):  # head, total, zeroed, tail; the words holding the newest count and the next
                out += [head + 8 * w for w in range(layout.LIMITER_RING_WORDS)]
                first, width, epoch = row + lay.bucket_words[i] * 8, lay.count_bytes[i], word(head)
                newest = epoch % ring.n_buckets if epoch >= 0 else 0
                for slot in sorted({newest, (newest + 1) % ring.n_buckets}):
                    out.append(first + slot * width // 8 * 8)
                continue
            out += [head, head + 8]
            if lay.head_slots == 2:
                out.append(head + lay.slot_words * 8)  # the tail
            first = row + lay.bucket_words[i] * layout.WORD_BYTES
            epochs = [word(first + slot * lay.slot_words * 8) for slot in range(ring.n_buckets)]
            newest = epochs.index(max(epochs))  # the bucket (or log entry) written last
            for slot in sorted({newest, (newest + 1) % ring.n_buckets}):
                out += [first + slot * lay.slot_words * 8, first + slot * lay.slot_words * 8 + 8]
    return out


def junk(rng: random.Random, current: int) -> Iterator[int]:
    """What a word is set to: the extremes, a random value, and two of its bits flipped."""
    yield from (0, -1, INT64_MIN, INT64_MAX, rng.randrange(INT64_MIN, INT64_MAX))
    for bit in (rng.randrange(64), rng.choice((23, 31, 32, 62, 63))):
        flipped = (current ^ (1 << bit)) & (2**64 - 1)
        yield flipped - 2**64 if flipped >= 2**63 else flipped


def spoil(name: str, offset: int, value: int) -> int:
    """Set the word at ``offset`` of the live segment ``name`` (a raw mapping of its file);
    the value it held."""
    fd = os.open(path_of(name), os.O_RDWR)
    try:
        with mmap.mmap(fd, os.fstat(fd).st_size) as mm:
            old = struct.unpack_from("<q", mm, offset)[0]
            struct.pack_into("<q", mm, offset, value)
            return int(old)
    finally:
        os.close(fd)


def _die_inside(kind: str, name: str, now_ns: int) -> int:
    """Fork a writer that attaches ``name`` at ``now_ns`` and dies (SIGKILL) midway through a
    section, holding its lock; its wait status."""
    section, store = ("insert", 3) if kind == "keyed" else ("hit", 2)
    pid = os.fork()
    if pid == 0:  # never back into the loop
        try:
            from shmwin import _core

            obj, clock = open_kind(kind, name, create=False)
            clock.set(now_ns)
            _core.failpoint(section, store, signal.SIGKILL)
            obj.add(1, key="dying") if kind == "keyed" else obj.hit("a")
        finally:
            os._exit(1)
    return os.waitpid(pid, 0)[1]


def dier_main() -> None:
    """The process that forks the dying writers: reads ``kind name now_ns`` lines, answers
    each with the dead writer's wait status once it is dead. Says its core first."""
    from shmwin import _core

    print("core", _core.__file__, flush=True)
    for line in sys.stdin:
        kind, name, now_ns = line.split()
        print(_die_inside(kind, name, int(now_ns)), flush=True)


class Dier:
    """Writers that die inside a section of a segment, forked by one small process started
    once (:func:`dier_main`), not by the test's: forking pytest's worker (its heap, and under
    ASan every Python object through ASan's malloc) cost several times what the writer did,
    once per trial. Each writer attaches the segment afresh, at the parent's time, and dies
    where a writer forked from the parent did: the same section, the same store."""

    def __init__(self, env: dict[str, str]) -> None:
        argv = [sys.executable, __file__, "--dier"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdout is not None
        self.core = self.proc.stdout.readline().removeprefix("core ").strip()  # the build it runs

    def kill_inside(self, kind: str, name: str, now_ns: int) -> int:
        """The wait status of a writer of ``kind`` that died inside a section of ``name``."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{kind} {name} {now_ns}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        assert answer, f"the dier exited {self.proc.wait(30)}"
        return int(answer)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        assert self.proc.wait(60) == 0


def child_main(kind: str, trials: list[str]) -> None:
    """The fresh process: attach each spoiled segment (``name=seed``) and call everything.
    Prints the name before each (the last one printed is the culprit of a crash), BAD lines,
    then done."""
    import shmwin._core

    print("core", shmwin._core.__file__, flush=True)
    for trial in trials:
        name, _, seed = trial.partition("=")
        print("at", name, flush=True)
        try:
            obj, clock = open_kind(kind, name, create=False)
        except FINE:
            continue
        except Exception as exc:
            print("BAD", name, f"attach: {exc!r}", flush=True)
            continue
        for line in run_calls(kind, obj, clock, seed):
            print("BAD", name, line, flush=True)
        with suppress(*FINE):
            obj.close()
    print("done", len(trials), flush=True)


if __name__ == "__main__":
    dier_main() if sys.argv[1:] == ["--dier"] else child_main(sys.argv[1], sys.argv[2:])
