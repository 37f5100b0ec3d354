"""Live limits' harness: stale workers -- forked, spawned and unrelated ``python -c`` processes
that opened a limiter with the old rates and never open it again -- hitting it on command with
a clock every process shares (``ManualClock(path=)``), and the check that no interval across a
change admitted more than the rates in force."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from support.helpers import ROOT

from shmwin import Limiter, ManualClock, Rate, TokenBucket

WORKER = """
import sys
from shmwin import Limiter, ManualClock, TokenBucket
rates, _, burst = sys.argv[2].partition(" burst=")
clock = ManualClock(path=sys.argv[3])
if burst:
    lim = TokenBucket(sys.argv[1], rates, burst=int(burst), clock=clock)
else:
    lim = Limiter(sys.argv[1], rates, clock=clock)
print("ready", flush=True)
for line in sys.stdin:
    print(int(lim.hit(line.strip())), flush=True)
"""


def open_front(name: str, rates: str, clock: ManualClock) -> Any:
    """``rates`` of a limiter ("10/minute"), or of a token bucket ("10/second burst=5")."""
    rate, _, burst = rates.partition(" burst=")
    if burst:
        return TokenBucket(name, rate, burst=int(burst), clock=clock)
    return Limiter(name, rates, clock=clock)


def _serve(name: str, rates: str, clock_path: str, conn: Any) -> None:
    """A forked or spawned worker: open with ``rates`` once, then hit each key it is sent."""
    lim = open_front(name, rates, ManualClock(path=clock_path))
    conn.send("ready")
    while (key := conn.recv()) is not None:
        conn.send(int(lim.hit(key)))
    lim.close()


class MpWorker:
    def __init__(self, start: str, name: str, rates: str, clock_path: str):
        ctx = mp.get_context(start)
        self.kind = start
        self._conn, theirs = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(name, rates, clock_path, theirs))
        self._proc.start()
        assert self._conn.poll(60) and self._conn.recv() == "ready"

    def hit(self, key: str) -> bool:
        self._conn.send(key)
        return bool(self._conn.recv())

    def close(self) -> None:
        self._conn.send(None)
        self._proc.join(30)
        assert self._proc.exitcode == 0


class ScriptWorker:
    """An unrelated interpreter (``python -c``), hitting what it reads on stdin."""

    def __init__(self, name: str, rates: str, clock_path: str):
        self.kind = "python -c"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, name, rates, clock_path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip  (the environment kept: a sanitized core's run needs its preloads)
        assert self._read() == "ready"

    def _read(self) -> str:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline().strip()

    def hit(self, key: str) -> bool:
        assert self._proc.stdin is not None
        self._proc.stdin.write(key + "\n")
        self._proc.stdin.flush()
        return self._read() == "1"

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        assert self._proc.wait(30) == 0


def stale_workers(name: str, rates: str, clock_path: str) -> list[Any]:
    """One worker of each kind -- fork, spawn, ``python -c`` -- each opened with ``rates``."""
    return [MpWorker("fork", name, rates, clock_path), MpWorker("spawn", name, rates, clock_path),
            ScriptWorker(name, rates, clock_path)]  # fmt: skip


def busiest(admitted: Iterable[int], rate: Rate, since_ns: int, counted_from_ns: int) -> int:
    """The most hits in any period of ``rate`` ending at a hit admitted at or after ``since_ns``,
    counting the hits admitted from ``counted_from_ns`` on (what the rate answers for)."""
    times = sorted(t for t in admitted if t >= counted_from_ns)
    most = 0
    for t in times:
        if t >= since_ns:
            most = max(most, sum(1 for u in times if t - rate.period_ns < u <= t))
    return most


def assert_bucket_strict(admitted: list[int], rate: Rate, burst: int, since_ns: int) -> None:
    """A token bucket's bound from ``since_ns`` on: in any interval [a, b], at most
    burst + (b - a) / T tokens taken (T: the emission interval, rounded up as the core does)."""
    interval_ns = -(-rate.period_ns // rate.limit)
    times = sorted(t for t in admitted if t >= since_ns)
    for i, a in enumerate(times):
        for j in range(i, len(times)):
            allowed = burst + (times[j] - a) // interval_ns
            assert j - i + 1 <= allowed, f"{j - i + 1} tokens in [{a}, {times[j]}]: the bound is {allowed}"


def assert_strict(admitted: list[int], rates: list[Rate], since_ns: int, counted_from_ns: int = -1) -> None:
    for rate in rates:
        most = busiest(admitted, rate, since_ns, counted_from_ns)
        assert most <= rate.limit, f"{most} hits in one period of {rate} (from {since_ns})"
