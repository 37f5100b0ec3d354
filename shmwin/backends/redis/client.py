"""The connection, script running, key naming, the geometry claim and error mapping shared by
RedisWindow and RedisLimiter.

The ``redis`` package is imported only here and only when a connection is made, so
``import shmwin`` never needs it and a missing package is a clear :class:`ShmwinError`.
"""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from ...clock import Clock
from ...errors import (
    BackendUnavailableError,
    GeometryMismatchError,
    NotSupportedError,
    ShmwinError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
)
from ..contract import Key, Request, check_spelling
from .scripts import OPEN, Script
from .urls import host_ports, split_url

NS_PER_US = 1000
TIMEOUT_S = 1.0
OPTIONS = frozenset({"timeout", "on_change"})  # what only this backend honours (on_change: limiters')
CLUSTER_SCHEMES = frozenset({"redis+cluster", "rediss+cluster"})  # rediss: TLS
SENTINEL_SCHEMES = frozenset({"redis+sentinel", "rediss+sentinel"})
# Valkey speaks the same protocol and runs the same Lua: its schemes are other spellings
ALIASES = {"valkey": "redis", "valkeys": "rediss", "valkey+cluster": "redis+cluster",
           "valkeys+cluster": "rediss+cluster", "valkey+sentinel": "redis+sentinel",
           "valkeys+sentinel": "rediss+sentinel", "redis+unix": "unix", "valkey+unix": "unix"}  # fmt: skip
SCHEMES = frozenset({"redis", "rediss", "unix", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES, *ALIASES})


def canonical_url(url: str) -> str:
    """``url`` with a Valkey scheme spelled as Redis's (``valkey://h`` -> ``redis://h``), and limits'
    ``redis+unix://`` and ``valkey+unix://`` as redis-py's ``unix://``."""
    scheme = split_url(url).scheme
    return ALIASES[scheme] + url[len(scheme) :] if scheme in ALIASES else url  # unix:///path keeps its ///


def connect(url: str, timeout: float) -> Any:
    """A client for ``url``, failing fast (``timeout`` seconds) when the server is away: a
    ``redis.Redis``, for ``redis+cluster://`` a :class:`LazyCluster`, for ``redis+sentinel://``
    a client of whichever server the sentinels name master (:mod:`.sentinel`)."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ShmwinError("the redis backend needs the redis package: pip install 'shmwin[redis]'") from exc
    url = canonical_url(url)
    if is_cluster(url):
        return LazyCluster(url, timeout)
    if is_sentinel(url):
        from .sentinel import master_client

        return master_client(url, timeout)
    check_plain_url(url)
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def check_plain_url(url: str) -> None:
    """A ValueError that names ``url`` for a ``redis://``, ``rediss://`` or ``unix://`` URL
    redis-py would misread: a port that is no port, a database that is no number (redis-py
    reads database 0), a query option no connection takes (redis-py's TypeError at the first
    command, after the open)."""
    import inspect

    import redis.connection

    try:
        options = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise ValueError(f"{exc}, in the Redis URL {url!r}") from None
    path = split_url(url).path
    if not url.startswith("unix:") and path not in ("", "/") and not path.strip("/").isdigit():
        raise ValueError(f"a Redis URL's path is a database number (redis://host:port/0), not {url!r}")
    takes = {"max_connections"}
    for cls in options.get("connection_class", redis.connection.Connection).__mro__:
        if "__init__" in vars(cls):
            takes.update(inspect.signature(cls.__init__).parameters)
    unknown = sorted(set(options) - takes - {"connection_class", "path", "host", "port", "db"})
    if unknown:
        raise ValueError(f"a Redis URL option that no redis-py connection takes: {', '.join(unknown)} "
                         f"(in {url!r})")


def is_cluster(url: str) -> bool:
    return split_url(canonical_url(url)).scheme in CLUSTER_SCHEMES


def is_sentinel(url: str) -> bool:
    return split_url(canonical_url(url)).scheme in SENTINEL_SCHEMES


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The seed nodes of ``redis+cluster://[user:password@]host:port[,host:port...]/``, as
    limits spells it; any one that answers tells the client the whole cluster."""
    parts = split_url(url)
    if parts.path not in ("", "/", "/0"):
        raise ValueError(f"a Redis Cluster URL has no database (one database, 0): {url!r}")
    spread_groups(url)  # its one option, checked
    return host_ports(url, 6379, "a Redis Cluster node")


def spread_groups(url: str) -> int:
    """A cluster URL's ``?spread=N``: a limiter's keys spread over N hash tags (0: one, the
    name's). Only a cluster URL takes it; N is 0 to 1024."""
    parts = split_url(url)
    options = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    if not is_cluster(url):
        if "spread" in options:
            raise ValueError(f"?spread= spreads keys over a cluster's masters: redis+cluster://, not {url!r}")
        return 0  # a plain URL's options are redis-py's
    if not options:
        return 0
    value = options.get("spread", [""])[-1]
    if set(options) != {"spread"} or not value.isdigit() or int(value) > 1024:
        raise ValueError(f"a Redis Cluster URL's one option is ?spread=N (0 to 1024 hash tags), not {url!r}")
    return int(value)


class LazyCluster:
    """A ``redis.cluster.RedisCluster`` made on first use (and again after a failed try).

    RedisCluster asks its seed nodes for the slot map when it is made, so making it in
    :func:`connect` would make an open fail while the cluster is away -- where a plain
    ``redis.Redis`` connects on its first command, and ``on_error`` decides. Every command
    goes to the node that owns its keys' slot; MOVED and ASK redirections, and a new slot
    map after a failover, are the client's business (it re-reads the map and retries).
    """

    def __init__(self, url: str, timeout: float):
        self._url, self._timeout = url, timeout
        self._nodes = cluster_nodes(url)
        self._client: Any = None
        self._making = threading.Lock()  # two threads' first calls make one client

    def _make(self) -> Any:
        import redis
        from redis.cluster import ClusterNode, RedisCluster

        parts = split_url(canonical_url(self._url))
        try:
            return RedisCluster(
                startup_nodes=[ClusterNode(host, port) for host, port in self._nodes],  # type: ignore[no-untyped-call]
                username=urllib.parse.unquote(parts.username) if parts.username else None,
                password=urllib.parse.unquote(parts.password) if parts.password else None,
                ssl=parts.scheme == "rediss+cluster", socket_timeout=self._timeout,
                socket_connect_timeout=self._timeout,
            )  # fmt: skip
        except redis.exceptions.RedisClusterException as exc:  # no seed answered with a slot map
            raise redis.ConnectionError(str(exc)) from exc

    def __getattr__(self, attr: str) -> Any:
        """The client's ``attr``; before it is made, a stand-in that makes it when called (so
        a cluster that is away fails the call, inside the caller's error handling)."""
        if attr.startswith("_"):  # never the client's privates, nor ours before __init__ set them
            raise AttributeError(attr)
        if self._client is not None:
            return getattr(self._client, attr)
        return lambda *args, **kwargs: getattr(self._connected(), attr)(*args, **kwargs)

    def _connected(self) -> Any:
        with self._making:
            if self._client is None:
                self._client = self._make()
            return self._client

    def name_node(self, prefix: str) -> Any:
        """The node that owns the slot of a name's keys (``prefix`` holds its hash tag)."""
        return self._connected().get_node_from_key(prefix)

    def close(self) -> None:
        with self._making:
            if self._client is not None:
                self._client.close()
                self._client = None


def unavailable(url: str, exc: Exception) -> BackendUnavailableError:
    """The error for a failed round trip, naming the server without its credentials."""
    parts = split_url(url)
    hosts = parts.netloc.rpartition("@")[2]  # host:port (or a cluster's seed list), no credentials
    return BackendUnavailableError(f"redis at {parts._replace(netloc=hosts).geturl()} is unavailable: {exc}")


class UnacknowledgedWriteError(BackendUnavailableError):
    """A script ran on the master, but too few replicas acknowledged its writes in time (a
    sentinel URL's ``WAIT``): its answer does not stand, yet the master holds what it wrote,
    which a failover may or may not keep. ``answer`` is the script's answer, so that a caller
    can undo what it must not leave behind (the two-tier backend gives an unacknowledged lease
    back)."""

    def __init__(self, message: str, answer: Any):
        super().__init__(message)
        self.answer = answer


def unavailable_errors(url: str) -> tuple[type[Exception], ...]:
    """What a round trip raises when the server (or, on a cluster, the node that owns a slot)
    is away. A cluster adds CLUSTERDOWN (a failover under way) and the redis-py client's own
    errors: no slot map from any seed, a slot no node serves yet, a redirection loop (TTL
    exhausted). The client also refuses a request whose keys span slots, but no script here
    names keys outside its name's hash tag."""
    import redis
    from redis import exceptions as e

    plain: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
    if not is_cluster(url):
        return plain
    return (*plain, e.ClusterError, e.TryAgainError, e.RedisClusterException)


def server_time(clock: Clock | None) -> Clock | None:
    """The time source of the scripts: None (the server's ``TIME``), or a test's
    :class:`~.testing.ServerTime`. Any other ``clock=`` is refused: a host's clock sent as the
    time would let that host move the name's clock for every host (one running ahead by a day
    ages every count by a day), and readings of several processes, even of one clock, reach
    the server out of order and push the name's time ahead of real time."""
    from .testing import ServerTime

    if clock is None or isinstance(clock, ServerTime):
        return clock
    raise NotSupportedError(
        f"clock={clock!r} on a redis backend: its time is the server's TIME, the one clock every "
        "host shares, and no host's clock may move it. Leave clock= out (tests drive the server's "
        "time with shmwin.backends.redis.testing.ServerTime)"
    )


def key_text(key: Key | None) -> str:
    """A key as the scripts see it: str as is, bytes as latin-1, None as ''."""
    if key is None:
        return ""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return bytes(key).decode("latin-1")
    raise TypeError(f"a key is a str or bytes, not {type(key).__name__}")


def required_key(key: Key, whose: str) -> Key:
    """A keyed store's key (a limiter's, a token bucket's: ``whose``), which must be a str or
    bytes (no None, no bytearray): as it is, else a TypeError naming ``whose``."""
    if not isinstance(key, str | bytes):
        raise TypeError(f"{whose} key is a str or bytes, not {type(key).__name__}")
    return key


def not_supported(what: str) -> NotSupportedError:
    return NotSupportedError(f"the redis backend has no {what}")


class RedisBase:
    """Connection, scripts, naming, the geometry claim and error mapping.

    Every key of a name lives under one hash tag, ``shmwin:{NAME}:``, so a window lives in
    one cluster slot. Opening *claims* the name for a geometry (``lua/open.lua``); with
    ``on_error`` other than "raise" a server that is away does not stop the open: the
    claim is made by the first call that gets through.
    """

    def __init__(self, req: Request, spec: str | None):
        check_spelling(req.name)  # the same names as shared memory: one namespace of spellings
        self.name = req.name
        self.url = req.url
        self._clock: Clock | None = server_time(req.clock)
        self._timeout_s = float(req.option("timeout", TIMEOUT_S))
        self._redis = connect(req.url, self._timeout_s)
        import redis

        self._errors = unavailable_errors(req.url)
        self._replicas = 0  # how many replicas must hold a script's writes before its answer counts
        if is_sentinel(req.url):
            from .sentinel import replicas_to_wait

            self._replicas = replicas_to_wait(canonical_url(req.url))
        self._no_script: type[Exception] = redis.exceptions.NoScriptError
        self._refused: type[Exception] = redis.exceptions.ResponseError  # a command the server refused
        self._prefix = f"shmwin:{{{req.name}}}:"
        self._clock_key = self._prefix + "clock"  # the name's time, which never goes back (lua/clock.lua)
        self._closed = False
        self._spec = spec
        self._claimed = spec is None  # an attach has read the geometry: nothing to claim
        self._opened_ns = self._own_ns()  # a claim deferred past the open dates the open by it
        if spec is None:
            return
        try:
            self._claim(req.exclusive)
        except BackendUnavailableError:
            if req.on_error == "raise" or req.exclusive:
                self.close()
                raise
        except BaseException:
            self.close()
            raise

    @staticmethod
    def read_spec(req: Request) -> str:
        """The geometry spec stored for ``req.name`` (an attach); the server must answer."""
        probe = RedisBase(req, None)
        try:
            have = probe._call(probe._redis.hget, probe._prefix + "meta", "geometry")
        finally:
            probe.close()
        if have is None:
            raise WindowNotFoundError(f"no window named {req.name!r} on redis")
        return str(have.decode())

    def _claim(self, exclusive: bool = False) -> None:
        """Claim the name for this geometry (once), or raise if it holds another."""
        assert self._spec is not None
        meta = self._prefix + "meta"
        if exclusive:
            if not self._call(self._redis.hsetnx, meta, "geometry", self._spec):
                raise WindowExistsError(f"window {self.name!r} already exists on redis")
        else:
            have = self._call(self._redis.eval, OPEN.text, 1, meta, self._spec)
            if have:
                both = have.decode().startswith("window;") and self._spec.startswith("window;")
                hint = (": a window's buckets do not change live. To start it anew, drop it with "
                        f"'shmwin rm --backend URL {self.name}' (or Window.attach({self.name!r}, "
                        "backend=URL).unlink()) once no process writes to it (one that still does "
                        "writes its rows in its own buckets); its counts go")  # fmt: skip
                raise GeometryMismatchError(
                    f"{self.name!r} exists on redis with geometry [{have.decode()}], "
                    f"not the requested [{self._spec}]{hint if both else ''}"
                )
        self._claimed = True
        self._on_claimed()

    def _own_ns(self) -> int:
        """This process's clock (ns): a test's ServerTime, else the host's monotonic clock (only
        its durations are sent: no host's time moves the name's)."""
        return self._clock() if self._clock is not None else time.monotonic_ns()

    def _claim_mode(self, exclusive: bool, on_change: str) -> tuple[str, int]:
        """change.lua's mode for a live name's claim, and its ARGV[4]: "raise" for an exclusive
        open, else ``on_change``; deferred past the open (on_error, the server away then),
        "deferred-<on_change>" and how long ago (µs) the open was (change.lua's Deferred: the
        rates changed since the open win, those older than it give way)."""
        if exclusive:
            return "raise", 0
        if getattr(self, "_deferred", False):
            return f"deferred-{on_change}", (self._own_ns() - self._opened_ns) // NS_PER_US
        return on_change, 0

    def _on_claimed(self) -> None:
        """Called once the name is claimed (subclasses enable their fast paths here)."""

    def _call(self, command: Any, *args: Any) -> Any:
        """One plain command, with the server's absence as BackendUnavailableError."""
        self._check_open()
        try:
            return command(*args)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    def _run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA ``script`` with ARGV[1] = now (µs, or '' for the server's TIME), then ``args``."""
        self._check_open()
        if not self._claimed:
            self._claim()
        return self._eval(script, keys, args)

    def _eval(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """``_run`` without the claim: what the claim itself runs (a limiter's change.lua)."""
        now = "" if self._clock is None else str(self._clock() // NS_PER_US)
        try:
            if self._replicas:
                return self._run_replicated(script, [len(keys), *keys, now, *args])
            try:
                return self._redis.evalsha(script.sha, len(keys), *keys, now, *args)
            except self._no_script:  # a new or restarted server (or a cluster's new master) does not
                return self._redis.eval(script.text, len(keys), *keys, now, *args)  # know it: EVAL caches it
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    def _run_replicated(self, script: Script, eval_args: list[Any]) -> Any:
        """The script and ``WAIT replicas timeout`` in one round trip (a pipeline, no transaction):
        its answer stands only once that many replicas hold what it wrote, so a failover to one of
        them loses no admitted hit (sentinel.py). Too few acknowledgements: the server is away.
        The WAIT takes half the socket's timeout, so that its answer -- the script's, with too few
        acknowledgements -- still reaches the caller: as long as the timeout, it raced the
        socket's, and under load the socket often won, the caller then not knowing what the
        script wrote (a two-tier lease: given back by its id alone)."""
        wait_ms = max(1, int(self._timeout_s * 1000) // 2)
        for attempt in (script.sha, script.text):
            pipe = self._redis.pipeline(transaction=False)
            pipe.execute_command("EVALSHA" if attempt is script.sha else "EVAL", attempt, *eval_args)
            pipe.execute_command("WAIT", self._replicas, wait_ms)
            answer, acked = pipe.execute(raise_on_error=False)
            if isinstance(answer, self._no_script):
                continue  # a new master does not know the script yet: EVAL caches it
            if isinstance(answer, Exception):
                raise answer
            if isinstance(acked, Exception):
                raise acked
            if int(acked) < self._replicas:
                why = f"{acked} of {self._replicas} replicas acknowledged the write"
                raise UnacknowledgedWriteError(str(unavailable(self.url, RuntimeError(why))), answer)
            return answer
        raise AssertionError("EVAL cannot be missing its script")  # pragma: no cover

    def hosts_seen(self, host: str, horizon_ns: int) -> int:
        """Say ``host`` is alive, and count the hosts seen within ``horizon_ns`` (hosts.lua):
        on_error="local" divides the limit by that count while the server is away."""
        from .scripts import HOSTS

        return int(self._run(HOSTS, [self._prefix + "hosts"], [host, max(1, horizon_ns // NS_PER_US)]))

    def _row(self, key: Key | None) -> str:
        return self._prefix + "k:" + key_text(key)

    def _drop(self, pattern: str) -> int:
        """Delete this name's keys matching ``pattern`` (SCAN: no index to trust). Not a hot path.
        On a cluster only the master of the name's slot holds them: SCAN that one, asking the
        client's slot map again once if that node is gone (the map is read anew after a failure)."""
        attempts = 2 if is_cluster(self.url) else 1
        for attempt in range(attempts):
            try:
                return self._scan_and_delete(pattern)
            except self._errors as exc:
                if attempt + 1 == attempts:
                    raise unavailable(self.url, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _scan_and_delete(self, pattern: str, prefix: str | None = None) -> int:
        """Delete the keys ``prefix`` (the name's, by default) + ``pattern`` on the node of that
        prefix's slot."""
        prefix = self._prefix if prefix is None else prefix
        dropped, batch = 0, []
        where = {"target_nodes": self._redis.name_node(prefix)} if is_cluster(self.url) else {}
        for found in self._redis.scan_iter(match=prefix + pattern, count=1000, **where):
            batch.append(found)
            if len(batch) == 500:
                dropped += self._redis.delete(*batch)
                batch = []
        if batch:
            dropped += self._redis.delete(*batch)
        return dropped

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise WindowClosedError(f"{self.name!r} is closed")

    def unlink(self) -> bool:
        """Remove the name, its geometry and every key's counts, for every host."""
        return self._drop("*") > 0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._redis.close()
