"""The shell tools' view of a Redis server: the names kept there, and a limiter's keys (SCAN,
read-only). A two-tier URL (``shm+redis://``) is refused: opening its names would make their
lease segments on this host."""

from __future__ import annotations

from typing import Any

REDIS_SCAN_KEYS = 10_000


def redis_names(url: str, timeout: float = 2.0) -> list[str]:
    """The windows and limiters kept on the Redis server at ``url`` (one SCAN)."""
    client = _redis(url, timeout)
    try:
        found = {
            k.decode(errors="replace")[len("shmwin:{") : -len("}:meta")]
            for k in client.scan_iter(match="shmwin:{*}:meta", count=1000)
        }
    finally:
        client.close()
    return sorted(found)


def redis_keys(url: str, name: str, limit: int = REDIS_SCAN_KEYS, timeout: float = 2.0) -> list[str]:
    """Up to ``limit`` keys that have a ring in Redis limiter ``name`` (SCAN, read-only); with
    ``?spread=N``, over the name's groups' tags ``{NAME#g}``, on every master."""
    from ..backends.redis.client import spread_groups

    client, out = _redis(url, timeout), set[str]()
    prefix = f"shmwin:{{{name}}}:"  # rows are k:KEY, or k<layout>:KEY after a change of periods
    head = f"shmwin:{{{name}#"  # a spread name's: shmwin:{NAME#g}:k:KEY
    match = _redis_escape(head) + "*}:k*" if spread_groups(url) else _redis_escape(prefix) + "k*"
    try:
        for found in client.scan_iter(match=match, count=1000):
            text = found.decode("latin-1")
            if not text.startswith(prefix):  # a group's row: its tag's group is a number
                group, tag_end, text = text[len(head) :].partition("}:")
                text = prefix + text if tag_end and group.isdigit() else ""
            infix, sep, key = text[len(prefix) :].partition(":")
            out.update([key] if sep and (infix == "k" or infix[1:].isdigit()) else [])
            if len(out) >= limit:
                break
    finally:
        client.close()
    return sorted(out)


def check_readable(url: str) -> None:
    """A ValueError for a two-tier URL (``shm+redis://``): opening its names would make their
    lease segments on this host, and the tools are read-only."""
    if url.startswith("shm+"):
        raise ValueError(f"the shmwin tools read Redis itself: --backend {url.removeprefix('shm+')!r}, "
                         f"not {url!r} (a two-tier limiter's leases are not shown yet)")


def drop_name(url: str, name: str, timeout: float = 2.0) -> int:
    """Delete every key of ``name`` on the Redis server or cluster at ``url``, whatever kept it --
    a two-tier limiter's leases, a limiter spread over ``?spread=N`` groups (its claim says N) --
    its claim last (a drop cut short is listed still, and done again). ``shmwin rm --backend``'s
    way for a name that ``url`` does not open as it is. The number of keys deleted."""
    from ..backends.redis.client import unavailable, unavailable_errors

    client, dropped = _redis(url, timeout), 0
    try:
        groups = _claim_kind(client, name).partition("/spread=")[2]
        prefixes = [f"shmwin:{{{name}#{g}}}:" for g in range(int(groups) if groups.isdigit() else 0)]
        for prefix in [*prefixes, f"shmwin:{{{name}}}:"]:
            found = sorted(client.scan_iter(match=_redis_escape(prefix) + "*", count=1000))
            found.sort(key=lambda k: k.endswith(b":meta"))  # the claim last
            for at in range(0, len(found), 500):
                dropped += client.delete(*found[at : at + 500])
    except unavailable_errors(url) as exc:
        raise unavailable(url, exc) from exc
    finally:
        client.close()
    return dropped


def _claim_kind(client: Any, name: str) -> str:
    """What ``name``'s claim says it is (``limiter``, ``limiter/spread=N``, ``lease-limiter``...)."""
    spec = client.hget(f"shmwin:{{{name}}}:meta", "geometry")
    return str(spec.decode(errors="replace").partition(";")[0]) if spec else ""


def refuse_two_tier(url: str, name: str, timeout: float = 2.0) -> None:
    """A NotSupportedError that says what the tools do with a two-tier limiter's name, if
    ``name`` is one (a claim of kind ``lease-limiter``): opened on the plain URL it only says to
    put ``shm+`` before it, which these tools refuse."""
    from ..backends.redis.client import unavailable, unavailable_errors
    from ..errors import NotSupportedError

    client = _redis(url, timeout)
    try:
        kind = _claim_kind(client, name)
    except unavailable_errors(url) as exc:
        raise unavailable(url, exc) from exc
    finally:
        client.close()
    if kind == "lease-limiter":
        raise NotSupportedError(f"{name!r} is a two-tier limiter's (shm+redis://): its leases are not shown "
                                "yet; 'shmwin set --backend shm+URL' changes its rates, 'shmwin rm --backend "
                                "URL' drops it")  # fmt: skip


def _redis(url: str, timeout: float) -> Any:
    from ..backends.redis.client import connect, unavailable

    check_readable(url)
    client = connect(url, timeout)
    try:
        client.ping()
    except Exception as exc:  # redis' ConnectionError, TimeoutError, AuthenticationError...
        client.close()
        raise unavailable(url, exc) from exc
    return client


def _redis_escape(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
