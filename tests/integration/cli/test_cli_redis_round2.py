"""Round 2 attacks on the shell tools over Redis: `shmwin rm --backend` of every kind of name."""

from __future__ import annotations

from typing import Any

from support.cli_support import cli

from shmwin import Limiter


def _keys(url: str, name: str) -> list[str]:
    """Every key of ``name`` on the server or cluster at ``url`` (its tag, or its groups' tags)."""
    import redis
    from redis.cluster import RedisCluster

    client: Any
    if url.startswith("redis+cluster://"):
        host, port = url.split("://")[1].split(",")[0].rstrip("/").split(":")
        client = RedisCluster(host=host, port=int(port))
    else:
        client = redis.Redis.from_url(url)
    try:
        return sorted(k.decode() for k in client.scan_iter(match=f"shmwin:{{{name}[}}#]*", count=1000))
    finally:
        client.close()


def test_rm_backend_drops_spread_and_two_tier_names(redis_cluster, make_name):
    # Before: a two-tier name could not be removed at all -- `rm --backend shm+URL` said to give
    # the plain URL, `rm --backend URL` said to put shm+ before it (exit 2 both, every key kept);
    # a spread limiter without ?spread=N in the URL was refused as "not a token bucket".
    url = redis_cluster.url
    spread, two, three = make_name("spread"), make_name("two"), make_name("three")
    lims = [Limiter(spread, "5/minute", backend=url + "?spread=8"),
            Limiter(two, "5/minute", backend="shm+" + url), Limiter(three, "5/minute", backend="shm+" + url)]
    try:
        for lim in lims:
            for i in range(20):
                lim.hit(f"k{i}")
        assert len(_keys(url, spread)) > 8 * 2 and _keys(url, two) and _keys(url, three)

        r = cli("rm", spread, "--backend", url, check=False)
        assert (r.returncode, r.stderr) == (0, ""), r
        assert r.stdout.startswith(f"removed {spread} from {url} ") and _keys(url, spread) == []

        r = cli("rm", two, "--backend", "shm+" + url, check=False)
        assert (r.returncode, r.stderr) == (0, ""), r
        assert f"'shmwin rm {two}' there" in r.stdout and _keys(url, two) == []

        r = cli("rm", three[:-2] + "*", "--backend", url, check=False)  # a glob, the plain URL
        assert (r.returncode, r.stderr) == (0, ""), r
        assert r.stdout.startswith(f"removed {three} from {url} ") and _keys(url, three) == []

        gone = cli("rm", two, "--backend", url, check=False)
        assert gone.returncode == 1 and f"no window named {two!r}" in gone.stdout, gone
    finally:
        for lim in lims:
            lim.unlink()
            lim.close()


def test_show_and_ls_of_a_two_tier_name_say_what_the_tools_do(redis_server, make_name):
    # Before: `show --backend URL` said to put shm+ before the URL, and `show --backend shm+URL`
    # said to give the plain URL (exit 2 both); `ls` listed it "unreadable: GeometryMismatchError".
    url, name = redis_server.url, make_name("two")
    lim = Limiter(name, "5/minute", backend="shm+" + url)
    try:
        lim.hit("a")
        shown = cli("show", name, "--backend", url, check=False)
        assert shown.returncode == 2 and "is a two-tier limiter's (shm+redis://)" in shown.stderr, shown
        assert "put shm+" not in shown.stderr and "open it with shm+" not in shown.stderr, shown
        listed = [line for line in cli("ls", "--backend", url).stdout.splitlines() if name in line]
        assert len(listed) == 1 and "NotSupportedError" in listed[0], listed
        r = cli("rm", name, "--backend", url, check=False)  # still dropped by its keys
        assert (r.returncode, r.stderr) == (0, ""), r
    finally:
        lim.unlink()
        lim.close()
