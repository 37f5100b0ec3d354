"""The connection, script running, key naming and error mapping shared by RedisWindow and RedisLimiter.

The ``redis`` package is imported only here and only when a connection is made, so
``import shmwin`` never needs it and a missing package is a clear :class:`ShmwinError`.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from ...clock import Clock
from ...errors import (
    BackendUnavailableError,
    GeometryMismatchError,
    ShmwinError,
    WindowClosedError,
    WindowNotFoundError,
)
from ...keys import Key
from ...segment import check_name
from .scripts import OPEN, Script

NS_PER_US = 1000


def connect(url: str, timeout: float) -> Any:
    """A ``redis.Redis`` for ``url``, failing fast (``timeout`` seconds) when the server is away."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ShmwinError("the redis backend needs the redis package: pip install 'shmwin[redis]'") from exc
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def unavailable(url: str, exc: Exception) -> BackendUnavailableError:
    """The error for a failed round trip, naming the server without its credentials."""
    where = urllib.parse.urlsplit(url)._replace(netloc=urllib.parse.urlsplit(url).hostname or "").geturl()
    return BackendUnavailableError(f"redis at {where} is unavailable: {exc}")


def key_text(key: Key | None) -> str:
    """A key as the scripts see it: str as is, bytes as latin-1, None as ''."""
    if key is None:
        return ""
    if isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray):
        return bytes(key).decode("latin-1")
    raise TypeError(f"a key is a str or bytes, not {type(key).__name__}")


class RedisBase:
    """Connection, scripts, naming and error mapping shared by RedisWindow and RedisLimiter.

    Every key of a name lives under one hash tag, ``shmwin:{NAME}:``, so a window
    lives in one cluster slot.
    """

    def __init__(self, name: str, url: str, clock: Clock | None, timeout: float):
        check_name(name)  # the same names as shared memory: one namespace of spellings
        self.name = name
        self.url = url
        self._clock = clock
        self._redis = connect(url, timeout)
        import redis

        self._errors: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._no_script: type[Exception] = redis.exceptions.NoScriptError
        self._prefix = f"shmwin:{{{name}}}:"
        self._closed = False

    def _run(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA ``script`` with ARGV[1] = now (µs, or '' for the server's TIME), then ``args``."""
        if self._closed:
            raise WindowClosedError(f"{self.name!r} is closed")
        now = "" if self._clock is None else str(self._clock() // NS_PER_US)
        try:
            try:
                return self._redis.evalsha(script.sha, len(keys), *keys, now, *args)
            except self._no_script:  # a new or restarted server does not know it yet: load it, once
                self._redis.script_load(script.text)
                return self._redis.evalsha(script.sha, len(keys), *keys, now, *args)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    def _row(self, key: Key | None) -> str:
        if key is None:
            return self._prefix + "k:"
        return self._prefix + "k:" + (key if isinstance(key, str) else key.decode("latin-1"))

    def _open_geometry(self, geometry: str) -> None:
        try:
            have = self._redis.eval(OPEN.text, 1, self._prefix + "meta", geometry)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc
        if have:
            self.close()
            raise GeometryMismatchError(
                f"{self.name!r} exists on redis with geometry [{have.decode()}], "
                f"not the requested [{geometry}]"
            )

    def _read_geometry(self) -> str:
        try:
            have = self._redis.hget(self._prefix + "meta", "geometry")
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc
        if have is None:
            raise WindowNotFoundError(f"no window named {self.name!r} on redis")
        return str(have.decode())

    def _drop(self, pattern: str) -> int:
        """Delete this name's keys matching ``pattern`` (SCAN: no index to trust). Not a hot path."""
        dropped = 0
        try:
            batch = []
            for found in self._redis.scan_iter(match=self._prefix + pattern, count=1000):
                batch.append(found)
                if len(batch) == 500:
                    dropped += self._redis.delete(*batch)
                    batch = []
            if batch:
                dropped += self._redis.delete(*batch)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc
        return dropped

    def _local_ns(self) -> int:
        """This host's clock, for timeouts (the test clock when one was given)."""
        return self._clock() if self._clock is not None else time.monotonic_ns()

    def unlink(self) -> bool:
        """Remove the name, its geometry and every key's counts, for every host."""
        return self._drop("*") > 0

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._redis.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
