"""RedisWindow: ``Window`` on Redis -- add, read the last k buckets, keys, top, clear, reset.

A key's row is a hash, ``shmwin:{NAME}:k:KEY`` ("" for an unkeyed window), holding
``e<slot>`` = the epoch of the bucket in that slot and ``v<slot>.<field>`` = its value;
``shmwin:{NAME}:keys`` is a sorted set, key -> newest write (µs), for keys() and top().
Each operation is one script (see ``lua/``); rows expire a span and a bucket after
their last write. One resolution per window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import UnknownFieldError
from ...geometry import Geometry, Meta, Ring
from ...policy import INT64_MAX, INT64_MIN
from ..contract import Key, Number, Reading, Request
from . import live, scripts
from .client import NS_PER_US, RedisBase, key_text, not_supported


class RedisWindow(RedisBase):
    """``Window`` on Redis: one atomic script per operation (see the module docstring)."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        self._g = g
        super().__init__(req, _window_spec(g) if claim else None)

    @classmethod
    def open(cls, req: Request) -> RedisWindow:
        """The registry's entry: create-or-attach, create, or attach (geometry read from redis)."""
        if req.geometry is None:
            return cls(req, _parse_window_spec(RedisBase.read_spec(req)), claim=False)
        return cls(req, _redis_geometry(req.geometry), claim=True)

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def nbytes(self) -> int:
        raise not_supported("segment to measure (nbytes): its rows live on the server")

    @property
    def meta(self) -> Meta:
        raise not_supported("segment header (meta): no creator process, no boot id")

    # -- writing ----------------------------------------------------------------------

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None:
        self._add(n, field, key, with_total=False)

    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number:
        return self._number(self._add(n, field, key, with_total=True))

    def add_batch(self, items: Sequence[tuple[int, int, Number]], field: str, key: Key | None) -> None:
        raise not_supported(
            "stamped add_many(at=...): the stamps are this host's monotonic clock, redis counts in its own"
        )

    def _add(self, n: Number, field: str | None, key: Key | None, with_total: bool) -> Any:
        g = self._g
        if g.keyed and key is None:
            raise TypeError(f"window {self.name!r} is keyed: pass key=")
        f = self._field(field)
        amount = _amount(n, g.dtype)
        ttl_ms = (g.span_ns + g.bucket_ns) // 1_000_000 + 1
        try:
            return self._run(
                scripts.ADD, [self._row(self._key(key)), self._prefix + "keys", self._clock_key],
                [g.bucket_ns // NS_PER_US, g.n_buckets, f, amount, int(g.dtype == "float64"), ttl_ms,
                 key_text(key), int(g.keyed), len(g.fields), g.span_ns // NS_PER_US, int(with_total)],
            )  # fmt: skip
        except self._refused as exc:  # HINCRBY's own check: "increment ... would overflow"
            if "overflow" in str(exc):
                raise OverflowError(f"add({n!r}) would take a bucket of {self.name!r} past int64") from exc
            raise

    # -- reading ----------------------------------------------------------------------

    def read(
        self, value_index: int | None, ring_index: int, k: int, key: Key | None, ordered: bool = True
    ) -> Reading:
        """The last ``k`` buckets, oldest first (always): one round trip."""
        g = self._g
        all_keys = g.keyed and key is None
        out = self._run(
            scripts.READ, [self._row(self._key(key)), self._prefix + "keys", self._clock_key],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, len(g.fields), int(all_keys), self._prefix + "k:",
             g.span_ns // NS_PER_US, int(g.dtype == "int64")],
        )  # fmt: skip
        values = self._array([self._number(v) for v in out[1:]]).reshape(k, len(g.fields))
        return Reading(values if value_index is None else values[:, value_index], int(out[0]) * NS_PER_US)

    def full_count(self) -> int:
        """Redis has no key table to fill: 0 (its memory limit is the server's policy)."""
        return 0

    def keys(self) -> list[Key]:
        """Keys with counts inside the window: one round trip."""
        keys = [self._prefix + "keys", self._clock_key]
        found = self._run(scripts.KEYS, keys, [self._g.span_ns // NS_PER_US])
        return [k.decode("latin-1") for k in found]

    def top(self, n: int, value_index: int, ring_index: int, k: int) -> list[tuple[Key, Number]]:
        """The ``n`` busiest keys of a field, summed on the server: one round trip."""
        g = self._g
        flat = self._run(
            scripts.TOP, [self._prefix + "keys", self._clock_key],
            [g.bucket_ns // NS_PER_US, g.n_buckets, k, value_index + 1, max(n, 0), self._prefix + "k:",
             g.span_ns // NS_PER_US, int(g.dtype == "int64")],
        )  # fmt: skip
        return [(flat[i].decode("latin-1"), self._number(flat[i + 1])) for i in range(0, len(flat), 2)]

    def last_write_ns(self) -> int | None:
        raise not_supported("last_write_ns(): its times are the server's, not this host's monotonic clock")

    def log_entries(self, ring_index: int, key: Key) -> tuple[list[tuple[int, int]], int]:
        raise not_supported("log_entries(): redis windows keep buckets, never hit times (exact=)")

    # -- keys, stripes, lifecycle -----------------------------------------------------

    def clear(self, key: Key) -> None:
        """Forget every count of ``key``: one round trip."""
        self._run(scripts.CLEAR, [self._row(key), self._prefix + "keys"], [key_text(key)])

    def reset(self) -> None:
        """Empty the window for every host (SCAN and DEL: an administrative call)."""
        self._check_open()
        self._drop("k:*")
        self._drop("keys")
        self._drop("clock")  # the time its counts were dated by goes with them

    def reclaim(self) -> int:
        """No stripes on redis (every write is one atomic script): nothing to free."""
        self._check_open()
        return 0

    def stripe_owners(self) -> list[tuple[int, int, bool]]:
        self._check_open()
        return []

    def _key(self, key: Key | None) -> Key | None:
        if key is not None and not self._g.keyed:
            raise ValueError(f"window {self.name!r} is not keyed (create it with keyed=True)")
        return key

    def _field(self, field: str | None) -> int:
        if field is None:
            return 1
        if field not in self._g.fields:
            raise UnknownFieldError(f"unknown field {field!r}; this window has {self._g.fields}")
        return self._g.fields.index(field) + 1

    def _number(self, text: Any) -> Number:
        """A sum as the scripts return it: 'hi:lo' (hi * 10**9 + lo, exact) or a float's text."""
        hi, sep, lo = (text.decode() if isinstance(text, bytes) else str(text)).partition(":")
        if sep:
            return int(hi) * 10**9 + int(lo)
        return int(float(hi)) if self._g.dtype == "int64" else float(hi)

    def _array(self, values: list[Number]) -> Any:
        if self._g.dtype == "float64":
            return np.array(values, dtype=np.float64)
        fits = all(INT64_MIN <= v <= INT64_MAX for v in values)
        return np.array(values, dtype=np.int64 if fits else object)  # object: exact, for the front

    def __repr__(self) -> str:
        return f"<shmwin.Window {self.name!r} on {self.url} {self._g}>"


def _amount(n: Number, dtype: str) -> str | int:
    """``n`` as add.lua takes it; the errors shared memory raises for the same input."""
    if dtype == "int64":
        if isinstance(n, bool) or not isinstance(n, int | np.integer):
            raise TypeError(f"add() takes an int for an int64 window, not {n!r}")
        if not INT64_MIN <= int(n) <= INT64_MAX:
            raise OverflowError(f"add({n!r}) is past int64")
        return int(n)
    if isinstance(n, bool) or not isinstance(n, int | float | np.integer | np.floating):
        raise TypeError(f"add() takes a number, not {n!r}")
    if not math.isfinite(float(n)):
        raise ValueError(f"add() takes a finite number on a float64 window, not {n!r}")
    return repr(float(n))


def _redis_geometry(want: Geometry) -> Geometry:
    """``want`` as redis keeps it (one ring, whole microseconds, every write atomic: "locked")."""
    if want.kind != "window":
        raise not_supported(f"view of a {want.kind}'s rows as a window")
    if len(want.rings) != 1:
        raise not_supported("second resolution: it keeps one resolution per window (span and buckets)")
    if want.bucket_ns % NS_PER_US:
        raise ValueError("the redis backend keeps whole-microsecond buckets")
    return Geometry(want.rings, want.fields, want.dtype, "locked", 0, want.capacity, role=want.role)


def _window_spec(g: Geometry) -> str:
    """``window;<bucket ns>;<n>;<fields>;<dtype>;<capacity>``, then ``;<role>`` if it has one."""
    spec = f"window;{g.bucket_ns};{g.n_buckets};{','.join(g.fields)};{g.dtype};{g.capacity}"
    return f"{spec};{g.role}" if g.role else spec


def _parse_window_spec(spec: str) -> Geometry:
    kind, *rest = spec.split(";")
    if kind != "window":
        raise live.other_kind(kind, "window")
    bucket_ns, n, fields, dtype, capacity, *role = rest
    return Geometry(
        (Ring(int(bucket_ns), int(n)),), tuple(fields.split(",")), dtype, "locked", 0, int(capacity),
        role=role[0] if role else "",
    )  # fmt: skip
