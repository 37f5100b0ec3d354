"""What only the redis backend has: server time, expiry, one round trip, failures, several hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import urllib.parse

import pytest
from support.helpers import ROOT
from support.servers import redis_client

import shmwin
from shmwin import Limiter, ManualClock, Window
from shmwin.backends.redis.testing import ServerTime
from shmwin.errors import NotSupportedError

redis = pytest.importorskip("redis")
S = 1_000_000_000


def test_rows_expire_by_themselves(redis_url, name):
    r = redis_client(redis_url)
    with Limiter(name, "5/minute", backend=redis_url) as lim:
        lim.hit("k")
        ttl_ms = r.pttl(f"shmwin:{{{name}}}:k:k")
        assert 63_000 < ttl_ms <= 66_001  # span (21 buckets of 3 s) + a bucket, set when a bucket opens
        lim.unlink()
    with Window(name, span=10, buckets=10, backend=redis_url) as w:
        w.add()
        assert 0 < r.pttl(f"shmwin:{{{name}}}:k:") <= 11_001
        w.unlink()
    assert r.keys(f"shmwin:{{{name}}}:*") == []  # unlink leaves nothing behind


def test_one_round_trip_per_operation(redis_server, name, monkeypatch):
    sent: list[str] = []
    real_send = redis.connection.AbstractConnection.send_command

    def counting_send(self, *args, **kwargs):
        sent.append(str(args[0]))
        return real_send(self, *args, **kwargs)

    with (
        Limiter(name, "1000/hour;50/second", backend=redis_server.url) as lim,
        Window(name + "w", span=60, fields=("a", "b"), capacity=10, backend=redis_server.url) as w,
    ):
        lim.hit("warm")  # loads the scripts
        w.add(1, key="warm")
        w.total(key="warm")
        for op in (w.keys, w.top, lambda: w.clear("none"), lambda: lim.stats("k0")):
            op()  # load each script once
        monkeypatch.setattr(redis.connection.AbstractConnection, "send_command", counting_send)
        for i in range(40):
            lim.hit(f"k{i % 4}")
            w.add(1, "b", key=f"k{i % 4}")
            w.total("b", key=f"k{i % 4}")
        assert len(sent) == 3 * 40
        for op in (w.keys, lambda: w.top(3, "b"), lambda: w.clear("k1"), lambda: lim.stats("k0")):
            sent.clear()
            op()
            assert len(sent) == 1, op
        monkeypatch.undo()
        assert set(sent) == {"EVALSHA"}
        lim.unlink()
        w.unlink()


def test_time_comes_from_the_server(redis_url, name):
    with Limiter(name, "5/minute", backend=redis_url) as lim:
        assert lim.hit("k")
        assert 57 <= lim.stats("k").reset_after <= 63
        lim.unlink()


def _hits(lim: Limiter) -> list[bool]:
    return [lim.hit("k") for _ in range(3)]


def test_redis_down_and_back(own_redis, name):
    url = own_redis.url
    strict = Limiter(name, "100/minute", backend=url, timeout=0.5)
    fail_open = Limiter(name, "100/minute", backend=url, timeout=0.5, on_error="allow")
    fail_closed = Limiter(name, "100/minute", backend=url, timeout=0.5, on_error="deny")
    window = Window(name + "w", span=60, backend=url, timeout=0.5)
    assert _hits(strict) == [True] * 3
    own_redis.stop()
    started = time.monotonic()
    with pytest.raises(shmwin.BackendUnavailableError, match="unavailable") as err:
        strict.hit("k")
    assert isinstance(err.value, ConnectionError)
    host_port = urllib.parse.urlsplit(url).netloc.rpartition("@")[2]  # red team F12: the port was dropped
    assert f"redis at redis://{host_port}/" in str(err.value) and ":" in host_port
    assert fail_open.hit("k") is True and fail_closed.hit("k") is False
    assert fail_open.test("k") is True and fail_closed.test("k") is False
    with pytest.raises(shmwin.BackendUnavailableError):
        window.add()
    with pytest.raises(shmwin.BackendUnavailableError):
        window.total()
    assert time.monotonic() - started < 10  # each failure is quick, never a hang
    own_redis.start()  # an empty server: the scripts and the counts are gone
    assert _hits(strict) == [True] * 3  # reconnected, scripts reloaded
    assert fail_closed.hit("k") is True and strict.stats("k").used == 4
    window.add(2)
    assert window.total() == 2
    for obj in (strict, fail_open, fail_closed, window):
        obj.close()


HOST = """
import os, sys
from shmwin import Limiter, Window
lim = Limiter(sys.argv[1], "100/hour", backend=sys.argv[2])      # its own connection
local = Window("admitted")                                          # in this host's namespace
admitted = sum(lim.hit("client") for _ in range(60))
local.add(admitted)
print(admitted)
"""


def test_several_hosts_share_one_exact_limit(redis_url, name):
    hosts = [f"{name}-host{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(HOST), name, redis_url],
            env=dict(os.environ, PYTHONPATH=str(ROOT), SHMWIN_NAMESPACE=host),
            stdout=subprocess.PIPE, text=True,
        )
        for host in hosts
    ]  # fmt: skip
    admitted = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(admitted) == 100  # 240 tries from four hosts, one limit
    try:
        assert "admitted" not in shmwin.names()  # this "host" sees none of theirs ...
        for host, count in zip(hosts, admitted, strict=True):
            os.environ["SHMWIN_NAMESPACE"] = host  # ... and each host sees only its own
            assert shmwin.names() == ["admitted"]
            with Window.attach("admitted") as w:
                assert w.total() == count
                w.unlink()
    finally:
        os.environ.pop("SHMWIN_NAMESPACE", None)
    with Limiter.attach(name, backend=redis_url) as lim:
        assert lim.stats("client").used == 100
        lim.unlink()


def test_unknown_backends_and_redis_only_limits(redis_url, name):
    with pytest.raises(ValueError, match="unknown backend"):
        Window(name, backend="memcached://localhost")
    with pytest.raises(shmwin.NotSupportedError, match="one resolution"):
        Window(name, resolutions=("1m/1s", "1h/1m"), backend=redis_url)
    with Window(name, resolutions=("1m/1s",), backend=redis_url) as one:  # one is fine
        assert one.resolutions == ["1m/1s"] and one.geometry.mode == "locked"
        one.unlink()
    with pytest.raises(shmwin.WindowNotFoundError):
        Window.attach(name, backend=redis_url)
    with Window(name, span=10, buckets=10, backend=redis_url, clock=ServerTime(ManualClock(10**15))) as w:
        with pytest.raises(shmwin.GeometryMismatchError, match="window"):
            Limiter.attach(name, backend=redis_url)
        w.unlink()


def test_on_error_applies_when_built_while_the_server_is_down(own_redis, name):
    url = own_redis.url
    own_redis.stop()
    with pytest.raises(shmwin.BackendUnavailableError):
        Limiter(name, "2/minute", backend=url, timeout=0.5)  # on_error="raise": at once
    with pytest.raises(shmwin.BackendUnavailableError):
        Window(name + "w", span=60, backend=url, timeout=0.5)
    with pytest.raises(shmwin.BackendUnavailableError):
        Limiter.attach(name, backend=url, timeout=0.5, on_error="allow")  # the rates are on the server
    fail_open = Limiter(name, "2/minute", backend=url, timeout=0.5, on_error="allow")
    fail_closed = Limiter(name, "2/minute", backend=url, timeout=0.5, on_error="deny")
    window = Window(name + "w", span=60, backend=url, timeout=0.5, on_error="allow")
    assert [fail_open.hit("k"), fail_open.test("k"), fail_open.acquire("k", timeout=5)] == [True] * 3
    assert [fail_closed.hit("k"), fail_closed.test("k"), fail_closed.acquire("k", timeout=5)] == [False] * 3
    window.add(5)  # dropped
    window.add_many([1, 2])  # dropped
    for read in (lambda: fail_open.stats("k"), window.total, lambda: fail_closed.clear("k")):
        with pytest.raises(shmwin.BackendUnavailableError):
            read()  # no verdict to make up: reads raise
    own_redis.start()
    assert fail_open.hit("k") and fail_closed.hit("k")  # the first call that gets through claims the name
    assert not fail_open.hit("k") and fail_open.stats("k").used == 2  # one limit, now enforced
    window.add(3)
    assert window.total() == 3
    with pytest.raises(shmwin.GeometryMismatchError):
        Limiter(name, "3/minute", backend=url, on_change="raise")  # the name was claimed with the rates given
    for obj in (fail_open, fail_closed, window):
        obj.unlink()
        obj.close()


def test_hit_after_acquire_on_a_one_rate_limiter(redis_url, name):
    """acquire() writes with the multi-rate script (BITFIELD leaves the value short); the lean
    one-rate hit must still read it (it raised a raw ResponseError before)."""
    clock = ManualClock(10**15)
    with Limiter(name, "5/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        assert lim.acquire("k", timeout=0)
        clock.advance(3)
        assert [lim.hit("k") for _ in range(5)] == [True] * 4 + [False]
        lim.unlink()


def test_an_exact_limiter_is_refused_clearly(redis_url, name):
    """Redis windows keep buckets: exact=True there would silently mean something else."""
    with pytest.raises(shmwin.NotSupportedError, match="exact"):
        Limiter(name, "5/minute", exact=True, backend=redis_url)


def test_shadow_mode_on_redis_never_refuses_and_keeps_no_decisions(redis_url, name):
    lim = Limiter(name, "2/minute", backend=redis_url, shadow=True)
    try:
        assert [lim.hit("k") for _ in range(4)] == [True] * 4
        assert lim.stats("k").used == 2  # what enforcement would count
        assert lim.test("k")
        with pytest.raises(NotSupportedError, match="keeps no decisions"):
            lim.decisions()
    finally:
        lim.unlink()
        lim.close()
