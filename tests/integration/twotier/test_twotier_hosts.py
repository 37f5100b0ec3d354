"""Three hosts on one machine, one redis-server: the two-tier backend's strictness across hosts.

Each "host" is a mount namespace with its own tmpfs on /dev/shm (tests/support/rootenv.py), running
tests/apps/twotier_host.py: 2 worker processes hammering one global limit of 1,000/minute.
Time is a ManualClock in a file that every process reads, the Redis scripts' time included;
the test moves it through 2 minutes in 20 ms ticks (about 15 s of real time), never while a
call is in flight (a file lock), and each worker makes up to 20 hits a tick: demand is far
above the limit throughout. Every admitted hit's time is recorded, and then:

* in any 60 s interval, the hits admitted across hosts never exceed 1,000;
* while demand exceeds the limit, at least 900 are admitted in each minute;
* with one host SIGKILLed mid-run, and with redis-server stopped and restarted mid-run
  (it keeps its data: appendonly), the first holds throughout; while Redis is down
  ``on_error="deny"`` applies once the hosts' leases are spent.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RedisServer
from support.helpers import ROOT
from support.rootenv import namespace_argv, needs_namespace
from support.servers import redis_client

from shmwin import ManualClock

pytestmark = [pytest.mark.integration, needs_namespace]
redis = pytest.importorskip("redis")

S = 1_000_000_000
T0 = 1_000 * S
TICK_NS = 20_000_000
LIMIT, PERIOD = 1000, 60 * S
HOSTS, WORKERS = 3, 2
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


@pytest.fixture
def server():
    s = PersistentRedis()
    yield s
    s.close()


def start_host(host: int, name: str, url: str, clock_path: Path, out: Path, end_ns: int, on_error: str):
    argv = [sys.executable, HOST_APP, name, "shm+" + url, f"{LIMIT}/minute", str(clock_path), str(out),
            str(host), str(end_ns), on_error, str(WORKERS)]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tests' / 'apps'}")
    return subprocess.Popen(namespace_argv(argv, hidepid=None, shm_size="16m"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip


def admitted_times(out: Path) -> list[int]:
    times = []
    for f in out.glob("*.txt"):
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


def run_hosts(server: RedisServer, name: str, tmp_path: Path, events: dict[int, str], on_error: str = "deny",
              seconds: int = 120) -> list[int]:
    """Run the hosts through ``seconds`` of manual time; ``events``: tick -> "kill" (host 2),
    "stop" or "start" (redis-server). The admitted hits' times."""
    clock_path, out = tmp_path / "clock", tmp_path / "out"
    out.mkdir()
    clock = ManualClock(T0, path=clock_path)
    end_ns = T0 + seconds * S
    hosts = [start_host(h, name, server.url, clock_path, out, end_ns, on_error) for h in range(HOSTS)]
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
            with open(str(clock_path) + ".lock", "a") as lock:  # no call in flight while time moves
                fcntl.flock(lock, fcntl.LOCK_EX)
                clock.advance(ns=TICK_NS)
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


def tick_at(seconds: float) -> int:
    return round(seconds * S / TICK_NS)


def test_three_hosts_never_admit_more_than_the_limit_and_nearly_all_of_it(server, name, tmp_path):
    times = run_hosts(server, name, tmp_path, {})
    assert most_in_any_period(times) <= LIMIT
    per_minute = [count_in(times, T0 + m * PERIOD, T0 + (m + 1) * PERIOD) for m in range(2)]
    assert min(per_minute) >= 900, f"admitted per minute: {per_minute}"


def test_a_host_killed_mid_run_strands_at_most_its_leases(server, name, tmp_path):
    """Killed during the second minute's first burst, while the hosts hold leases."""
    times = run_hosts(server, name, tmp_path, {tick_at(SECOND_BURST_S) + 3: "kill"})
    assert most_in_any_period(times) <= LIMIT
    per_minute = [count_in(times, T0 + m * PERIOD, T0 + (m + 1) * PERIOD) for m in range(2)]
    # the dead host's leases (two workers' races: at most 2 x 1000 // 8) stay counted until d + P
    assert per_minute[0] >= 900 and per_minute[1] >= 900 - 2 * LIMIT // 8, per_minute


def test_redis_stopped_and_restarted_mid_run_stays_strict(server, name, tmp_path):
    """Stopped during the second minute's first burst (the hosts hold leases), back at 75 s."""
    stop = tick_at(SECOND_BURST_S) + 3
    times = run_hosts(server, name, tmp_path, {stop: "stop", tick_at(75): "start"})
    assert most_in_any_period(times) <= LIMIT
    # while Redis is away, only what the hosts held is spent, then on_error="deny"
    down = count_in(times, T0 + (stop + 1) * TICK_NS, T0 + 75 * S)
    assert down <= HOSTS * WORKERS * (LIMIT // 8), f"{down} admitted while redis was down"
    assert count_in(times, T0 + 75 * S, T0 + 120 * S) > 0, "nothing admitted after redis came back"
