"""A Concurrency's live limits, from other processes: holders -- forked, spawned and unrelated
``python -c`` processes -- that open the concurrency once with the limit of their day and never
open it again (stale code), driven on command (:class:`Holder`) or holding and releasing on
their own (:func:`hold_loop`) with a shared log of who is inside, which :func:`check_log`
replays to show that no admission ever left more holders inside than the limit in force."""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.helpers import ROOT

from shmwin import Concurrency

KEY = "k"
KINDS = ("fork", "spawn", "python -c")


def _answer(conc: Concurrency, line: str) -> str:
    """One command of a driven holder: its answer, as a line."""
    if line == "acquire":
        return str(int(conc.acquire(KEY, timeout=0)))
    if line == "release":
        try:
            conc.release(KEY)
        except Exception as exc:  # the driver asserts on it
            return type(exc).__name__
        return "ok"
    if line == "limit":
        return str(conc.limit)
    if line == "count":
        return str(conc.count(KEY))
    return f"unknown {line!r}"


def serve_pipe(name: str, limit: int, conn: Any) -> None:
    """A forked or spawned holder: open once with ``limit``, then answer each command."""
    conc = Concurrency(name, limit)
    conn.send("ready")
    while (line := conn.recv()) is not None:
        conn.send(_answer(conc, line))


def serve_stdio(name: str, limit: int) -> None:
    """A ``python -c`` holder: the same, over its stdin and stdout."""
    conc = Concurrency(name, limit)
    print("ready", flush=True)
    for line in sys.stdin:
        print(_answer(conc, line.strip()), flush=True)


class Holder:
    """A holder process of one of KINDS, opened with ``limit`` (its code's), driven by command."""

    def __init__(self, kind: str, name: str, limit: int):
        self.kind = kind
        if kind == "python -c":
            code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
                    f"from support.conc_live import serve_stdio; serve_stdio({name!r}, {limit})")  # fmt: skip
            self._proc: Any = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, text=True, cwd=ROOT)  # fmt: skip
            assert self._proc.stdout.readline().strip() == "ready"
            self.pid = self._proc.pid
            return
        ctx = mp.get_context(kind)
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=serve_pipe, args=(name, limit, theirs))
        self._proc.start()
        assert self._conn.poll(60) and self._conn.recv() == "ready"
        self.pid = self._proc.pid

    def ask(self, line: str) -> str:
        if self.kind == "python -c":
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()
            return str(self._proc.stdout.readline().strip())
        self._conn.send(line)
        assert self._conn.poll(60), f"{self.kind} holder did not answer {line!r}"
        return str(self._conn.recv())

    def acquire(self) -> bool:
        return self.ask("acquire") == "1"

    def release(self) -> str:
        return self.ask("release")

    def limit(self) -> int:
        return int(self.ask("limit"))

    def kill(self) -> None:
        """SIGKILL: no release, no close -- its slots free only because its stripe's mutex dies."""
        os.kill(self.pid, signal.SIGKILL)
        self._proc.wait() if self.kind == "python -c" else self._proc.join(30)

    def close(self) -> None:
        if self.kind == "python -c":
            if self._proc.poll() is None:
                self._proc.stdin.close()
                self._proc.wait(30)
            return
        if self._proc.is_alive():
            self._conn.send(None)
            self._proc.join(30)


@contextmanager
def holders(name: str, limit: int, kinds: tuple[str, ...] = KINDS) -> Iterator[list[Holder]]:
    """One holder per kind (in that order), each opened with ``limit``; closed after."""
    made: list[Holder] = []
    try:
        for kind in kinds:
            made.append(Holder(kind, name, limit))
        yield made
    finally:
        for h in made:
            h.close()


# -- holders on their own, and the log of who was inside ----------------------------------------


@contextmanager
def _locked(log: Path) -> Iterator[Any]:
    """The log, appended under its flock: what is written meanwhile is the order of events."""
    with open(log, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield f
        finally:
            f.flush()
            fcntl.flock(f, fcntl.LOCK_UN)


def hold_loop(name: str, limit: int, log: str, stop: str, seed: int) -> None:
    """A holder on its own until ``stop`` exists: take the slot (try once, under the log's lock:
    the admission and its "in" line are one event), hold it a moment, write "out" and give it
    back (again one event); one slot at a time. It opened with ``limit`` and never again."""
    rng, conc, me = random.Random(seed), Concurrency(name, limit), os.getpid()
    # opened: from here on its limit is the segment's (an open with another limit would be a
    # change of its own, which the log does not show), so the driver waits for every holder
    Path(f"{stop}.ready.{me}").touch()
    while not os.path.exists(stop):
        with _locked(Path(log)) as f:
            got = conc.acquire(KEY, timeout=0)
            if got:
                f.write(f"in {me}\n")
        if not got:
            time.sleep(rng.uniform(0, 0.002))
            continue
        time.sleep(rng.uniform(0, 0.003))
        with _locked(Path(log)) as f:
            f.write(f"out {me}\n")
            conc.release(KEY)  # raises (the process exits 1) if the slot was not found
    conc.close()


def loop_command(name: str, limit: int, log: Path, stop: Path, seed: int) -> list[str]:
    """:func:`hold_loop` as an unrelated ``python -c`` process."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); "
            "from support.conc_live import hold_loop; "
            f"hold_loop({name!r}, {limit}, {str(log)!r}, {str(stop)!r}, {seed})")  # fmt: skip
    return [sys.executable, "-c", code]


def wait_opened(stop: Path, holders: int, timeout_s: float = 120.0) -> None:
    """Wait until ``holders`` :func:`hold_loop` processes have opened the concurrency: one that
    opened after a change would change the limit back to its own (the newest open wins)."""
    deadline = time.monotonic() + timeout_s
    while len(list(stop.parent.glob(stop.name + ".ready.*"))) < holders:
        assert time.monotonic() < deadline, "the holders did not open in time"
        time.sleep(0.01)


def change(log: Path, limit: int, rule: str, set_limit: Callable[[int, str], None]) -> None:
    """Change the limit under the log's lock (no admission in between) and write it down."""
    with _locked(log) as f:
        set_limit(limit, rule)
        f.write(f"limit {limit} {rule}\n")


def check_log(log: Path, first_limit: int) -> tuple[int, int]:
    """Replay the log: after each admission, the holders inside (since the last reset: a
    reset forgets the others) never pass the limit in force; each holder's "out" follows its
    "in". Returns (admissions, the most inside at once)."""
    limit, inside, admitted, most = first_limit, {}, 0, 0  # pid -> admitted since the last reset?
    for line in log.read_text().splitlines():
        word, *rest = line.split()
        if word == "limit":
            limit = int(rest[0])
            if rest[1] == "reset":
                inside = {pid: False for pid in inside}  # forgotten: still inside, counted nowhere
            continue
        pid = int(rest[0])
        if word == "in":
            assert pid not in inside, f"{pid} went in twice: {line}"
            inside[pid] = True
            counted = sum(inside.values())
            assert counted <= limit, f"{counted} inside after an admission, limit {limit}"
            admitted, most = admitted + 1, max(most, counted)
        else:
            assert pid in inside, f"{pid} went out without going in"
            del inside[pid]
    return admitted, most
