"""?spread=N on a Redis Cluster: a limiter's keys over N hash tags, so a hot name uses every
master; each group keeps its own clock (the scripts' clock.lua: time never goes back), and the
limits hold per key exactly as with one hash tag."""

from __future__ import annotations

import pytest

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime
from shmwin.errors import GeometryMismatchError

S = 1_000_000_000
GROUPS = 16


def _spread(cluster, groups: int = GROUPS) -> str:
    return f"{cluster.url}?spread={groups}"


def test_a_names_keys_land_on_every_master(redis_cluster, name):
    clock = ManualClock(1_000 * S)
    lim = Limiter(name, "3/minute", backend=_spread(redis_cluster), clock=ServerTime(clock))
    try:
        keys = [f"user-{i}" for i in range(60)]
        admitted = {k: sum(lim.hit(k) for _ in range(5)) for k in keys}
        assert set(admitted.values()) == {3}  # exact per key
        rows = [lim._backend._keys_of(k)[0] for k in keys]
        masters = {redis_cluster.master_of(row) for row in rows}
        assert len(masters) == redis_cluster.MASTERS, masters
        clock.advance(70)  # a period and its last bucket
        assert all(lim.hit(k) for k in keys)
    finally:
        lim.unlink()
        lim.close()


def test_every_master_holds_no_key_of_the_name_after_unlink(redis_cluster, name):
    lim = Limiter(name, "3/minute", backend=_spread(redis_cluster))
    for i in range(40):
        lim.hit(f"k{i}")
    lim.unlink()
    lim.close()
    for port in redis_cluster.serving(redis_cluster.live()[0]):
        out = redis_cluster.ask_node(port, "--scan", "--pattern", f"shmwin:{{{name}*")
        assert out.strip() == "", (port, out)


def test_hosts_must_spread_alike(redis_cluster, name):
    lim = Limiter(name, "3/minute", backend=_spread(redis_cluster))
    try:
        with pytest.raises(GeometryMismatchError):
            Limiter(name, "3/minute", backend=redis_cluster.url)
        with pytest.raises(GeometryMismatchError, match="spread"):
            Limiter.attach(name, backend=_spread(redis_cluster, 8))
    finally:
        lim.unlink()
        lim.close()


def test_spread_is_a_cluster_option_with_a_count(redis_server):
    with pytest.raises(ValueError, match="redis\\+cluster"):
        Limiter("x", "3/minute", backend=redis_server.url + "?spread=4")
    with pytest.raises(ValueError, match="spread=N"):
        Limiter("x", "3/minute", backend="redis+cluster://127.0.0.1:1/?spread=many")
