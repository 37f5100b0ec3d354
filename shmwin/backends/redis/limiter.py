"""``Limiter`` on Redis: strict multi-rate check-and-count, one atomic script per call.

A key's rings are one string, ``shmwin:{NAME}:k:KEY``, of i64 words (see
``lua/hit.lua``): per rate ``[head epoch][running total]`` then ``n x [epoch][hits]``.
A plain one-rate hit runs the lean ``lua/hit_one.lua`` (one GET, one SET); everything
else runs ``lua/hit.lua`` (BITFIELD, O(1) per word). The key expires by itself a span
(plus two buckets) after the bucket of its last hit opened.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ...clock import Clock
from ...duration import NS_PER_S
from ...errors import BackendUnavailableError, GeometryMismatchError
from ...geometry import DEFAULT_BUCKETS, limiter_geometry
from ...keys import Key
from ...layout import Geometry, Ring
from ...native import ON_FULL
from ...rate import LimitStats, Rate, parse_many
from . import scripts
from .client import NS_PER_US, RedisBase, key_text, unavailable

ON_ERROR = ("raise", "allow", "deny")


class RedisLimiter(RedisBase):
    """``Limiter`` on Redis: strict multi-rate check-and-count in one atomic script."""

    def __init__(
        self,
        name: str,
        rates: str | Rate | list[str | Rate] | tuple[str | Rate, ...],
        *,
        backend: str,
        capacity: int = 10_000,
        buckets: int = DEFAULT_BUCKETS,
        on_full: str = "raise",
        on_error: str = "raise",
        clock: Clock | None = None,
        timeout: float = 1.0,
        **_shm_only: Any,
    ):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, not {on_error!r}")
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, not {on_full!r}")
        self.rates = parse_many(rates)
        g = limiter_geometry(self.rates, buckets, capacity)  # validates, as shared memory does
        if any(r.bucket_ns % NS_PER_US for r in g.rings):
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        super().__init__(name, backend, clock, timeout)
        self.on_error = on_error
        self._rings: list[Ring] = list(g.rings)
        self._open_geometry(_limiter_spec(g))
        words, self._args = 0, []
        for r in self._rings:  # each rate's words: head, total, then n x (epoch, hits)
            self._args += [str(r.bucket_ns // NS_PER_US), str(r.n_buckets), str(r.limit), str(words)]
            words += 2 + 2 * r.n_buckets
        self._ttl_ms = max(r.span_ns + r.bucket_ns for r in self._rings) // 1_000_000 + 1
        ring = self._rings[0]
        one_rate_real_clock = len(self._rings) == 1 and clock is None
        self._hit1_runner: Any = None
        self._hit1 = scripts.hit_one(self._ttl_ms, ring.bucket_ns // NS_PER_US, ring.n_buckets, ring.limit)
        if one_rate_real_clock:
            self._hit1_sha = self._hit1.sha
            self._hit1_runner = self._redis.evalsha
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Any] = getattr(clock, "async_sleep", None) or _asyncio_sleep

    @classmethod
    def attach(
        cls, name: str, *, backend: str, clock: Clock | None = None, on_error: str = "raise"
    ) -> RedisLimiter:
        probe = RedisBase(name, backend, clock, 1.0)
        try:
            spec = probe._read_geometry()
        finally:
            probe.close()
        rates, buckets = _parse_limiter_spec(spec)
        return cls(name, rates, backend=backend, buckets=buckets, clock=clock, on_error=on_error)

    def _check(
        self, key: Key, cost: int, commit: bool, detail: bool = False
    ) -> tuple[bool, int, list[int], list[list[int]]]:
        """One round trip: (allowed, now ns, used per rate, hits per bucket per rate if detail)."""
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0 or (commit and cost == 0):
            raise ValueError(f"cost must be a positive int, not {cost!r}")
        key_text(key)
        if commit and not detail and len(self._rings) == 1:  # a plain hit: the lean script
            return bool(self._run(self._hit1, [self._row(key)], [cost])), 0, [], []
        args = [cost, int(commit), int(detail), self._ttl_ms, *self._args]
        out = self._run(scripts.HIT, [self._row(key)], args)
        n_rates = len(self._rings)
        used = [int(v) for v in out[2 : 2 + n_rates]]
        per_rate, start = [], 2 + n_rates
        for r in self._rings if detail else ():
            per_rate.append([int(v) for v in out[start : start + r.n_buckets]])
            start += r.n_buckets
        return bool(out[0]), int(out[1]) * NS_PER_US, used, per_rate

    def _guarded(self, key: Key, cost: int, detail: bool = False) -> tuple[bool, int | None]:
        """hit, with the on_error policy; (allowed, ns until cost fits or None)."""
        try:
            allowed, now_ns, used, per_rate = self._check(key, cost, commit=True, detail=detail)
        except BackendUnavailableError:
            if self.on_error == "raise":
                raise
            return self.on_error == "allow", None
        if allowed or not detail:
            return allowed, None
        return allowed, self._wait_ns(now_ns, cost, used, per_rate)

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them: one round trip."""
        evalsha = self._hit1_runner
        if evalsha is not None and type(key) is str and type(cost) is int and cost > 0:
            try:  # the common case: EVALSHA of the lean script, nothing in between
                return bool(evalsha(self._hit1_sha, 1, self._prefix + "k:" + key, "", cost))
            except self._no_script:  # a restarted server forgot it: load it, once
                self._redis.script_load(self._hit1.text)
                return self.hit(key, cost)
            except self._errors as exc:
                if self.on_error == "raise":
                    raise unavailable(self.url, exc) from exc
                return self.on_error == "allow"
        return self._guarded(key, cost)[0]

    def close(self) -> None:
        self._hit1_runner = None
        super().close()

    def test(self, key: Key, cost: int = 1) -> bool:
        try:
            return self._check(key, cost, commit=False)[0]
        except BackendUnavailableError:
            if self.on_error == "raise":
                raise
            return self.on_error == "allow"

    def stats_all(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate: ``shmwin.LimitStats``, one per rate."""

        _, now_ns, used, per_rate = self._check(key, 0, commit=False, detail=True)
        out = []
        for rate, ring, u, buckets in zip(self.rates, self._rings, used, per_rate, strict=True):
            oldest_age = next((age for age, hits in enumerate(buckets) if hits), None)
            reset_ns = 0
            if oldest_age is not None:
                first_epoch = now_ns // ring.bucket_ns - ring.n_buckets + 1
                reset_ns = (first_epoch + oldest_age + ring.n_buckets) * ring.bucket_ns - now_ns
            out.append(LimitStats(rate, rate.limit, u, max(rate.limit - u, 0), max(reset_ns, 0) / NS_PER_S))
        return out

    def stats(self, key: Key) -> LimitStats:
        return min(self.stats_all(key), key=lambda s: (s.remaining, -s.reset_after))

    def clear(self, key: Key) -> None:
        try:
            self._redis.delete(self._row(key))
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    def _wait_ns(self, now_ns: int, cost: int, used: list[int], per_rate: list[list[int]]) -> int | None:
        wait = 0
        for ring, total, buckets in zip(self._rings, used, per_rate, strict=True):
            if total + cost <= ring.limit:
                continue
            if cost > ring.limit:
                return None
            need, freed = total + cost - ring.limit, 0
            first_epoch = now_ns // ring.bucket_ns - ring.n_buckets + 1
            for age, hits in enumerate(buckets):
                freed += hits
                if freed >= need:
                    wait = max(wait, (first_epoch + age + ring.n_buckets) * ring.bucket_ns - now_ns)
                    break
        return wait

    def acquire(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """Wait (sleeping, not spinning) until ``cost`` hits are allowed and count them."""
        deadline = None if timeout is None else self._local_ns() + round(timeout * NS_PER_S)
        while True:
            allowed, wait_ns = self._guarded(key, cost, detail=True)
            pause = _pause(allowed, wait_ns, deadline, self._local_ns())
            if pause is None:
                return allowed
            self._sleep(pause)

    async def acquire_async(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        deadline = None if timeout is None else self._local_ns() + round(timeout * NS_PER_S)
        while True:
            allowed, wait_ns = self._guarded(key, cost, detail=True)
            pause = _pause(allowed, wait_ns, deadline, self._local_ns())
            if pause is None:
                return allowed
            await self._async_sleep(pause)

    def __repr__(self) -> str:
        return f"<shmwin.Limiter {self.name!r} {';'.join(map(str, self.rates))} on {self.url}>"


async def _asyncio_sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def _pause(allowed: bool, wait_ns: int | None, deadline_ns: int | None, now_ns: int) -> float | None:
    """Seconds to sleep before trying again, or None to return ``allowed`` now."""
    if allowed or wait_ns is None:
        return None
    if deadline_ns is not None:
        if deadline_ns <= now_ns:
            return None
        wait_ns = min(wait_ns, deadline_ns - now_ns)
    return max(wait_ns, 1_000_000) / NS_PER_S


def _limiter_spec(g: Geometry) -> str:
    return "limiter;" + ";".join(f"{r.bucket_ns},{r.n_buckets},{r.limit}" for r in g.rings)


def _parse_limiter_spec(spec: str) -> tuple[list[str | Rate], int]:
    kind, *rings = spec.split(";")
    if kind != "limiter":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a limiter")
    parsed = [tuple(int(v) for v in ring.split(",")) for ring in rings]
    buckets = parsed[0][1] - 1
    rates: list[str | Rate] = [Rate(limit, bucket_ns * buckets) for bucket_ns, _, limit in parsed]
    return rates, buckets
