"""``redis+sentinel://`` URLs, as limits spells them: the sentinels to ask, and the name of the
service whose master they elect.

    redis+sentinel://[[user]:password@]host:port[,host:port...]/SERVICE[/DB][?replicas=N]

The hosts are sentinels (26379 when a port is left out); the credentials, if any, are the
master's, and the sentinels' too when they ask for them (limits sends them to both; a sentinel
with no password of its own is asked without, as it refuses an AUTH). The client asks a
sentinel for the master on each new connection, and drops a connection that finds its server
demoted (READONLY), so a failover reaches every host at its next call; the calls in between fail
as the server being away, and the limiter's ``on_error`` answers them.

Replication is asynchronous: a master that dies can take its last writes with it, and the counts
with them. So each script that writes waits, in the same round trip, until ``replicas`` (default
1) replicas hold it (``WAIT``): a hit is admitted only once a replica that the sentinels may
promote has counted it, and an old master that went on taking writes after its demotion gets no
acknowledgement, so what it counted is never admitted (the call fails: ``on_error``).
``?replicas=0`` turns the wait off (one less hop; counts may then be lost in a failover).
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from typing import Any

from .urls import host_ports, split_url

SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelTarget:
    """What a sentinel URL names."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int
    username: str | None
    password: str | None
    ssl: bool
    replicas: int


def parse(url: str) -> SentinelTarget:
    """A sentinel URL's parts; a ValueError that shows the spelling when one is wrong."""
    parts = split_url(url)
    spelling = "redis+sentinel://[:password@]host:port[,host:port...]/SERVICE[/DB][?replicas=N]"
    service, _, db = parts.path.strip("/").partition("/")
    if not service or (db and not db.isdigit()):
        raise ValueError(f"a sentinel URL names its service (and a database number): {spelling}, not {url!r}")
    options = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(options) - {"replicas"})
    replicas = options.get("replicas", ["1"])[-1]
    if unknown or not replicas.isdigit():
        raise ValueError(f"a sentinel URL's only option is replicas=N (a count): {spelling}, not {url!r}")
    return SentinelTarget(
        sentinels=host_ports(url, SENTINEL_PORT, "a sentinel"),
        service=service,
        db=int(db or 0),
        username=urllib.parse.unquote(parts.username) if parts.username else None,
        password=urllib.parse.unquote(parts.password) if parts.password else None,
        ssl=parts.scheme.startswith("rediss"),
        replicas=int(replicas),
    )


class _Asker:
    """One sentinel's clients: asked without credentials until it asks for them (``NOAUTH``),
    then with the URL's; back without if those are refused in turn. It stands in
    ``Sentinel.sentinels``, where only ``sentinel_masters`` is asked (``discover_master``),
    which goes on to the next sentinel only on a ConnectionError or a TimeoutError: a
    sentinel that answers junk (a server that is no sentinel: ``unknown command``) is one.
    Its clients do not retry (redis-py's default retries a refused connection or a NOAUTH 3
    times, backing off: 6-12 s for a dead sentinel, at every call while all are), and it
    reads as its address in redis-py's "No master found" (not the client's whole repr)."""

    def __init__(self, where: tuple[str, int], clients: list[Any]):
        self._where, self._clients = where, clients

    def sentinel_masters(self) -> Any:
        from redis.exceptions import AuthenticationError, ConnectionError, ResponseError

        try:
            try:
                return self._clients[0].sentinel_masters()
            except AuthenticationError:
                if len(self._clients) == 1:
                    raise
                self._clients.reverse()
                return self._clients[0].sentinel_masters()
        except ResponseError as exc:
            raise ConnectionError(f"not a sentinel's answer: {exc}") from exc

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._clients[0], attr)

    def __repr__(self) -> str:
        return f"sentinel {self._where[0]}:{self._where[1]}"


def master_client(url: str, timeout: float) -> Any:
    """A ``redis.Redis`` whose connections go to the service's current master."""
    from redis import Redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    from redis.sentinel import Sentinel

    target = parse(url)
    timeouts = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    sentinel = Sentinel(target.sentinels, sentinel_kwargs=dict(timeouts), **timeouts)  # type: ignore[no-untyped-call]

    def ask(host: str, port: int, authed: bool) -> Any:
        return Redis(
            host=host, port=port, username=target.username if authed else None,
            password=target.password if authed else None, retry=Retry(NoBackoff(), 0),
            socket_timeout=timeout, socket_connect_timeout=timeout,
        )  # fmt: skip

    authed = [False] if target.password is None else [False, True]
    askers: list[Any] = [_Asker((h, p), [ask(h, p, a) for a in authed]) for h, p in target.sentinels]
    sentinel.sentinels = askers
    return sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, db=target.db, username=target.username, password=target.password, ssl=target.ssl,
    )  # fmt: skip


def replicas_to_wait(url: str) -> int:
    return parse(url).replicas
