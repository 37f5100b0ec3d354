"""Limiter: a strict, per-key rate limit over one or more rates, shared by every process.

One segment of kind "limiter" holds, per key, one ring per rate. A rate of
``limit`` per period P gets ``buckets`` buckets of P / buckets, plus one: the
ring counts the current bucket and ``buckets`` whole ones before it, so a hit
is forgotten between P and P + P/buckets after it happened. Hence the guarantee:

    **never more than ``limit`` hits in any period P**, across all processes;
    a request may be refused up to P/buckets before a perfect sliding log
    would have let it through.

Each ring's header slot keeps ``(head epoch, running total)``; a hit advances
the head, subtracting the buckets that left the window (amortised O(1)), then
compares every rate and counts in all of them or in none -- all under the key's
row lock. Memory per key is fixed by ``buckets``, not by the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from . import backends, layout
from .clock import Clock
from .duration import NS_PER_S
from .errors import GeometryMismatchError, KeyTableFullError
from .keys import Key
from .layout import Geometry, Ring
from .locks import trylock, unlock
from .rate import Rate, parse_many
from .ring import EMPTY_EPOCH
from .window import Window

ON_FULL = ("raise", "allow", "deny")
DEFAULT_BUCKETS = 20


@dataclass(frozen=True)
class LimitStats:
    """Where one key stands against one rate."""

    rate: Rate
    limit: int
    used: int
    remaining: int
    reset_after: float  # seconds until the oldest counted hit is forgotten (0 if none)


class Limiter:
    """``Limiter("login", "5/minute")``: create the limiter, or attach if it exists with
    the same rates. ``hit(key)`` is True and counted if every rate allows it, else
    False and nothing counted.

    ``capacity`` is how many live keys it holds (memory is reserved up front);
    ``on_full`` says what ``hit`` does for a new key when the table holds only
    live keys: "raise" :class:`KeyTableFullError`, "allow" (uncounted) or "deny".
    """

    def __new__(cls, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        if backends.is_shared_memory(backend):
            return super().__new__(cls)
        assert backend is not None
        return backends.factory(backend, "limiter")(*args, backend=backend, **kwargs)

    def __init__(
        self,
        name: str,
        rates: str | Rate | list[str | Rate] | tuple[str | Rate, ...],
        *,
        capacity: int = 10_000,
        buckets: int = DEFAULT_BUCKETS,
        on_full: str = "raise",
        clock: Clock | None = None,
        perm: int = 0o600,
        lock_timeout: float = 10.0,
        ready_timeout: float = 5.0,
        backend: str | None = None,
        on_error: str = "raise",
    ):
        if on_full not in ON_FULL:
            raise ValueError(f"on_full must be one of {ON_FULL}, not {on_full!r}")
        self.rates = parse_many(rates)
        self.on_full = on_full
        want = _geometry(self.rates, buckets, capacity)
        self.window = object.__new__(Window)
        self.window._open(name, want, clock, perm, lock_timeout, ready_timeout)
        self._bind(clock)

    @classmethod
    def attach(
        cls, name: str, *, on_full: str = "raise", clock: Clock | None = None, backend: str | None = None
    ) -> Limiter:
        """Attach to an existing limiter; its rates are read from the segment."""
        if not backends.is_shared_memory(backend):
            assert backend is not None
            return backends.factory(backend, "attach_limiter")(name, backend=backend, clock=clock)  # type: ignore[no-any-return]
        window = Window.attach(name, clock=clock)
        if window.geometry.kind != "limiter":
            window.close()
            raise GeometryMismatchError(f"{name!r} is a window, not a limiter")
        self = object.__new__(cls)
        self.window, self.on_full = window, on_full
        self.rates = [Rate(r.limit, r.bucket_ns * (r.n_buckets - 1)) for r in window.geometry.rings]
        self._bind(clock)
        return self

    def _bind(self, clock: Clock | None) -> None:
        w = self.window
        self.name = w.name
        self._clock = w._clock
        self._q = w._q
        self._keys = w._keys
        self._rows_word, self._row_words, self._sw = w._rows_word, w._row_words, w._lay.slot_words
        self._rings = [  # (header word offset in a row, slots, bucket ns, limit)
            (off, r.n_buckets, r.bucket_ns, r.limit)
            for off, r in zip(w._lay.ring_words, w.geometry.rings, strict=True)
        ]
        self._min_limit = min(r.limit for r in self.rates)
        assert self._keys is not None
        self._cache = self._keys.cache
        self._locks = w._locks
        self._key_locks = w._locks.handles[layout.FIRST_KEY_LOCK :]
        self._n_key_locks = len(self._key_locks)

        self._multi = len(self._rings) > 1
        self._sleep: Callable[[float], object] = getattr(clock, "sleep", time.sleep)
        self._async_sleep: Callable[[float], Awaitable[object]] = getattr(clock, "async_sleep", asyncio.sleep)

    # -- the checks -------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them; else count nothing."""
        cached = self._cache.get(key)
        if cached is None or type(cost) is not int or cost < 1 or self._multi:
            return self._check(key, cost, commit=True)[0]
        slot, generation = cached & 0xFFFFFFFF, cached >> 32  # fast path: a key seen before, one rate
        handle = self._key_locks[slot % self._n_key_locks]
        rc = trylock(handle)
        if rc:
            self._locks.acquire_contended(layout.FIRST_KEY_LOCK + slot % self._n_key_locks, rc)
        try:
            q = self._q
            row = self._rows_word + slot * self._row_words  # key header: generation, newest write
            if q[row] == generation:
                now_ns = self._clock()  # read under the lock: a row's epochs never go back
                off, n, bucket_ns, limit = self._rings[0]
                header, epoch = row + off, now_ns // bucket_ns
                if q[header] != epoch:
                    _advance(q, header, self._sw, n, epoch)
                total = q[header + 1]
                if total + cost > limit:
                    return False
                bucket = header + self._sw * (1 + epoch % n)
                if q[bucket] != epoch:
                    q[bucket + 1] = 0
                    q[bucket] = epoch
                q[bucket + 1] += cost
                q[header + 1] = total + cost
                q[row + 1] = now_ns  # the key's newest write, for reclaiming idle keys
                return True
        finally:
            unlock(handle)
        return self._check(key, cost, commit=True)[0]  # the entry moved: the slow path re-finds it

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing."""
        return self._check(key, cost, commit=False)[0]

    def stats(self, key: Key) -> LimitStats:
        """Where ``key`` stands against its tightest rate (least remaining)."""
        return min(self.stats_all(key), key=lambda s: (s.remaining, -s.reset_after))

    def stats_all(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate, shortest period first."""
        _, used, reset_ns, _ = self._check(key, 0, commit=False, detail=True)
        return [
            LimitStats(rate, rate.limit, u, max(rate.limit - u, 0), r / NS_PER_S)
            for rate, u, r in zip(self.rates, used, reset_ns, strict=True)
        ]

    def clear(self, key: Key) -> None:
        """Forget every hit of ``key``."""
        self.window.clear(key)

    def acquire(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """Wait (sleeping, not spinning) until ``cost`` hits are allowed and count them.

        False after ``timeout`` seconds, or at once if ``cost`` exceeds a limit.
        """
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        while True:
            allowed, _, _, wait_ns = self._check(key, cost, commit=True, detail=True)
            if allowed:
                return True
            pause = self._pause_s(wait_ns, deadline_ns)
            if pause is None:
                return False
            self._sleep(pause)

    async def acquire_async(self, key: Key, timeout: float | None = None, cost: int = 1) -> bool:
        """:meth:`acquire` for asyncio: waits with ``asyncio.sleep``, never blocking the loop."""
        deadline_ns = None if timeout is None else self._clock() + round(timeout * NS_PER_S)
        while True:
            allowed, _, _, wait_ns = self._check(key, cost, commit=True, detail=True)
            if allowed:
                return True
            pause = self._pause_s(wait_ns, deadline_ns)
            if pause is None:
                return False
            await self._async_sleep(pause)

    def _pause_s(self, wait_ns: int | None, deadline_ns: int | None) -> float | None:
        """Seconds to sleep before trying again, or None to give up."""
        if wait_ns is None:
            return None
        if deadline_ns is not None:
            left_ns = deadline_ns - self._clock()
            if left_ns <= 0:
                return None
            wait_ns = min(wait_ns, left_ns)
        return max(wait_ns, 1_000_000) / NS_PER_S

    def _check(
        self, key: Key, cost: int, commit: bool, detail: bool = False
    ) -> tuple[bool, list[int], list[int], int | None]:
        """Under the key's lock: advance each ring, compare, and count in all or none.

        Returns (allowed, used per rate, ns until each rate's oldest hit is
        forgotten, ns until ``cost`` would fit -- None if it never can).
        """
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0 or (commit and cost == 0):
            raise ValueError(f"cost must be a positive int, not {cost!r}")
        keys = self._keys
        assert keys is not None
        try:
            slot = keys.lock_key(key, self._clock(), create=commit)
        except KeyTableFullError:
            if self.on_full == "raise":
                raise
            return self.on_full == "allow", [0] * len(self._rings), [0] * len(self._rings), None
        if slot < 0:  # never seen: nothing counted yet
            n = len(self._rings)
            return cost <= self._min_limit, [0] * n, [0] * n, None if cost > self._min_limit else 0
        try:
            return self._check_row(slot, cost, commit, detail)
        finally:
            keys.unlock_row(slot)

    def _check_row(
        self, slot: int, cost: int, commit: bool, detail: bool
    ) -> tuple[bool, list[int], list[int], int | None]:
        """The limiter's critical section; caller holds the row lock of ``slot``."""
        q, sw = self._q, self._sw
        now_ns = self._clock()  # read under the lock: a row's epochs never go back
        row = self._rows_word + slot * self._row_words
        allowed, used = True, []
        for off, n, bucket_ns, limit in self._rings:
            header, epoch = row + off, now_ns // bucket_ns
            if q[header] != epoch:
                _advance(q, header, sw, n, epoch)
            total = q[header + 1]
            used.append(total)
            if total + cost > limit:
                allowed = False
        if allowed and commit:
            for off, n, bucket_ns, _ in self._rings:
                header, epoch = row + off, now_ns // bucket_ns
                bucket = header + sw * (1 + epoch % n)
                if q[bucket] != epoch:
                    q[bucket + 1] = 0
                    q[bucket] = epoch
                q[bucket + 1] += cost
                q[header + 1] += cost
            assert self._keys is not None
            self._keys.touch(slot, now_ns)
            used = [u + cost for u in used]
        if not detail:
            return allowed, used, [], None
        return allowed, used, *self._timing(row, now_ns, cost, allowed, used)

    def _timing(
        self, row: int, now_ns: int, cost: int, allowed: bool, used: list[int]
    ) -> tuple[list[int], int | None]:
        """ns until each rate's oldest hit is forgotten, and until ``cost`` would fit."""
        q, sw = self._q, self._sw
        reset_ns, wait_ns = [], 0
        for (off, n, bucket_ns, limit), total in zip(self._rings, used, strict=True):
            header, epoch = row + off, now_ns // bucket_ns
            oldest_first = [e for e in range(epoch - n + 1, epoch + 1) if q[header + sw * (1 + e % n)] == e]
            leaves = [(e + n) * bucket_ns - now_ns for e in oldest_first if q[header + sw * (1 + e % n) + 1]]
            reset_ns.append(leaves[0] if leaves else 0)
            if allowed or total + cost <= limit:
                continue  # this rate is not what holds the hit back
            if cost > limit:
                return reset_ns, None
            freed, need = 0, total + cost - limit
            for e in oldest_first:
                freed += q[header + sw * (1 + e % n) + 1]
                if freed >= need:
                    wait_ns = max(wait_ns, (e + n) * bucket_ns - now_ns)
                    break
        return reset_ns, wait_ns

    # -- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        self.window.close()

    def unlink(self) -> bool:
        return self.window.unlink()

    def __enter__(self) -> Limiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        rates = ";".join(str(r) for r in self.rates)
        return f"<shmwin.Limiter {self.name!r} {rates} capacity={self.window.capacity}>"


def _advance(q: memoryview, header: int, sw: int, n: int, epoch: int) -> None:
    """Move a ring's head to ``epoch``, dropping the buckets that left the window from its
    running total. Caller holds the row lock."""
    head = q[header]
    if head == EMPTY_EPOCH or epoch - head >= n:
        q[header + 1] = 0
    elif epoch > head:
        total = q[header + 1]
        for leaving in range(head - n + 1, epoch - n + 1):
            bucket = header + sw * (1 + leaving % n)
            if q[bucket] == leaving:
                total -= q[bucket + 1]
        q[header + 1] = total
    else:
        return  # a clock behind the head (only after corruption): keep the total
    q[header] = epoch


def _geometry(rates: list[Rate], buckets: int, capacity: int) -> Geometry:
    if (
        isinstance(buckets, bool)
        or not isinstance(buckets, int)
        or not 1 <= buckets <= layout.MAX_BUCKETS - 1
    ):
        raise ValueError(f"buckets must be 1..{layout.MAX_BUCKETS - 1}, not {buckets!r}")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ValueError(f"capacity must be a positive int, not {capacity!r}")
    rings = []
    for rate in rates:
        if rate.period_ns % buckets:
            raise ValueError(f"buckets={buckets} does not divide {rate} into whole nanoseconds")
        rings.append(Ring(rate.period_ns // buckets, buckets + 1, rate.limit))
    return Geometry(tuple(rings), ("hits",), "int64", "locked", 0, capacity, "limiter")


__all__ = ["LimitStats", "Limiter"]
