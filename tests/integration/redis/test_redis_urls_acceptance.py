"""The server URLs as the peer library limits spells them (limits/storage/redis*.py), read from
issue #31 alone: each spelling limits accepts for Valkey, a cluster or Sentinel opens a limiter
with the same meaning -- the same keys as the Redis spelling -- or is refused with an error that
says why. Real servers: the session's redis-server (and valkey-server), its cluster, one
sentinel group, one redis-server on a unix socket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
from limits import RateLimitItemPerHour
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter
from support.servers import ask_port, free_port, server_binaries

from shmwin import Limiter
from shmwin.errors import GeometryMismatchError


def _shared(name: str, urls: list[str], limit: int = 3) -> list[bool]:
    """Hits of one name, one per URL in turn, a limiter per URL: the answers of one count if
    every URL names the same keys."""
    lims = [Limiter(name, f"{limit}/hour", backend=url) for url in urls]
    try:
        return [lims[i % len(lims)].hit("k") for i in range(limit + 1)]
    finally:
        lims[0].unlink()
        for lim in lims:
            lim.close()


def test_valkey_spellings_are_the_redis_keys(redis_server, make_name):
    url = redis_server.url
    assert _shared(make_name("v"), [url, url.replace("redis://", "valkey://", 1)]) == [True] * 3 + [False]
    two_tier = ["shm+" + url, "shm+" + url.replace("redis://", "valkey://", 1)]
    assert _shared(make_name("t"), two_tier) == [True] * 3 + [False]


def test_the_cluster_spellings_of_limits_and_their_spread(redis_cluster, make_name):
    """limits writes ``redis+cluster://host:port,host:port`` (no slash); ``valkey+cluster://`` is
    the same; ``?spread=16`` after it puts one name's keys on all 3 masters, under either name."""
    seeds = redis_cluster.url.removeprefix("redis+cluster://").rstrip("/")
    urls = [f"redis+cluster://{seeds}", f"valkey+cluster://{seeds}", f"valkey+cluster://{seeds}/"]
    assert _shared(make_name("c"), urls) == [True] * 3 + [False]
    name = make_name("s")
    spread = Limiter(name, "2/hour", backend=f"valkey+cluster://{seeds}?spread=16")
    alias = Limiter(name, "2/hour", backend=f"redis+cluster://{seeds}/?spread=16")
    try:
        for i in range(60):
            assert spread.hit(f"key-{i}") and alias.hit(f"key-{i}") and not spread.hit(f"key-{i}")
        masters = {p: redis_cluster.ask_node(p, "--scan", "--pattern", f"shmwin:{{{name}#*").split()
                   for p in redis_cluster.serving(redis_cluster.live()[0])}  # fmt: skip
        assert len(masters) == 3 and all(masters.values()), {p: len(k) for p, k in masters.items()}
        with pytest.raises(GeometryMismatchError, match="spread"):
            Limiter(name, "2/hour", backend=f"valkey+cluster://{seeds}")
    finally:
        spread.unlink()
        spread.close()
        alias.close()


def test_limits_unix_socket_spellings_name_the_same_server(make_name):
    """limits accepts ``redis+unix://`` and ``valkey+unix://`` (its redis.py turns them into
    redis-py's ``unix://``): so does shmwin, with the same meaning. Before, both were an
    "unknown backend" ValueError."""
    exe = server_binaries("redis")[0]
    if exe is None:
        pytest.skip("redis-server is not installed")
    folder = tempfile.mkdtemp(prefix="shmwin-unix-")
    sock = os.path.join(folder, "redis.sock")
    proc = subprocess.Popen([exe, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no",
                             "--dir", folder], stdout=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists(sock):
            assert time.monotonic() < deadline and proc.poll() is None, "redis-server did not start"
            time.sleep(0.02)
        urls = [f"{scheme}://{sock}" for scheme in ("unix", "redis+unix", "valkey+unix")]
        moving = MovingWindowRateLimiter(storage_from_string(urls[1]))  # limits' own reading of it
        assert moving.hit(RateLimitItemPerHour(1), "k") and not moving.hit(RateLimitItemPerHour(1), "k")
        assert _shared(make_name("u"), urls) == [True] * 3 + [False]
        assert _shared(make_name("w"), ["shm+" + url for url in urls]) == [True] * 3 + [False]
    finally:
        proc.terminate()
        proc.wait(20)
        subprocess.run(["rm", "-rf", folder], check=True)


def _limits_hits(url: str) -> list[bool]:
    moving = MovingWindowRateLimiter(storage_from_string(url))
    return [moving.hit(RateLimitItemPerHour(1), "limits-probe") for _ in range(2)]


def test_sentinel_spellings_of_limits_find_the_master(sentinel_group, make_name):
    """Several sentinels (a dead one first), ``/svc`` or ``/svc/``, ``valkey+sentinel://``,
    ``shm+`` before it; then one password for the master, its replica and the sentinels, as
    limits reads ``redis+sentinel://:pw@...`` (it sends it to both): before, shmwin asked the
    sentinels without it, and every call was a BackendUnavailableError ("No master found")
    where limits worked. A password on the master alone (the sentinels open) works too."""
    seeds = sentinel_group.url.removeprefix("redis+sentinel://").rpartition("/")[0]
    dead_first = f"127.0.0.1:{free_port()},{seeds}"
    urls = [f"redis+sentinel://{dead_first}/svc", f"valkey+sentinel://{seeds}/svc/"]
    assert _shared(make_name("o"), urls) == [True] * 3 + [False]
    assert _shared(make_name("t"), ["shm+" + url for url in urls]) == [True] * 3 + [False]
    for port in sentinel_group.data_ports:  # masterauth first: the replica keeps following
        ask_port(port, "config", "set", "masterauth", "pw")
    for port in sentinel_group.data_ports:
        ask_port(port, "config", "set", "requirepass", "pw")
    for port in sentinel_group.sentinel_ports:
        ask_port(port, "sentinel", "set", "svc", "auth-pass", "pw")
        ask_port(port, "acl", "setuser", "default", "resetpass", ">pw")
    secret = [f"redis+sentinel://:pw@{seeds}/svc", f"valkey+sentinel://:pw@{dead_first}/svc"]
    assert _limits_hits(secret[0]) == [True, False]  # limits' meaning: the sentinels' password too
    assert _shared(make_name("p"), secret) == [True] * 3 + [False]
    assert _shared(make_name("q"), ["shm+" + url for url in secret]) == [True] * 3 + [False]
    for port in sentinel_group.sentinel_ports:  # the sentinels open again: the master's alone
        ask_port(port, "acl", "setuser", "default", "nopass")
    assert _shared(make_name("r"), secret) == [True] * 3 + [False]


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis+sentinel://127.0.0.1:1", "names its service"),
        ("redis+sentinel://127.0.0.1:1?service_name=svc", "names its service"),
        ("redis+sentinel://127.0.0.1:1/svc?service_name=svc", "only option is replicas=N"),
        ("redis+sentinel://127.0.0.1:1/svc?replicas=all", "only option is replicas=N"),
        ("redis+cluster://127.0.0.1:1/3", "no database"),
        ("valkey+cluster://127.0.0.1:1/?spread=2000", r"spread=N \(0 to 1024"),
        ("valkey+cluster://127.0.0.1:1/?socket_timeout=1", "one option is"),
        ("redis://127.0.0.1:1/0?spread=4", "redis\\+cluster://"),
        ("valkey://127.0.0.1:1/0?spread=4", "redis\\+cluster://"),
        ("memory://", "unknown backend"),
        ("memcached://127.0.0.1:1", "unknown backend"),
    ],
)  # fmt: skip
def test_a_spelling_refused_says_why(url, says):
    with pytest.raises(ValueError, match=says):
        Limiter("refused-url", "3/hour", backend=url)


def test_a_spread_limiters_rates_change_live_under_a_stale_handle(redis_cluster, make_name):
    """``?spread=16`` and live limits together: a deploy's new amount in place, then other
    periods (a carry), each key's count followed by a handle that never opened it again."""
    url = redis_cluster.url + "?spread=16"
    name = make_name("sl")
    stale = Limiter(name, "3/hour", backend=url)
    try:
        keys = [f"key-{i}" for i in range(12)]  # over several groups, so several masters
        assert all(stale.hit(k) and stale.hit(k) for k in keys)
        Limiter(name, "5/hour", backend=url).close()
        assert all([stale.hit(k) for _ in range(4)] == [True, True, True, False] for k in keys)
        Limiter(name, "2/minute;5/hour", backend=url).close()  # other periods: the 5 carried
        assert not any(stale.hit(k) for k in keys)
        with Limiter.attach(name, backend=url) as fresh:
            assert stale.rates == fresh.rates
    finally:
        stale.unlink()
        stale.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, timeout=60)


def test_the_shell_tools_on_a_spread_limiter(redis_cluster, make_name):
    """``shmwin show --backend URL?spread=16`` lists the name's busiest keys (it scanned the
    one-tag rows only: none); ``shmwin set`` without the ``?spread=`` says to add it (it said
    "not a token bucket")."""
    url = redis_cluster.url + "?spread=16"
    name = make_name("cli")
    lim = Limiter(name, "3/hour", backend=url)
    try:
        for i in range(6):
            assert lim.hit(f"key-{i}") and (i or lim.hit("key-0"))
        shown = _cli("show", "--json", "--backend", url, name)
        assert shown.returncode == 0, shown.stderr
        view = json.loads(shown.stdout)
        view = view[0] if isinstance(view, list) else view
        assert view["keys"] == 6 and view["top"][0]["key"] == "key-0", view
        plain = _cli("set", "--backend", redis_cluster.url, name, "5/hour")
        assert plain.returncode != 0 and "?spread=16" in plain.stderr, plain.stderr
        assert _cli("set", "--backend", url, name, "5/hour").returncode == 0
        assert lim.hit("key-0") and lim.stats("key-0").used == 3
    finally:
        lim.unlink()
        lim.close()
