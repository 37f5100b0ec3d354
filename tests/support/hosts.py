"""Hosts on one machine for the Redis-side tests: each "host" a mount namespace with its own
tmpfs on /dev/shm (tests/support/rootenv.py) running tests/apps/twotier_host.py (WORKERS worker
processes hammering one limiter of LIMIT/minute), time a ManualClock in a file every process
reads (the Redis scripts' time included), moved by the driver in TICK_NS ticks, never while a
call is in flight. Each admitted hit's time is recorded per host and worker. Used by
tests/integration/twotier/test_twotier_hosts.py and test_fallback_hosts.py."""

from __future__ import annotations

import bisect
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RedisServer

from shmwin import ManualClock

from .helpers import ROOT
from .rootenv import namespace_argv
from .servers import redis_client

S = 1_000_000_000
T0 = 1_000 * S
TICK_NS = 20_000_000
LIMIT, PERIOD = 1000, 60 * S
HOSTS, WORKERS = 3, 2
HITS_PER_TICK = 20  # a worker's hits in each tick: 120 a tick across the hosts, 6,000 a second at 20 ms ticks
HOST_APP = str(ROOT / "tests" / "apps" / "twotier_host.py")
# the first minute's hits (at T0 + 0..0.2 s) are forgotten as a limiter's ring of 20 buckets of
# 3 s forgets them: at the end of the bucket a minute later, T0 + 62 s: the second burst
SECOND_BURST_S = 62


class PersistentRedis(RedisServer):
    """A redis-server that keeps its data across stop() and start() (an append-only file)."""

    def start(self) -> None:
        assert self.exe is not None
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", "always", "--dir", self.dir]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                redis_client(self.url).ping()
                return
            except Exception:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)


@pytest.fixture(name="persistent_redis")
def persistent_redis_fixture() -> Iterator[PersistentRedis]:
    """``persistent_redis``: a PersistentRedis for the test, closed after it (a test module that
    imports this function has the fixture)."""
    server = PersistentRedis()
    yield server
    server.close()


def start_host(host: int, name: str, url: str, clock_path: Path, out: Path, end_ns: int, on_error: str,
               hits_per_tick: int, fallback: str | None = None):  # fmt: skip
    argv = [sys.executable, HOST_APP, name, url, f"{LIMIT}/minute", str(clock_path), str(out), str(host),
            str(end_ns), on_error, str(WORKERS), str(hits_per_tick), *([fallback] if fallback else [])]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests' / 'apps'}")
    return subprocess.Popen(namespace_argv(argv, hidepid=None, shm_size="16m"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def admitted_times(out: Path, host: int | None = None) -> list[int]:
    """The times of the hits admitted (by ``host``'s workers only, if given), in order."""
    times = []
    for f in out.glob("*.txt" if host is None else f"{host}-*.txt"):
        times += [int(line) for line in f.read_text().split() if line.isdigit()]
    return sorted(times)


def most_in_any_period(times: list[int]) -> int:
    return max((bisect.bisect_left(times, a + PERIOD) - i for i, a in enumerate(times)), default=0)


def count_in(times: list[int], start: int, end: int) -> int:
    return bisect.bisect_left(times, end) - bisect.bisect_left(times, start)


def drop_name(url: str, name: str) -> None:
    client = redis_client(url)
    try:
        for key in client.scan_iter(match=f"shmwin:{{{name}}}:*"):
            client.delete(key)
    finally:
        client.close()


def run_hosts(
    server: RedisServer,
    name: str,
    tmp_path: Path,
    events: dict[int, str],
    on_error: str = "deny",
    seconds: int = 120,
    scheme: str = "shm+",
    fallback: str | None = None,
    tick_ns: int = TICK_NS,
    hits_per_tick: int = HITS_PER_TICK,
) -> list[int]:
    """Run the hosts through ``seconds`` of manual time on ``scheme`` + the server's URL;
    ``events``: tick -> "kill" (host 2), "stop" or "start" (redis-server), "freeze" (redis-server
    SIGSTOPped: it keeps its socket and answers nothing), "kill-server" (SIGKILLed). The admitted
    hits' times (every host's: admitted_times(tmp_path / "out", host) has one host's). Keep the
    run's real time short of a Redis key's TTL (real ms: a span + 2 buckets) past a burst:
    ``tick_ns`` larger makes manual time run faster. ``hits_per_tick``: each worker's demand."""
    clock_path, out = tmp_path / "clock", tmp_path / "out"
    out.mkdir()
    clock = ManualClock(T0, path=clock_path)
    end_ns = T0 + seconds * S
    url = scheme + server.url
    hosts = [start_host(h, name, url, clock_path, out, end_ns, on_error, hits_per_tick, fallback)
             for h in range(HOSTS)]  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(list(out.glob("*.ready"))) < HOSTS * WORKERS:
            assert time.monotonic() < deadline, "the hosts' workers did not start"
            exited = [h.communicate() for h in hosts if h.poll() is not None]
            assert not exited, f"a host exited before it was ready: {exited}"
            time.sleep(0.05)
        tick = 0
        while clock() < end_ns:
            what = events.get(tick)
            if what == "kill":
                os.killpg(hosts[2].pid, signal.SIGKILL)
            elif what == "stop":
                server.stop()
            elif what == "start":
                server.start()
            elif what == "freeze":
                server.proc.send_signal(signal.SIGSTOP)
            elif what == "kill-server":
                server.proc.kill()  # a stopped process dies of SIGKILL too
                server.proc.wait(20)
                server.proc = None
            with open(str(clock_path) + ".lock", "a") as lock:  # no call in flight while time moves
                fcntl.flock(lock, fcntl.LOCK_EX)
                clock.advance(ns=tick_ns)
            tick += 1
            time.sleep(0.002)
        for i, h in enumerate(hosts):
            _, err = h.communicate(timeout=120)
            killed = events and "kill" in events.values() and i == 2
            assert killed or h.returncode == 0, f"host {i} exited {h.returncode}:\n{err}"
    finally:
        for h in hosts:
            if h.poll() is None:
                os.killpg(h.pid, signal.SIGKILL)
                h.wait(30)
        if server.proc is None:
            server.start()
        drop_name(server.url, name)
    return admitted_times(out)


def tick_at(seconds: float, tick_ns: int = TICK_NS) -> int:
    return round(seconds * S / tick_ns)
