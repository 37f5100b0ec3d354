"""TokenBucket: golang.org/x/time/rate's token bucket per key, shared by every process -- or,
with ``backend="redis://..."``, by every host.

The bucket of a key holds at most ``burst`` tokens and starts full; it gets one token back
per 1/rate (``"10/second"``: one every 100 ms); ``hit(key, cost)`` takes ``cost`` tokens, or
nothing if the bucket holds fewer. Hence the guarantee, across all processes:

    **in any interval of length t, at most burst + rate x t tokens are taken**;
    a key idle for burst/rate has its whole burst again, and never more.

It is GCRA, kept as one word per key -- the theoretical arrival time, from which the bucket
is full -- and taking tokens is one native section under the key's lock (``token_take`` in
``core/counters.c``; on Redis ``lua/token.lua``). Times are whole nanoseconds: the emission
interval is period/limit, rounded up when the limit does not divide the period (a token
never comes back early), and on Redis rounded up to whole microseconds.

``TokenBucket`` has :class:`~shmwin.limiter.Limiter`'s methods and policy (``on_full``,
``on_error``, ``acquire``); ``stats(key).remaining`` is the whole tokens in the bucket now,
``reset_after`` the seconds until it is full.
"""

from __future__ import annotations

from typing import Any

from . import backends
from .backends.contract import Key
from .backends.shm.roles import TokensEngine
from .backends.shm.roles.tokens import tokens_at as tokens_at  # the GCRA arithmetic, a reader of its own
from .clock import Clock
from .duration import NS_PER_S
from .front import Decisions, Front, read_decisions
from .geometry import token_geometry
from .policy import DEFAULT_ON_FULL, ON_ERROR, ON_FULL, choice, opening_on_error
from .rate import LimitStats, Rate, parse_many
from .window import Window


class TokenBucket(Front):
    """``TokenBucket("api", "10/second", burst=20)``: create the bucket, or attach if it exists
    with the same rate and burst. ``hit(key)`` is True and takes a token if the key's bucket
    holds one, else False and takes nothing.

    ``cost`` may be 0..``burst`` (more could never be taken: a ValueError, as a ``burst``
    below 1 is). Its key table grows as keys come; a key whose bucket is full again holds no
    memory for long (idle keys are reclaimed). ``capacity``, ``on_full``, ``on_error``,
    ``clock`` and the backend options are :class:`~shmwin.limiter.Limiter`'s.
    """

    _WAIT_AT = 2  # check() answers (allowed, tokens, wait_ns, full_ns)
    _backend: Any

    def __init__(
        self,
        name: str,
        rate: str | Rate,
        *,
        burst: int,
        capacity: int | None = None,
        on_full: str = DEFAULT_ON_FULL,
        clock: Clock | None = None,
        perm: int | None = None,
        lock_timeout: float | None = None,
        ready_timeout: float | None = None,
        backend: str | None = None,
        on_error: str = "raise",
        timeout: float | None = None,
        shadow: bool = False,
        decisions: bool = True,
    ):
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, ON_ERROR)
        rates = parse_many(rate)
        if len(rates) != 1:
            raise ValueError(f"a token bucket has one rate, not {len(rates)}: {rate!r}")
        self._rate_given: Rate | None = rates[0]
        want = token_geometry(rates[0], burst, capacity)
        opened = backends.open("token-bucket",
            name, want, backend=backend, clock=clock, on_full=on_full, perm=perm, timeout=timeout,
            on_error=opening_on_error(on_error, shadow), lock_timeout=lock_timeout,
            ready_timeout=ready_timeout,
        )  # fmt: skip
        self._bind(opened, clock, on_full, on_error)
        self._bind_decisions(shadow, create=decisions, longest_ns=self.rate.period_ns, perm=perm)

    @classmethod
    def attach(
        cls,
        name: str,
        *,
        on_full: str = DEFAULT_ON_FULL,
        clock: Clock | None = None,
        backend: str | None = None,
        on_error: str = "raise",
        lock_timeout: float | None = None,
        ready_timeout: float | None = None,
        timeout: float | None = None,
        perm: int | None = None,
        shadow: bool = False,
    ) -> TokenBucket:
        """Attach to an existing token bucket; its rate and burst are read from the store."""
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, ON_ERROR)
        opened = backends.open("token-bucket",
            name, None, backend=backend, clock=clock, on_full=on_full, on_error=on_error,
            lock_timeout=lock_timeout, ready_timeout=ready_timeout, timeout=timeout, perm=perm,
        )  # fmt: skip
        self = cls.__new__(cls)
        self._rate_given = None
        self._bind(opened, clock, on_full, on_error)
        self._bind_decisions(shadow, create=False, longest_ns=self.rate.period_ns)
        return self

    def _bind(self, opened: Any, clock: Clock | None, on_full: str, on_error: str) -> None:
        self._bind_front(opened, clock, on_full, on_error)
        self.rate: Rate = self._rate_given or opened.rate
        self.burst: int = opened.burst

    @property
    def rates(self) -> list[Rate]:
        """``[rate]``, as a Limiter's (the tools and middlewares read it)."""
        return [self.rate]

    # -- the checks -------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Take ``cost`` tokens from ``key``'s bucket if it holds them; else take nothing.

        One atomic step on the backend. The instance's ``hit`` is the backend's own method
        (on shared memory, the core's)."""
        return bool(self._backend.hit(key, cost))

    def decisions(self) -> Decisions:
        """``Decisions(admitted, rejected, near_limit)`` over the rate's period, counted by every
        process's ``hit``; near the limit: at most a fifth of ``burst`` left after the take (see
        :meth:`Limiter.decisions <shmwin.limiter.Limiter.decisions>`)."""
        return read_decisions(self._decisions, self.name)

    def _verdict(self, key: Key, cost: int) -> bool:
        return bool(self._backend.check(key, cost, False)[0])

    def stats(self, key: Key) -> LimitStats:
        """``key``'s bucket now: ``remaining`` whole tokens, ``used`` = burst - remaining,
        ``reset_after`` seconds until it is full."""
        _, tokens, _, full_ns = self._backend.check(key, 0, False)
        return LimitStats(self.rate, self.burst, self.burst - tokens, tokens, full_ns / NS_PER_S)

    def stats_all(self, key: Key) -> list[LimitStats]:
        """``[stats(key)]``, as a Limiter's (one rate)."""
        return [self.stats(key)]


def values(w: Window, now_ns: int) -> list[tuple[Key, int]]:
    """``(key, whole tokens left)`` of each key of a token bucket's segment whose bucket is not
    full, lock-free (for the tools): the role's reader, :meth:`TokensEngine.values`."""
    return TokensEngine(w).values(now_ns)


__all__ = ["TokenBucket"]
