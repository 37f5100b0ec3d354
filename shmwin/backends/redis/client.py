"""The connection, script running, key naming, the geometry claim and error mapping shared by
RedisWindow and RedisLimiter.

The ``redis`` package is imported only here and only when a connection is made, so
``import shmwin`` never needs it and a missing package is a clear :class:`ShmwinError`.
"""

from __future__ import annotations

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
from ..contract import Key, Request
from ..shm.segment import check_name
from .scripts import OPEN, Script

NS_PER_US = 1000
TIMEOUT_S = 1.0
OPTIONS = frozenset({"timeout"})  # what only this backend honours


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
        check_name(req.name)  # the same names as shared memory: one namespace of spellings
        self.name = req.name
        self.url = req.url
        self._clock: Clock | None = req.clock
        self._redis = connect(req.url, float(req.option("timeout", TIMEOUT_S)))
        import redis

        self._errors: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
        self._no_script: type[Exception] = redis.exceptions.NoScriptError
        self._refused: type[Exception] = redis.exceptions.ResponseError  # a command the server refused
        self._prefix = f"shmwin:{{{req.name}}}:"
        self._clock_key = self._prefix + "clock"  # the name's time, which never goes back (lua/clock.lua)
        self._closed = False
        self._spec = spec
        self._claimed = spec is None  # an attach has read the geometry: nothing to claim
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
                raise GeometryMismatchError(
                    f"{self.name!r} exists on redis with geometry [{have.decode()}], "
                    f"not the requested [{self._spec}]"
                )
        self._claimed = True
        self._on_claimed()

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
        return self._prefix + "k:" + key_text(key)

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
