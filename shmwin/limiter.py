"""Limiter: a strict, per-key rate limit over one or more rates, shared by every process --
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
"""

from __future__ import annotations

from contextlib import suppress

from . import backends
from . import decisions as _decisions
from .backends.contract import Key
from .clock import Clock
from .decisions import Decisions
from .errors import BackendUnavailableError, NotSupportedError
from .geometry import DEFAULT_BUCKETS, Geometry, limiter_geometry
from .local_share import LocalShare, check_local
from .policy import (
    DEFAULT_ON_FULL,
    LIMITER_ON_ERROR,
    ON_FULL,
    choice,
    fallback,
    limit_stats,
    opening_on_error,
    tightest,
)
from .rate import LimitStats, Rate, parse_many
from .waiting import Waiting
from .window import Window

Rates = str | Rate | list[str | Rate] | tuple[str | Rate, ...]


class Limiter(Waiting):
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

    def __init__(
        self,
        name: str,
        rates: Rates,
        *,
        capacity: int | None = None,
        buckets: int = DEFAULT_BUCKETS,
        exact: bool | int = False,
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
        fallback: Rates | None = None,
    ):
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, LIMITER_ON_ERROR)
        check_local(on_error, fallback, backend)
        want = limiter_geometry(parse_many(rates), buckets, capacity, exact)
        opened = backends.open_limiter(
            name, want, backend=backend, clock=clock, on_full=on_full, perm=perm, timeout=timeout,
            on_error=opening_on_error(on_error, shadow), lock_timeout=lock_timeout,
            ready_timeout=ready_timeout,
        )  # fmt: skip
        self._bind(opened, clock, on_full, on_error, fallback)
        self._keep_decisions(shadow, create=decisions, perm=perm)

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
        fallback: Rates | None = None,
    ) -> Limiter:
        """Attach to an existing limiter; its rates are read from the store (which must answer).
        Its hits are counted in its decisions window if it has one (none is made)."""
        choice("on_full", on_full, ON_FULL)
        choice("on_error", on_error, LIMITER_ON_ERROR)
        check_local(on_error, fallback, backend)
        opened = backends.open_limiter(
            name, None, backend=backend, clock=clock, on_full=on_full, on_error=on_error,
            lock_timeout=lock_timeout, ready_timeout=ready_timeout, timeout=timeout, perm=perm,
        )  # fmt: skip
        self = cls.__new__(cls)
        self._bind(opened, clock, on_full, on_error, fallback)
        self._keep_decisions(shadow, create=False)
        return self

    @classmethod
    def _open_geometry(
        cls, name: str, want: Geometry, *, clock: Clock | None = None, perm: int | None = None
    ) -> Limiter:
        """Create or attach a shared-memory limiter of exactly ``want`` (a limiter geometry
        with a ``role`` for the tools): what shmwin's own parts make."""
        self = cls.__new__(cls)
        self._bind(backends.open_limiter(name, want, clock=clock, perm=perm), clock, "raise", "raise")
        return self

    def _bind(
        self, opened: backends.LimiterBackend, clock: Clock | None, on_full: str, on_error: str,
        fallback: Rates | None = None,
    ) -> None:
        self._backend = opened
        self.name = opened.name
        self.rates: list[Rate] = opened.rates
        self.on_full, self.on_error = on_full, on_error
        self._take_clock(clock)
        self._window: Window | None = None
        self.shadow = False
        self._decisions: Window | None = None
        # the hot path is the backend's own method (the native check-and-count on shared memory)
        self.hit = opened.hit if on_error == "raise" else self._hit_or_fallback  # type: ignore[method-assign]
        self._local: LocalShare | None = None
        if on_error == "local":
            self._local = LocalShare(opened, self.rates, fallback, clock, on_full, Limiter)
            self._local.bind(self)  # sets self.hit: the asking path, or while away the local one

    def _keep_decisions(self, shadow: bool, *, create: bool, perm: int | None = None) -> None:
        """Count decisions in ``NAME.decisions`` (made if ``create``, else attached if there),
        and answer True to every hit if ``shadow`` (see :func:`shmwin.decisions.bind`)."""
        longest_ns = max(r.period_ns for r in self.rates)
        _decisions.bind(self, shadow, create=create, longest_ns=longest_ns, perm=perm)

    @property
    def window(self) -> Window:
        """The limiter's rows as a read-only :class:`Window` (shared memory)."""
        if self._window is None:
            self._window = Window._over(self._backend.window, self._clock_arg)
        return self._window

    # -- the checks -------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them; else count nothing.

        One atomic step on the backend: the rates are checked and counted together. The
        instance's ``hit`` is the backend's own method (on shared memory, the core's).
        """
        return self._backend.hit(key, cost)

    def _hit_or_fallback(self, key: Key, cost: int = 1) -> bool:
        try:
            return self._backend.hit(key, cost) or self.shadow
        except BackendUnavailableError:
            return fallback(self.on_error) or self.shadow

    def _hit_shadow(self, key: Key, cost: int = 1) -> bool:
        """Shadow mode on a backend that keeps no decisions: count what enforcement would, and
        answer True -- also while the backend is away, whatever ``on_error`` says."""
        with suppress(BackendUnavailableError):
            self._backend.hit(key, cost)
        return True

    def decisions(self) -> Decisions:
        """``Decisions(admitted, rejected, near_limit)`` over the longest period, counted by
        every process's ``hit``: what enforcement did, or in shadow mode would have done.
        :class:`NotSupportedError` if the limiter keeps none (``decisions=False``, Redis)."""
        return _decisions.read(self._decisions, self.name)

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing. (In shadow mode: True.)"""
        if self._local is not None:
            return self._local.test(key, cost) or self.shadow
        try:
            return bool(self._backend.check(key, cost, False, False)[0]) or self.shadow
        except BackendUnavailableError:
            if self.shadow:
                return True
            if self.on_error == "raise":
                raise
            return fallback(self.on_error)

    def stats(self, key: Key) -> LimitStats:
        """Where ``key`` stands against its tightest rate (least remaining)."""
        return tightest(self.stats_all(key))

    def stats_all(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate, shortest period first."""
        if self._local is not None:
            self._local.raise_if_away()  # no timeout per call while the local share answers
        _, used, reset_ns, _ = self._backend.check(key, 0, False)
        return limit_stats(self.rates, used, reset_ns)

    def full_count(self) -> int:
        """Requests that met a full key table, whatever ``on_full`` answered (see
        :meth:`Window.full_count`); 0 on Redis, which has no key table to fill."""
        try:
            return self.window.full_count()
        except NotSupportedError:
            return 0

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

    def clear(self, key: Key) -> None:
        """Forget every hit of ``key``."""
        self._backend.clear(key)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The backend's URL ("" for shared memory)."""
        return self._backend.url

    @property
    def closed(self) -> bool:
        return self._backend.closed

    def close(self) -> None:
        self._backend.close()
        if self._decisions is not None:
            self._decisions.close()
        if self._local is not None:
            self._local.close()

    def unlink(self) -> bool:
        """Remove the limiter (and its decisions window, and this host's local share) for every
        process: True if it was there."""
        if self._decisions is not None:
            self._decisions.unlink()
        if self._local is not None:
            self._local.unlink()
        return self._backend.unlink()

    def __enter__(self) -> Limiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._backend)


__all__ = ["DEFAULT_BUCKETS", "ON_FULL", "Decisions", "LimitStats", "Limiter"]
