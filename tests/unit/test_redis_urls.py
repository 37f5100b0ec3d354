"""The Redis-side URL spellings: Valkey's schemes as aliases, sentinel URLs as limits spells them."""

from __future__ import annotations

import pytest

from shmwin import backends
from shmwin.backends.redis.client import (
    SCHEMES,
    canonical_url,
    cluster_nodes,
    is_cluster,
    is_sentinel,
    unavailable,
)
from shmwin.backends.redis.sentinel import parse
from shmwin.backends.twotier import redis_url


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("valkey://h:6379/0", "redis://h:6379/0"),
        ("valkeys://:pw@h:6380/1", "rediss://:pw@h:6380/1"),
        ("valkey+cluster://a:7000,b:7000/", "redis+cluster://a:7000,b:7000/"),
        ("valkey+sentinel://s:26379/svc", "redis+sentinel://s:26379/svc"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis+unix:///tmp/r.sock?db=1", "unix:///tmp/r.sock?db=1"),  # limits' spellings
        ("valkey+unix:///tmp/r.sock", "unix:///tmp/r.sock"),
    ],
)
def test_valkey_schemes_are_redis_spellings(url, canonical):
    assert canonical_url(url) == canonical


def test_every_redis_scheme_opens_with_and_without_shm_in_front():
    assert set(backends._REDIS_SCHEMES) == set(SCHEMES)  # the registry's lazy list is the backend's
    for scheme in SCHEMES:
        assert backends.lookup(f"{scheme}://h/") == backends.lookup("redis://h/")
        assert backends.lookup(f"shm+{scheme}://h/").limiter == backends.lookup("shm+redis://h/").limiter
        assert redis_url(f"shm+{scheme}://h:1/") == f"{scheme}://h:1/"
        assert redis_url(f"shm+{scheme}:///tmp/r.sock") == f"{scheme}:///tmp/r.sock"  # not {scheme}:/tmp


def test_cluster_and_sentinel_are_told_apart_under_either_name():
    assert is_cluster("valkey+cluster://a:1/") and not is_sentinel("valkey+cluster://a:1/")
    assert is_sentinel("valkey+sentinel://a:1/s") and not is_cluster("redis+sentinel://a:1/s")


def test_a_sentinel_url_names_sentinels_service_database_and_password():
    target = parse("redis+sentinel://:s%40cret@10.0.0.1:26380,10.0.0.2,[::1]:5000/mymaster/3?replicas=2")
    assert target.sentinels == [("10.0.0.1", 26380), ("10.0.0.2", 26379), ("::1", 5000)]
    assert (target.service, target.db, target.password, target.replicas, target.ssl) == (
        "mymaster", 3, "s@cret", 2, False)  # fmt: skip
    assert parse("rediss+sentinel://h/svc").ssl
    assert parse("redis+sentinel://h/svc").replicas == 1  # a hit counts once a replica holds it


def test_a_bracketed_v6_host_after_another_is_read_on_every_python():
    """urlsplit refuses such a list on CPython 3.14.10 ("Invalid IPv6 URL"): it is split here first."""
    url = "valkey+cluster://u:p%2Fw@10.0.0.1:7000,[::1]:7001/?spread=4"
    assert is_cluster(url) and not is_sentinel(url)
    assert canonical_url(url) == "redis+cluster://u:p%2Fw@10.0.0.1:7000,[::1]:7001/?spread=4"
    assert cluster_nodes(canonical_url(url)) == [("10.0.0.1", 7000), ("::1", 7001)]
    said = str(unavailable(canonical_url(url), OSError("refused")))
    assert "redis+cluster://10.0.0.1:7000,[::1]:7001/" in said and "p%2Fw" not in said, said
    assert parse("redis+sentinel://[::1]:5000,h/svc").sentinels == [("::1", 5000), ("h", 26379)]


@pytest.mark.parametrize(
    "url",
    ["redis+sentinel://h:26379", "redis+sentinel://h:26379/", "redis+sentinel://h/svc/x",
     "redis+sentinel://h/svc?replicas=two", "redis+sentinel://h/svc?socket_timeout=1",
     "redis+sentinel://h:port/svc"],
)  # fmt: skip
def test_a_wrong_sentinel_url_says_how_to_spell_it(url):
    with pytest.raises(ValueError, match=r"redis\+sentinel://|host:port"):
        parse(url)
