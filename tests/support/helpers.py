"""Worker bodies for multiprocess tests (importable by spawned children)."""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shmwin import ManualClock, Window

ROOT = Path(__file__).resolve().parents[2]


def add_many(name: str, n: int, err_every: int = 0) -> None:
    """Attach by name and add ``n`` to "ok" (and 1 to "err" every ``err_every`` adds)."""
    w = Window.attach(name)
    try:
        for i in range(n):
            w.add()
            if err_every and i % err_every == 0:
                w.add(1, "err")
    finally:
        w.close()


def add_with_clock(name: str, clock_path: str, n: int, field: str) -> None:
    w = Window.attach(name, clock=ManualClock(path=clock_path))
    w.add(n, field)
    w.close()


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in an unrelated ``python -c`` process; raise with its stderr on failure."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stderr}"
    return proc


def assert_no_fail_point(extension: bytes) -> None:
    """A production build of the core (setup.py's): no fail-point symbol or string in it, and
    no environment variable read (fail points are the test build's: -DSHMWIN_TEST)."""
    lowered = extension.lower()
    for word in (b"failpoint", b"fp_enter", b"fp_fire", b"getenv", b"shmwin_test"):
        assert word not in lowered, f"{word!r} in a production build of the core"


def state_of(pid: int) -> str:
    """The /proc state letter of ``pid`` ("T" once it stopped itself)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def stop_inside(name: str, section: str, ready, store: int = 1, key: str = "k") -> None:
    """Child body: attach ``name`` and stop (SIGSTOP) right after store ``store`` of the
    native ``section``, holding its lock(s). The parent SIGKILLs it when done."""
    import signal

    from shmwin import Limiter, _core

    limiter = section == "hit"
    target = Limiter.attach(name) if limiter else Window.attach(name)
    ready.set()
    _core.failpoint(section, store, signal.SIGSTOP)
    if section == "reset":
        target.reset()  # type: ignore[union-attr]
    elif limiter:
        target.hit(key)  # type: ignore[union-attr]
    else:
        target.add(1)
    raise AssertionError(f"section {section!r} never reached store {store}")


def wait_stopped(pid: int, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while state_of(pid) != "T":
        assert time.monotonic() < deadline, f"process {pid} never stopped"
        time.sleep(0.005)


FUTEX_WAITERS = 0x80000000  # the bit a process sets in a mutex's word before it sleeps on it
FUTEX_TID_MASK = 0x3FFFFFFF  # the holder's thread id


def lock_words(name: str) -> list[int]:
    """The first word of each robust mutex in the lock table of segment ``name`` (glibc's futex
    word: the holder's tid, FUTEX_WAITERS once a locker slept on it). A sleeper's bit stays until
    the holder unlocks, so with the holder stopped it tells, after the fact and whatever the
    machine's load, whether any process blocked on that lock at all."""
    from shmwin.backends.shm import header, layout
    from shmwin.backends.shm.segment import path_of

    with open(path_of(name), "rb") as f:
        g, lay, _ = header.unpack_header(f.read(layout.HEADER_BYTES), os.fstat(f.fileno()).st_size)
        f.seek(lay.locks_off)
        table = f.read(g.n_locks * layout.LOCK_BYTES)
    return [int.from_bytes(table[i : i + 4], "little") for i in range(0, len(table), layout.LOCK_BYTES)]


FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)  # a fenced block of Markdown


@dataclass(frozen=True)
class Block:
    """A fenced block of a Markdown page: what the docs tests run."""

    page: Path
    line: int
    lang: str
    code: str
    before: str  # the line before the fence: a marker comment there may skip the block

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """Each fenced block of a Markdown page, in reading order."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[: m.start()].rstrip("\n").rpartition("\n")[2]
        found.append(Block(page, line, m.group(1), m.group(2), before))
    return found


def open_core_as(front: Any, core_type: type) -> Any:
    """A core of ``core_type`` built over the mapping of ``front`` (a Window, Limiter, ... or its
    backend), whatever its role: how a test asks a role's type about another role's segment
    (``_core.open`` itself never builds one over it). Its init refuses, as the old per-call
    role checks did; a core it does build is closed here at once."""
    backend = getattr(front, "_backend", front)
    fd = os.open(os.devnull, os.O_RDONLY)  # a keyed core dups it; the refusal comes before
    try:
        core = core_type(backend._seg.mm, name=backend.name, timeout_ns=0, fd=fd)
    finally:
        os.close(fd)
    core.close()
    return core


def in_threads(work: Callable[[], object], n: int) -> None:
    """work() in n threads of this process, all started before any is joined; returns when
    every one has ended."""
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_all(procs: list[Any], timeout_s: float = 120) -> None:
    """Start every process (multiprocessing's), then join each, ``timeout_s`` at most: each
    must have exited 0."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"


@contextmanager
def forked_askers(
    local: Callable[[str, int, int], Any], worker: Callable[[str, Any], None], name: str, n: int = 2
) -> Iterator[Callable[[int, str, int, int], Any]]:
    """``ask(who, op, now, cost)``: ``local(op, now, cost)`` for who 0 (this process), else the
    answer of forked ``worker(name, conn)`` number ``who`` (1..n), which reads ``(op, now,
    cost)`` from its pipe until None. On a clean exit each worker must have exited 0."""
    ctx = mp.get_context("fork")
    pipes, procs = [], []
    try:
        for _ in range(n):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=worker, args=(name, theirs), daemon=True)
            p.start()
            pipes.append(mine)
            procs.append(p)

        def ask(who: int, op: str, now: int, cost: int) -> Any:
            if who == 0:
                return local(op, now, cost)
            pipes[who - 1].send((op, now, cost))
            return pipes[who - 1].recv()

        yield ask
        for conn in pipes:
            conn.send(None)
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
