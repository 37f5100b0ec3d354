"""On ``redis://`` and ``shm+redis://`` time is the server's ``TIME`` and nowhere else: a host's
clock can never move a name's clock.

Sending a host's reading as the time let that host set the name's clock: two hosts whose clocks
differed by a day moved it a day ahead at every alternation (200 admitted against 20 per 10 s),
and even one host's processes sharing ``time.time_ns`` reached the server out of order (200
against 100). ``clock=`` is refused there, before anything is opened; tests drive the server's
time through the explicit hook ``ServerTime``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support.helpers import ROOT
from support.servers import redis_client

import shmwin
from shmwin import Limiter, ManualClock, NotSupportedError, TokenBucket, Window
from shmwin.backends.redis.testing import ServerTime

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration
S = 1_000_000_000
DAY_NS = 86_400 * S

CLOCKS = {
    "monotonic": time.monotonic_ns,
    "wall": time.time_ns,
    "a-day-ahead": lambda: time.monotonic_ns() + DAY_NS,
    "manual": ManualClock(10**15),  # a test's clock too: only ServerTime says "the server's time"
}
OPENS = {
    "limiter": lambda name, url, clock: Limiter(name, "20/10 seconds", backend=url, clock=clock),
    "window": lambda name, url, clock: Window(name, span=60, backend=url, clock=clock),
    "token-bucket": lambda name, url, clock: TokenBucket(name, "2/second", burst=4, backend=url, clock=clock),
    "two-tier": lambda name, url, clock: Limiter(name, "20/10 seconds", backend="shm+" + url, clock=clock),
    "two-tier-bucket": lambda name, url, clock: TokenBucket(
        name, "2/second", burst=4, backend="shm+" + url, clock=clock
    ),
}


def _redis_keys(url: str, name: str) -> list[bytes]:
    client = redis_client(url)
    try:
        return list(client.scan_iter(match=f"shmwin:{{{name}}}:*"))
    finally:
        client.close()


@pytest.mark.parametrize("clock", CLOCKS.values(), ids=CLOCKS.keys())
@pytest.mark.parametrize("kind", OPENS.keys())
def test_a_hosts_clock_is_refused_before_anything_is_opened(redis_url, name, kind, clock):
    with pytest.raises(NotSupportedError, match="server's TIME"):
        OPENS[kind](name, redis_url, clock)
    assert _redis_keys(redis_url, name) == [] and not [n for n in shmwin.names() if name in n]


def test_an_attach_with_a_hosts_clock_is_refused(redis_url, name):
    tick = time.monotonic_ns
    lim = Limiter(name, "20/10 seconds", backend=redis_url)
    with lim, Window(name + "w", span=60, backend=redis_url) as w:
        try:
            attaches = (
                lambda: Limiter.attach(name, backend=redis_url, clock=tick),
                lambda: Window.attach(name + "w", backend=redis_url, clock=tick),
                lambda: Limiter.attach(name, backend="shm+" + redis_url, clock=tick),
            )
            for attach in attaches:
                with pytest.raises(NotSupportedError, match="server's TIME"):
                    attach()
        finally:
            lim.unlink()
            w.unlink()


def test_two_hosts_a_day_apart_cannot_move_the_names_clock(redis_server, name):
    """The attack, as two unrelated processes (hosts): each asks for its own clock, one a day
    ahead. Both are refused; the name's clock in Redis is never written from a host's reading."""
    script = (
        "import sys, time\n"
        "from shmwin import Limiter, NotSupportedError\n"
        "ahead = int(sys.argv[3])\n"
        "clock = lambda: time.monotonic_ns() + ahead\n"
        "try:\n"
        "    Limiter(sys.argv[1], '20/10 seconds', backend=sys.argv[2], clock=clock)\n"
        "except NotSupportedError as exc:\n"
        "    print('refused:', exc)\n"
        "else:\n"
        "    print('opened')\n"
    )
    for ahead in (0, DAY_NS):
        for url in (redis_server.url, "shm+" + redis_server.url):
            out = subprocess.run([sys.executable, "-c", script, name, url, str(ahead)], capture_output=True,
                                 text=True, timeout=60, cwd=ROOT)  # fmt: skip
            assert out.returncode == 0, out.stderr
            assert out.stdout.startswith("refused:") and "TIME" in out.stdout, out.stdout
    assert _redis_keys(redis_server.url, name) == []


def test_the_default_takes_the_servers_time_and_server_time_drives_it_for_tests(redis_url, name):
    """No clock=: the scripts read TIME (the name's clock is about the server's wall clock). A
    test's ServerTime drives it by hand, and the limiter's waits use that clock too."""
    with Limiter(name, "2/minute", backend=redis_url) as lim:
        assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
        client = redis_client(redis_url)
        try:
            now_us, _ = (int(v) for v in client.get(f"shmwin:{{{name}}}:clock").split())
            server_us = int(client.time()[0]) * 10**6
        finally:
            client.close()
        assert abs(now_us - server_us) < 60 * 10**6  # TIME, not any host's monotonic clock
        lim.unlink()
    clock = ManualClock(10**15)
    with Limiter(name, "2/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
        assert lim.acquire("k", timeout=120)  # sleeps on the ManualClock: 63 s pass by hand
        assert clock.sleeps and 60 < sum(clock.sleeps) < 64
        lim.unlink()
