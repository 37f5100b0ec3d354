"""``Window`` on Redis: fields, keys, total/totals/rate/series, keys(), top(), clear().

A key's row is a hash, ``shmwin:{NAME}:k:KEY`` ("" for an unkeyed window), holding
``e<slot>`` = the epoch of the bucket in that slot and ``v<slot>.<field>`` = its value;
``shmwin:{NAME}:keys`` is a sorted set, key -> newest write (µs), for keys() and top().
Each operation is one script (see ``lua/``); rows expire a span and a bucket after
their last write.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ...clock import Clock
from ...duration import NS_PER_S, Duration, format_ns, to_ns
from ...errors import GeometryMismatchError, UnknownFieldError
from ...geometry import ring_of
from ...keys import Key
from ...layout import Geometry, Ring
from ...ring import buckets_for
from . import scripts
from .client import NS_PER_US, RedisBase, key_text


class RedisWindow(RedisBase):
    """``Window`` on Redis: fields, keys, total/totals/rate/series, keys(), top(), clear()."""

    def __init__(
        self,
        name: str,
        span: Duration | None = None,
        buckets: int | None = None,
        fields: tuple[str, ...] | list[str] | str = ("count",),
        *,
        backend: str,
        dtype: str = "int64",
        capacity: int = 0,
        clock: Clock | None = None,
        timeout: float = 1.0,
        resolutions: Any = None,
        mode: str | None = None,
        **_shm_only: Any,
    ):
        if resolutions is not None:
            raise ValueError("the redis backend keeps one resolution per window: use span and buckets")
        super().__init__(name, backend, clock, timeout)
        ring = ring_of(60 if span is None else span, 60 if buckets is None else buckets)
        fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self._g = Geometry((ring,), fields, dtype, "locked", 0, capacity)  # validates
        if ring.bucket_ns % NS_PER_US:
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        self._open_geometry(_window_spec(self._g))

    @classmethod
    def attach(
        cls, name: str, *, backend: str, clock: Clock | None = None, timeout: float = 1.0
    ) -> RedisWindow:
        probe = RedisBase(name, backend, clock, timeout)
        try:
            spec = probe._read_geometry()
        finally:
            probe.close()
        g = _parse_window_spec(spec)
        return cls(
            name, g.span_ns / NS_PER_S, g.n_buckets, g.fields, backend=backend, dtype=g.dtype,
            capacity=g.capacity, clock=clock, timeout=timeout,
        )  # fmt: skip

    # geometry, as Window has it
    geometry = property(lambda self: self._g)
    fields = property(lambda self: self._g.fields)
    span = property(lambda self: self._g.span_ns / NS_PER_S)
    span_ns = property(lambda self: self._g.span_ns)
    bucket_ns = property(lambda self: self._g.bucket_ns)
    buckets = property(lambda self: self._g.n_buckets)
    capacity = property(lambda self: self._g.capacity)
    closed = property(lambda self: self._closed)

    @property
    def resolutions(self) -> list[str]:
        return [f"{format_ns(self._g.span_ns)}/{format_ns(self._g.bucket_ns)}"]

    def _field(self, field: str | None) -> int:
        if field is None:
            return 1
        if field not in self._g.fields:
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return self._g.fields.index(field) + 1

    def _check_key(self, key: Key | None, write: bool) -> None:
        if self._g.keyed and key is None and write:
            raise TypeError(f"window {self.name!r} is keyed: pass key=")
        if not self._g.keyed and key is not None:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")

    def add(self, n: float = 1, field: str | None = None, key: Key | None = None) -> None:
        self._check_key(key, write=True)
        f = self._field(field)
        if self._g.dtype == "int64" and not isinstance(n, int | np.integer):
            raise TypeError(f"add() takes an int for an int64 window, not {n!r}")
        g = self._g
        ttl_ms = (g.span_ns + g.bucket_ns) // 1_000_000 + 1
        self._run(
            scripts.ADD, [self._row(key), self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, f, repr(n) if isinstance(n, float) else int(n),
             int(g.dtype == "float64"), ttl_ms, key_text(key), int(g.keyed), len(g.fields),
             g.span_ns // NS_PER_US],
        )  # fmt: skip

    def _series_all(self, last: Duration | None, key: Key | None) -> tuple[npt.NDArray[Any], int, int]:
        """(k x fields sums oldest first, now ns, k): one round trip."""
        self._check_key(key, write=False)
        g = self._g
        k = g.n_buckets if last is None else buckets_for(to_ns(last, "last"), g.bucket_ns, g.n_buckets)
        out = self._run(
            scripts.READ, [self._row(key), self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, len(g.fields), int(g.keyed and key is None),
             self._prefix + "k:", g.span_ns // NS_PER_US],
        )  # fmt: skip
        dtype = np.int64 if g.dtype == "int64" else np.float64
        values = (
            np.array([float(v) for v in out[1:]], dtype=np.float64).astype(dtype).reshape(k, len(g.fields))
        )
        return values, int(out[0]) * NS_PER_US, k

    def total(
        self, field: str | None = None, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> Any:
        f = self._field(field)
        values, _, _ = self._series_all(last, key)
        return _scalar(values[:, f - 1].sum(), self._g.dtype)

    def totals(
        self, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> dict[str, Any]:
        values, _, _ = self._series_all(last, key)
        return {name: _scalar(values[:, i].sum(), self._g.dtype) for i, name in enumerate(self._g.fields)}

    def rate(
        self, field: str | None = None, last: Duration | None = 1, key: Key | None = None, **_shm_only: Any
    ) -> float:
        f = self._field(field)
        values, now_ns, k = self._series_all(last, key)
        covered_ns = now_ns - (now_ns // self._g.bucket_ns - k + 1) * self._g.bucket_ns
        return float(values[:, f - 1].sum()) * NS_PER_S / max(covered_ns, 1)

    def series(
        self, field: str | None = None, last: Duration | None = None, key: Key | None = None, **_shm_only: Any
    ) -> Any:
        f = self._field(field)
        values, _, _ = self._series_all(last, key)
        return values[:, f - 1]

    def keys(self) -> list[str]:
        """Keys with counts inside the window: one round trip."""
        self._keyed()
        found = self._run(scripts.KEYS, [self._prefix + "keys"], [self._g.span_ns // NS_PER_US])
        return [k.decode("latin-1") for k in found]

    def top(
        self, n: int = 10, field: str | None = None, last: Duration | None = None
    ) -> list[tuple[str, Any]]:
        """The ``n`` busiest keys of ``field``, summed on the server: one round trip."""
        self._keyed()
        f, g = self._field(field), self._g
        k = g.n_buckets if last is None else buckets_for(to_ns(last, "last"), g.bucket_ns, g.n_buckets)
        flat = self._run(
            scripts.TOP, [self._prefix + "keys"],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, f, max(n, 0), self._prefix + "k:",
             g.span_ns // NS_PER_US],
        )  # fmt: skip
        return [
            (flat[i].decode("latin-1"), _scalar(float(flat[i + 1]), g.dtype)) for i in range(0, len(flat), 2)
        ]

    def clear(self, key: Key) -> None:
        """Forget every count of ``key``: one round trip."""
        self._keyed()
        self._run(scripts.CLEAR, [self._row(key), self._prefix + "keys"], [key_text(key)])

    def reset(self) -> None:
        self._drop("k:*")
        self._drop("keys")

    def _keyed(self) -> None:
        if not self._g.keyed:
            raise ValueError(f"window {self.name!r} is not keyed (create it with capacity=...)")

    def __repr__(self) -> str:
        return f"<shmwin.Window {self.name!r} on {self.url} {self._g}>"


def _scalar(x: Any, dtype: str) -> Any:
    return int(x) if dtype == "int64" else float(x)


def _window_spec(g: Geometry) -> str:
    return f"window;{g.bucket_ns};{g.n_buckets};{','.join(g.fields)};{g.dtype};{g.capacity}"


def _parse_window_spec(spec: str) -> Geometry:
    kind, bucket_ns, n, fields, dtype, capacity = spec.split(";")
    if kind != "window":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a window")
    return Geometry(
        (Ring(int(bucket_ns), int(n)),), tuple(fields.split(",")), dtype, "locked", 0, int(capacity)
    )
