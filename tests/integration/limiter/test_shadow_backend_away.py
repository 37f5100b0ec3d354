"""A shadow limiter never refuses and never raises because its backend is away, whatever
``on_error`` says (#33 item 6): ``hit``, ``test``, ``acquire`` and ``acquire_async`` answer True.

Two ways for Redis to be away: a port nothing listens on from the start (the limiter is made
while it is away), and a real redis-server stopped after the limiter was made and used. At
4ed36b0 ``hit`` (routed to ``_hit_shadow``, which had no fallback) and ``acquire`` raised
``BackendUnavailableError`` for every ``on_error``, ``test`` followed ``on_error`` (False for
"deny"), and with ``on_error="raise"`` the constructor itself raised.
"""

from __future__ import annotations

import asyncio

import pytest
from support.servers import free_port

import shmwin
from shmwin import Limiter, TokenBucket
from shmwin.errors import BackendUnavailableError

pytestmark = pytest.mark.integration

ON_ERROR = ("raise", "allow", "deny")


def _make(kind: str, name: str, url: str, on_error: str) -> Limiter | TokenBucket:
    options = {"backend": url, "on_error": on_error, "shadow": True, "timeout": 0.2}
    if kind == "token-bucket":
        return TokenBucket(name, "2/minute", burst=2, **options)
    return Limiter(name, "2/minute", **options)


def _every_check(lim: Limiter | TokenBucket) -> dict[str, object]:
    return {
        "hit": lim.hit("k"),
        "hit cost 2": lim.hit("k", 2),
        "test": lim.test("k"),
        "acquire": lim.acquire("k", timeout=1),
        "acquire_async": asyncio.run(lim.acquire_async("k", timeout=1)),
    }


@pytest.mark.parametrize("kind", ["limiter", "token-bucket"])
@pytest.mark.parametrize("on_error", ON_ERROR)
def test_made_while_redis_is_away(name, on_error, kind):
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    lim = _make(kind, name, url, on_error)
    try:
        assert _every_check(lim) == dict.fromkeys(_every_check(lim), True)
        with pytest.raises(BackendUnavailableError):  # a read still says the store is away
            lim.stats("k")
    finally:
        lim.close()


@pytest.mark.parametrize("kind", ["limiter", "token-bucket"])
@pytest.mark.parametrize("on_error", ON_ERROR)
def test_redis_stopped_under_a_shadow_limiter(own_redis, name, on_error, kind):
    lim = _make(kind, name, own_redis.url, on_error)
    try:
        assert [lim.hit("k") for _ in range(4)] == [True] * 4  # over the limit: still True
        assert lim.stats("k").remaining == 0  # what enforcement would show
        own_redis.stop()
        assert _every_check(lim) == dict.fromkeys(_every_check(lim), True)
    finally:
        lim.close()


def test_a_two_tier_shadow_limiter_with_redis_stopped(own_redis, name):
    url = own_redis.url.replace("redis://", "shm+redis://")
    lim = Limiter(name, "2/minute", backend=url, on_error="deny", shadow=True, timeout=0.2)
    try:
        assert [lim.hit("k") for _ in range(4)] == [True] * 4
        own_redis.stop()
        assert [lim.hit(f"new-{i}") for i in range(3)] == [True] * 3  # no lease held: Redis must answer
        assert _every_check(lim) == dict.fromkeys(_every_check(lim), True)
    finally:
        lim.close()
        shmwin.unlink(name)  # the host tier's segment (Redis is gone with its server)
