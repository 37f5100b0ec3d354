"""Round 2 attacks on the Redis-side URLs, Sentinel and ``?spread=``: each junk spelling is a
clear error that names the URL, raised at the open (never a TypeError from redis-py at the first
call, never a wrong database read in silence)."""

from __future__ import annotations

import time

import pytest
from support.servers import ask_port, free_port

from shmwin import Limiter, Window
from shmwin.errors import BackendUnavailableError


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1:6390/0?foo=bar", "no redis-py connection takes: foo"),
        ("valkey://127.0.0.1:6390/0?sokcet_timeout=1", "no redis-py connection takes: sokcet_timeout"),
        ("shm+redis://127.0.0.1:6390/0?foo=1", "no redis-py connection takes: foo"),
        ("redis://127.0.0.1:6390/abc", "path is a database number"),
        ("redis://127.0.0.1:99999/0", "in the Redis URL 'redis://127.0.0.1:99999/0'"),
        ("redis+cluster://127.0.0.1:99999/", "a Redis Cluster node is host:port, not '127.0.0.1:99999'"),
        ("redis+sentinel://127.0.0.1:99999/mymaster", "a sentinel is host:port, not '127.0.0.1:99999'"),
    ],
)
def test_junk_urls_are_clear_errors_at_the_open(url, says, make_name):
    # Before: ?foo= opened, then every call raised redis-py's TypeError ("AbstractConnection.__init__()
    # got an unexpected keyword argument 'foo'"; the CLI printed its traceback); /abc read database 0;
    # port 99999 said "Port out of range 0-65535" without the URL, or on a cluster or a sentinel URL
    # a connection refused (after 6 s on Sentinel).
    openers = [lambda: Limiter(make_name("j"), "5/minute", backend=url)]
    if not url.startswith("shm+"):  # the two-tier backend keeps limiters only
        openers.append(lambda: Window(make_name("w"), span=60, buckets=6, backend=url))
    for opener in openers:
        with pytest.raises(ValueError, match=says.replace("(", r"\(").replace("?", r"\?")):
            opener()


def test_redis_py_options_still_pass(redis_server, make_name):
    url = redis_server.url + "?health_check_interval=2&client_name=shmwin-test&max_connections=4"
    lim = Limiter(make_name("ok"), "2/minute", backend=url)
    try:
        assert [lim.hit("k") for _ in range(3)] == [True, True, False]
    finally:
        lim.unlink()
        lim.close()


def _timed_hits(url: str, name: str, n: int, on_error: str = "raise") -> tuple[list[bool], float]:
    lim = Limiter(name, "3/hour", backend=url, on_error=on_error)
    try:
        t0 = time.monotonic()
        return [lim.hit("k") for _ in range(n)], time.monotonic() - t0
    finally:
        if on_error == "raise":
            lim.unlink()
        lim.close()


def test_sentinels_all_down_fail_within_the_timeout(make_name):
    # Before: redis-py's default retry asked each dead sentinel 4 times, backing off: every
    # call took 7-11 s (timeout: 1 s) with on_error="allow", and the message was the repr of
    # every sentinel's client.
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/svc"
    answers, took = _timed_hits(url, make_name("d"), 3, on_error="allow")
    assert answers == [True] * 3 and took < 3, took
    with pytest.raises(BackendUnavailableError) as raised:
        _timed_hits(url, make_name("r"), 1)
    assert "No master found for 'svc' : sentinel 127.0.0.1:" in str(raised.value), raised.value
    assert "ConnectionPool" not in str(raised.value)


def test_junk_dead_and_acl_sentinels(sentinel_group, make_name):
    # Before: a server that is no sentinel, first in the list, made every call raise redis-py's
    # ResponseError ("unknown command 'SENTINEL'": no on_error, the sentinels after it never
    # asked); a dead sentinel first cost 6-12 s at a process's first call; an ACL user on the
    # sentinels cost 2-10 s (each NOAUTH retried with backoff before the credentials were sent).
    g = sentinel_group
    seeds = g.url.removeprefix("redis+sentinel://").rpartition("/")[0]
    junk_first = f"redis+sentinel://127.0.0.1:{g.data_ports[1]},127.0.0.1:{free_port()},{seeds}/svc"
    assert _timed_hits(junk_first, make_name("j"), 4)[0] == [True] * 3 + [False]
    _, took = _timed_hits(f"redis+sentinel://127.0.0.1:{free_port()},{seeds}/svc", make_name("f"), 1)
    assert took < 3, took
    with pytest.raises(BackendUnavailableError, match=r"No master found for 'svc' : sentinel 127\.0\.0\.1:"):
        _timed_hits(f"redis+sentinel://127.0.0.1:{g.data_ports[1]}/svc", make_name("n"), 1)

    for port in g.data_ports:  # an ACL user everywhere; the default user off
        ask_port(port, "config", "set", "masteruser", "alice")
        ask_port(port, "config", "set", "masterauth", "apw")
        ask_port(port, "acl", "setuser", "alice", "on", ">apw", "~*", "&*", "+@all")
    for port in g.sentinel_ports:
        ask_port(port, "sentinel", "set", "svc", "auth-user", "alice")
        ask_port(port, "sentinel", "set", "svc", "auth-pass", "apw")
        ask_port(port, "acl", "setuser", "alice", "on", ">apw", "+@all")
    for port in g.data_ports + g.sentinel_ports:
        ask_port(port, "acl", "setuser", "default", "off")
    for scheme in ("redis+sentinel", "shm+valkey+sentinel"):
        answers, took = _timed_hits(f"{scheme}://alice:apw@{seeds}/svc", make_name("a"), 4)
        assert answers == [True] * 3 + [False] and took < 3, (scheme, answers, took)
    with pytest.raises(BackendUnavailableError, match=r"sentinel [0-9.:]+ - auth:AuthenticationError"):
        _timed_hits(f"redis+sentinel://alice:bad@{seeds}/svc", make_name("b"), 1)
