"""The two rate limiters, each a front over :class:`~shmwin.front.Front`: ``Limiter`` (rates
kept in rings of buckets, or exact logs) and ``TokenBucket`` (GCRA).

Limiter: a strict, per-key rate limit over one or more rates, shared by every process --
or, with ``backend="redis://..."``, by every host.

A rate of ``limit`` per period P keeps ``buckets`` buckets of P / buckets, plus the
current one, so a hit is forgotten between P and P + P/buckets after it happened. Hence
the guarantee:

    **never more than ``limit`` hits in any period P**, across all processes;
    a request may be refused up to P/buckets before a perfect sliding log
    would have let it through.

With ``exact=True`` a rate keeps each key's hit times instead (a sliding log of at most
1024 times, or ``exact=N``): a hit is forgotten exactly P after it, like limits' moving
window. A rate of at most that many hits per period is always exact; above it, when a key
has more distinct hit times in the period than the log holds, its two oldest are merged
into the later time (forgotten later, never sooner: still strict). Memory per key and
rate: 16 bytes per time kept; a hit costs a scan of them.

``Limiter`` is the policy, written once for every backend: the choices (``on_full``,
``on_error``), the costs, ``stats`` and the one ``acquire`` loop (sync and async share
it). The backend (``backends/shm``, ``backends/redis``) does the check-and-count itself,
atomically; ``hit`` is the backend's own method (the native core's on shared memory).

TokenBucket: golang.org/x/time/rate's token bucket per key, shared by every process -- or,
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

import dataclasses
from typing import TYPE_CHECKING, Any

from . import backends
from .backends.contract import Key
from .backends.options import OpeningAnywhere, spelled_out
from .backends.shm.live import DEFAULT_ON_CHANGE, ON_CHANGE
from .backends.shm.roles import TokensEngine
from .backends.shm.roles.tokens import tokens_at as tokens_at  # the GCRA arithmetic, a reader of its own
from .clock import Clock
from .errors import NotSupportedError
from .front import Decisions, Front, read_decisions
from .geometry import DEFAULT_BUCKETS, DEFAULT_LOG_ENTRIES, Geometry, limiter_geometry, token_geometry
from .local_share import LocalShare, check_local
from .policy import (
    DEFAULT_ON_FULL,
    LIMITER_ON_ERROR,
    ON_ERROR,
    ON_FULL,
    choice,
    limit_stats,
    opening_on_error,
    tightest,
)
from .rate import NS_PER_S, LimitStats, Rate, parse_many
from .window import Window

if TYPE_CHECKING:
    from typing_extensions import Unpack

Rates = str | Rate | list[str | Rate] | tuple[str | Rate, ...]

# -- live limits: which backends take on_change, new rates in a limiter's layout ---------------
# (what a change does on shared memory: backends/shm/live.py; the operator's view:
# docs/operating.md, "Changing limits live")

LIVE_SCHEMES = ("shm",)  # the backends whose limiters and token buckets change live
# on redis too (backends/redis/live.py): limiters and token buckets on redis:// and shm+redis://
# (a two-tier limiter's Redis tier: backends/twotier.py; a token bucket there is redis's)
LIVE_REDIS_LIMITERS = frozenset(backends.REDIS_SCHEMES) | {"shm+" + s for s in backends.REDIS_SCHEMES}
LIVE_REDIS_BUCKETS = LIVE_REDIS_LIMITERS


def live_option(backend: str | None, on_change: str, redis: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The ``on_change`` option for ``backends.open``: shared memory's, and on the ``redis``
    schemes given; elsewhere a change of rates raises as before, so only "reset" (which would
    need the backend) is refused."""
    scheme = backends.scheme_of(backend)
    if scheme in LIVE_SCHEMES or scheme in redis:
        return {"on_change": on_change}
    if on_change == "reset":
        scheme = backends.scheme_of(backend)
        raise NotSupportedError(f"{scheme}: on_change='reset' needs shared memory (rates change live there)")
    return {}


def same_layout(g: Geometry, rates: list[Rate]) -> Geometry:
    """A limiter geometry of ``rates`` kept as ``g`` keeps its rates: the same buckets per
    period, or exact logs of as many times, the same capacity and role."""
    first = g.rings[0]
    if first.log:
        short = [r.n_buckets for r in g.rings if r.n_buckets < r.limit]  # exact=N below a limit
        exact: bool | int = short[0] if short else max(DEFAULT_LOG_ENTRIES, *(r.n_buckets for r in g.rings))
        new = limiter_geometry(rates, 1, g.capacity, exact)
    else:
        new = limiter_geometry(rates, first.n_buckets - 1, g.capacity)
    return dataclasses.replace(new, role=g.role)



class Limiter(Front):
    """``Limiter("login", "5/minute")``: create the limiter, or attach if it exists with
    the same rates. ``hit(key)`` is True and counted if every rate allows it, else
    False and nothing counted.

    Its key table grows as keys come, and memory follows the keys in use (idle keys are
    reclaimed). ``capacity=N`` caps it at N keys. When no row is left for a new key --
    ``capacity`` live keys, or a full ``/dev/shm`` after every idle key was reclaimed --
    ``on_full`` says what ``hit`` does: "allow" (the default: admitted uncounted), "deny", or
    "raise" (:class:`KeyTableFullError` / :class:`OutOfSpaceError`). Known keys go on
    counting exactly; :meth:`full_count` counts the requests that met a full table.
    ``on_error`` says what ``hit``, ``test`` and ``acquire`` answer when a remote backend is
    away -- also while the limiter is built, which then claims its name at the first call
    that gets through: "raise" :class:`BackendUnavailableError`,
    "allow" or "deny". ``stats`` and ``clear`` always raise then. Backend options as for
    :class:`~shmwin.window.Window`.
    """

    _WAIT_AT = 3  # check() answers (allowed, used, reset_ns, wait_ns)
    _backend: backends.LimiterBackend

    @spelled_out(OpeningAnywhere)
    def __init__(
        self,
        name: str,
        rates: Rates,
        *,
        capacity: int | None = None,
        buckets: int = DEFAULT_BUCKETS,
        exact: bool | int = False,
        on_full: str = DEFAULT_ON_FULL,
        on_error: str = "raise",
        shadow: bool = False,
        decisions: bool = True,
        fallback: Rates | None = None,
        on_change: str = DEFAULT_ON_CHANGE,
        **options: Unpack[OpeningAnywhere],
    ):
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, LIMITER_ON_ERROR)
        choice("on_change", on_change, ON_CHANGE)
        check_local(on_error, fallback, options.get("backend"))
        want = limiter_geometry(parse_many(rates), buckets, capacity, exact)
        live = live_option(options.get("backend"), on_change, LIVE_REDIS_LIMITERS)
        opened = backends.open("limiter", name, want, on_full=on_full,
                               on_error=opening_on_error(on_error, shadow), **options, **live)  # fmt: skip
        self._bind(opened, options.get("clock"), on_full, on_error, fallback)
        self._keep_decisions(shadow, create=decisions, perm=options.get("perm"))

    @classmethod
    @spelled_out(OpeningAnywhere)
    def attach(
        cls,
        name: str,
        *,
        on_full: str = DEFAULT_ON_FULL,
        on_error: str = "raise",
        shadow: bool = False,
        fallback: Rates | None = None,
        **options: Unpack[OpeningAnywhere],
    ) -> Limiter:
        """Attach to an existing limiter; its rates are read from the store (which must answer).
        Its hits are counted in its decisions window if it has one (none is made)."""
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, LIMITER_ON_ERROR)
        check_local(on_error, fallback, options.get("backend"))
        opened = backends.open("limiter", name, None, on_full=on_full, on_error=on_error, **options)
        self = cls.__new__(cls)
        self._bind(opened, options.get("clock"), on_full, on_error, fallback)
        self._keep_decisions(shadow, create=False)
        return self

    @classmethod
    def _open_geometry(
        cls, name: str, want: Geometry, *, clock: Clock | None = None, perm: int | None = None
    ) -> Limiter:
        """Create or attach a shared-memory limiter of exactly ``want`` (a limiter geometry
        with a ``role`` for the tools): what shmwin's own parts make."""
        self = cls.__new__(cls)
        self._bind(backends.open("limiter", name, want, clock=clock, perm=perm), clock, "raise", "raise")
        return self

    def _bind(
        self, opened: backends.LimiterBackend, clock: Clock | None, on_full: str, on_error: str,
        fallback: Rates | None = None,
    ) -> None:
        self._bind_front(opened, clock, on_full, on_error)
        if on_error == "local":
            self._local = LocalShare(opened, fallback, clock, on_full, Limiter)
            self._local.bind(self)  # sets self.hit: the asking path, or while away the local one

    @property
    def rates(self) -> list[Rate]:
        """The rates in force, shortest period first as given: on shared memory the segment's
        newest (another process, or ``shmwin set``, may have changed them live)."""
        return list(self._backend.rates)

    def set_rates(self, rates: Rates, *, on_change: str = DEFAULT_ON_CHANGE) -> None:
        """Change this limiter's rates for every process (shared memory, redis://): its buckets
        per period and ``exact`` kept; ``on_change`` "carry" (the counts carried over, see
        docs/operating.md) or "reset". Each process follows at its next call."""
        choice("on_change", on_change, ("carry", "reset"))
        set_rates = getattr(self._backend, "_set_rates", None)
        if set_rates is None:
            scheme = self.url.split(":")[0]
            raise NotSupportedError(f"{scheme}: rates change live on shared memory and redis:// only")
        set_rates(same_layout(self._backend.geometry, parse_many(rates)), on_change)

    def _keep_decisions(self, shadow: bool, *, create: bool, perm: int | None = None) -> None:
        """Count decisions in ``NAME.decisions`` (made if ``create``, else attached if there),
        and answer True to every hit if ``shadow`` (see :meth:`shmwin.front.Front._bind_decisions`)."""
        longest_ns = max(r.period_ns for r in self.rates)
        self._bind_decisions(shadow, create=create, longest_ns=longest_ns, perm=perm)

    # -- the checks -------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them; else count nothing.

        One atomic step on the backend: the rates are checked and counted together. The
        instance's ``hit`` is the backend's own method (on shared memory, the core's).
        """
        return self._backend.hit(key, cost)

    def stats(self, key: Key) -> LimitStats:
        """Where ``key`` stands against its tightest rate (least remaining)."""
        return tightest(self.stats_all(key))

    def stats_all(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate, shortest period first."""
        if self._local is not None:
            self._local.raise_if_away()  # no timeout per call while the local share answers
            with self._local.asking():  # met away: the next probe put off, as a hit's
                _, used, reset_ns, _ = self._backend.check(key, 0, False)
        else:
            _, used, reset_ns, _ = self._backend.check(key, 0, False)
        return limit_stats(self.rates, used, reset_ns)

    def local_stats_all(self, key: Key) -> list[LimitStats] | None:
        """With ``on_error="local"``, while this process enforces its host's share because the
        backend is away: where ``key`` stands against the share's rates, shortest period first
        (the quota the rate-limit middlewares then describe). None while the backend answers,
        and always without a local share."""
        return None if self._local is None else self._local.stats_all(key)

    def refund(self, key: Key, cost: int = 1) -> int:
        """Give back up to ``cost`` of what ``key`` holds, its most recent hits first, in every
        rate; how much was given back (0 for a key with nothing counted). For a cost known only
        after the fact: hit with an estimate, then refund what was not used."""
        return self._backend.refund(key, cost)

    def charge(self, key: Key, cost: int = 1) -> None:
        """Count ``cost`` hits for ``key`` without a check: it may go over its limits, and
        ``hit`` then refuses it until enough of its hits have left the window. Strict still:
        no interval admits more than a rate through ``hit``."""
        self._backend.charge(key, cost)

    def _verdict(self, key: Key, cost: int) -> bool:
        return bool(self._backend.check(key, cost, False, False)[0])


__all__ = ["DEFAULT_BUCKETS", "ON_FULL", "Decisions", "LimitStats", "Limiter"]


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

    @spelled_out(OpeningAnywhere)
    def __init__(
        self,
        name: str,
        rate: str | Rate,
        *,
        burst: int,
        capacity: int | None = None,
        on_full: str = DEFAULT_ON_FULL,
        on_error: str = "raise",
        shadow: bool = False,
        decisions: bool = True,
        on_change: str = DEFAULT_ON_CHANGE,
        **options: Unpack[OpeningAnywhere],
    ):
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, ON_ERROR)
        choice("on_change", on_change, ON_CHANGE)
        rates = parse_many(rate)
        if len(rates) != 1:
            raise ValueError(f"a token bucket has one rate, not {len(rates)}: {rate!r}")
        self._rate_given: Rate | None = rates[0]
        want = token_geometry(rates[0], burst, capacity)
        live = live_option(options.get("backend"), on_change, LIVE_REDIS_BUCKETS)
        opened = backends.open("token-bucket", name, want, on_full=on_full,
                               on_error=opening_on_error(on_error, shadow), **options, **live)  # fmt: skip
        self._bind(opened, options.get("clock"), on_full, on_error)
        perm = options.get("perm")
        self._bind_decisions(shadow, create=decisions, longest_ns=self.rate.period_ns, perm=perm)

    @classmethod
    @spelled_out(OpeningAnywhere)
    def attach(
        cls, name: str, *, on_full: str = DEFAULT_ON_FULL, on_error: str = "raise", shadow: bool = False,
        **options: Unpack[OpeningAnywhere],
    ) -> TokenBucket:  # fmt: skip
        """Attach to an existing token bucket; its rate and burst are read from the store."""
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, ON_ERROR)
        opened = backends.open("token-bucket", name, None, on_full=on_full, on_error=on_error, **options)
        self = cls.__new__(cls)
        self._rate_given = None
        self._bind(opened, options.get("clock"), on_full, on_error)
        self._bind_decisions(shadow, create=False, longest_ns=self.rate.period_ns)
        return self

    def _bind(self, opened: Any, clock: Clock | None, on_full: str, on_error: str) -> None:
        self._bind_front(opened, clock, on_full, on_error)

    @property
    def rate(self) -> Rate:
        """The rate in force (on shared memory, the segment's: another process may have changed
        it live), as given when it is the one this bucket was opened with."""
        rate: Rate = self._backend.rate
        given = self._rate_given
        if given is not None and token_geometry(given, 1, 1).rings[0] == token_geometry(rate, 1, 1).rings[0]:
            return given
        return rate

    @property
    def burst(self) -> int:
        return int(self._backend.burst)

    def set_rate(
        self, rate: str | Rate, *, burst: int | None = None, on_change: str = DEFAULT_ON_CHANGE
    ) -> None:
        """Change this bucket's rate (and ``burst``; None: kept) for every process (shared
        memory): a move, ``on_change`` "carry" (the tokens each key used carried, see
        docs/operating.md) or "reset" (every bucket full). Each process follows at its next call."""
        choice("on_change", on_change, ("carry", "reset"))
        set_rates = getattr(self._backend, "_set_rates", None)
        if set_rates is None:
            raise NotSupportedError(f"{self.url.split(':')[0]}: rates change live on shared memory only")
        rates = parse_many(rate)
        if len(rates) != 1:
            raise ValueError(f"a token bucket has one rate, not {len(rates)}: {rate!r}")
        capacity = self._backend.geometry.capacity
        want = token_geometry(rates[0], self.burst if burst is None else burst, capacity)
        set_rates(want, on_change)
        self._rate_given = rates[0]

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
