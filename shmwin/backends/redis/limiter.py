"""RedisLimiter: ``Limiter`` on Redis -- strict multi-rate check-and-count, one atomic script.

A key's rings are one string, ``shmwin:{NAME}:k:KEY``, of i64 words (see
``lua/hit.lua``): per rate ``[head epoch][running total]`` then ``n x [epoch][hits]``.
The running-total step lives in the two scripts that write this format: a plain
one-rate hit runs the lean ``lua/hit_one.lua`` (one GET, one SET); everything else runs
``lua/hit.lua`` (BITFIELD, O(1) per word), which also answers when each rate's oldest
hit leaves and when a cost would fit, as the native core's ``check`` does. The key
expires by itself a span (plus two buckets) after the bucket of its last hit opened.
"""

from __future__ import annotations

import zlib
from typing import Any

from ...errors import GeometryMismatchError, NotSupportedError
from ...geometry import Geometry, limiter_geometry, rates_of
from ...policy import cost_of
from ...rate import Rate
from ..contract import Check, Key, Request, WindowBackend
from . import scripts
from .client import NS_PER_US, RedisBase, key_text, not_supported, spread_groups, unavailable

DEFAULT_CAPACITY = 10_000  # what an attach reports: redis keys have no table to fill


class RedisLimiter(RedisBase):
    """``Limiter`` on Redis: strict multi-rate check-and-count in one atomic script."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        if any(r.bucket_ns % NS_PER_US for r in g.rings):
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        self._g = g
        self._rings = g.rings
        words, self._args = 0, []
        for r in g.rings:  # each rate's words: head, total, then n x (epoch, hits)
            self._args += [str(r.bucket_ns // NS_PER_US), str(r.n_buckets), str(r.limit), str(words)]
            words += 2 + 2 * r.n_buckets
        self._ttl_ms = max(r.span_ns + r.bucket_ns for r in g.rings) // 1_000_000 + 1
        ring = g.rings[0]
        self._hit1 = scripts.hit_one(self._ttl_ms, ring.bucket_ns // NS_PER_US, ring.n_buckets, ring.limit)
        self._hit1_runner: Any = None  # EVALSHA of the lean script, once the name is claimed
        self._lean = len(g.rings) == 1 and req.clock is None
        self._groups = spread_groups(req.url)  # ?spread=N on a cluster: N hash tags, else the name's one
        spec = _limiter_spec(g, self._groups)
        super().__init__(req, spec if claim else None)
        if not claim:
            self._on_claimed()

    @classmethod
    def open(cls, req: Request) -> RedisLimiter:
        """The registry's entry: create-or-attach ``req.geometry``, or attach (``None``)."""
        if req.geometry is None:
            rates, buckets = _parse_limiter_spec(RedisBase.read_spec(req), spread_groups(req.url))
            return cls(req, limiter_geometry(rates, buckets, DEFAULT_CAPACITY), claim=False)
        if any(r.log for r in req.geometry.rings):
            raise NotSupportedError("the redis backend keeps buckets: exact=True is shared memory's only")
        return cls(req, req.geometry, claim=True)

    def _on_claimed(self) -> None:
        if self._lean and not self._replicas:  # a sentinel's WAIT goes through _run: no bare EVALSHA
            self._hit1_runner = self._redis.evalsha

    def _keys_of(self, key: Key) -> tuple[str, str]:
        """A key's row and the clock key its scripts keep time with. Spread (``?spread=N``): the
        row and the clock of group crc32(key) % N, under hash tag ``{NAME#group}``, so a name's
        keys fall on N slots -- on every master -- and each group's time never goes back."""
        text = key_text(_limiter_key(key))
        if not self._groups:
            return self._prefix + "k:" + text, self._clock_key
        tag = self._group_prefix(zlib.crc32(text.encode("utf-8", "surrogatepass")) % self._groups)
        return tag + "k:" + text, tag + "clock"

    def _group_prefix(self, group: int) -> str:
        return f"shmwin:{{{self.name}#{group}}}:"

    def unlink(self) -> bool:
        """Remove the name: its claim and, spread, every group's rows and clock."""
        there = False
        for group in range(self._groups):
            there = self._drop_at(self._group_prefix(group)) > 0 or there
        return super().unlink() or there

    def _drop_at(self, prefix: str) -> int:
        try:
            return self._scan_and_delete("*", prefix)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def rates(self) -> list[Rate]:
        return rates_of(self._g)

    @property
    def window(self) -> WindowBackend:
        raise not_supported("window view of a limiter: its rings are BITFIELD strings, not window rows")

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them: one round trip."""
        evalsha = self._hit1_runner
        if evalsha is not None and type(key) is str and type(cost) is int and cost > 0:
            # the common case: EVALSHA of the lean script, nothing in between (spread: the key's
            # group's row and clock)
            row, clock = self._keys_of(key) if self._groups else (self._prefix + "k:" + key, self._clock_key)
            try:
                return bool(evalsha(self._hit1.sha, 2, row, clock, "", cost))
            except self._no_script:  # a restarted server (a cluster's new master) forgot it: EVAL caches it
                return bool(self._run(self._hit1, [row, clock], [cost]))
            except self._errors as exc:
                raise unavailable(self.url, exc) from exc
        return self.check(key, cost_of(cost, 1), True, False)[0]

    def check(self, key: Key, cost: int, commit: bool, detail: bool = True) -> Check:
        """One round trip: the native core's answer (see ``lua/hit.lua``'s Returns)."""
        cost = cost_of(cost, 1 if commit else 0)
        row, clock = self._keys_of(key)
        n_rates = len(self._g.rings)
        if commit and not detail and n_rates == 1:  # a plain hit: the lean script
            return bool(self._run(self._hit1, [row, clock], [cost])), (), (), 0
        args = [cost, int(commit), int(detail), self._ttl_ms, *self._args]
        out = self._run(scripts.HIT, [row, clock], args)
        used = tuple(int(v) for v in out[2 : 2 + n_rates])
        reset_ns = tuple(int(v) * NS_PER_US for v in out[2 + n_rates : 2 + 2 * n_rates])
        wait = int(out[2 + 2 * n_rates])
        return bool(out[0]), used, reset_ns, None if wait < 0 else wait * NS_PER_US

    def refund(self, key: Key, cost: int) -> int:
        raise NotSupportedError("refund() needs shared memory: the redis backend keeps no per-hit order")

    def charge(self, key: Key, cost: int) -> None:
        raise NotSupportedError("charge() needs shared memory: on redis, hit() is the only way to count")

    def count_anyway(self, key: Key, cost: int) -> None:
        """Count ``cost`` hits whatever the rates say: what a host admitted on its local share
        while the server was away (on_error="local"), carried back. Not the public charge():
        only the fallback may push a key past its limit on Redis."""
        args = [cost_of(cost, 1), 2, 0, self._ttl_ms, *self._args]
        self._run(scripts.HIT, list(self._keys_of(key)), args)

    def clear(self, key: Key) -> None:
        """Forget every hit of ``key``."""
        self._call(self._redis.delete, self._keys_of(key)[0])

    def close(self) -> None:
        self._hit1_runner = None
        super().close()

    def __repr__(self) -> str:
        return f"<shmwin.Limiter {self.name!r} {';'.join(map(str, self.rates))} on {self.url}>"


def _limiter_key(key: Key) -> Key:
    if not isinstance(key, str | bytes):
        raise TypeError(f"a limiter's key is a str or bytes, not {type(key).__name__}")
    return key


def _limiter_spec(g: Geometry, groups: int = 0) -> str:
    """The claim: ``limiter;<rings>``, or ``limiter/spread=N;<rings>`` for spread keys (every
    host must spread alike: another spelling is a GeometryMismatchError)."""
    kind = f"limiter/spread={groups}" if groups else "limiter"
    return kind + ";" + ";".join(f"{r.bucket_ns},{r.n_buckets},{r.limit}" for r in g.rings)


def _parse_limiter_spec(spec: str, groups: int = 0) -> tuple[list[Rate], int]:
    kind, *rings = spec.split(";")
    if kind.startswith("limiter/") and kind != f"limiter/spread={groups}":
        raise GeometryMismatchError(
            f"this name's keys are spread as [{kind}] on redis: open it with that ?spread=N"
        )
    kind = kind.partition("/")[0]
    if kind != "limiter":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a limiter")
    parsed = [tuple(int(v) for v in ring.split(",")) for ring in rings]
    buckets = parsed[0][1] - 1
    return [Rate(limit, bucket_ns * buckets) for bucket_ns, _, limit in parsed], buckets
