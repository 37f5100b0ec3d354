"""Round 2 attacks on the Redis-side URLs, Sentinel and ``?spread=``: each junk spelling is a
clear error that names the URL, raised at the open (never a TypeError from redis-py at the first
call, never a wrong database read in silence)."""

from __future__ import annotations

import pytest

from shmwin import Limiter, Window


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
