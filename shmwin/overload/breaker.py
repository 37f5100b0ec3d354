"""Breaker: client-side adaptive throttling (Google SRE book, "Handling Overload") shared by
every process on the host -- or, on the Redis backend, by every host.

One window of ``buckets`` buckets over ``window`` holds three counts, written by every
process: ``accepts`` (calls the backend served), ``failures`` (calls that failed) and
``drops`` (calls the breaker refused). ``total`` is their sum: the SRE book's "requests",
which counts the calls throttled on the client as well. A call is dropped with probability

    p = max(0, (total - protection - k * accepts) / (total + 1))

so nothing is dropped while the backend accepts ``1/k`` of the calls, and while the window
holds at most ``protection`` calls. go-zero's ``googlebreaker.go`` keeps the same ring (10 s,
40 buckets, k = 1.5, protection = 5) per process; here all workers add to and read the
same counts, so the whole server backs off after the failures *one* process would need.

Cost: ``allow()`` reads the shared counts at most once per ``refresh`` of its clock (1 ms by
default) and otherwise decides from this process's view -- the last read plus its own
outcomes since. ``accept()``, ``reject()`` and a drop are one ``add`` each.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypedDict, TypeVar

from ..backends.options import spelled_out
from ..clock import Clock, host_clock
from ..errors import GeometryMismatchError, ShmwinError
from ..rate import Duration, to_ns
from ..window import Window
from .described import described, window_facts

if TYPE_CHECKING:
    from typing_extensions import Unpack

FIELDS = ("accepts", "failures", "drops")
K = 1.5  # the defaults: go-zero's and the SRE book's
PROTECTION = 5

P = ParamSpec("P")
T = TypeVar("T")


class BreakerOpenError(ShmwinError):
    """The breaker dropped this call: the backend has been failing (see ``Breaker.stats()``)."""


class Random(Protocol):
    """What the breaker draws from: ``random.Random``, the ``random`` module, or a test's stub."""

    def random(self) -> float: ...


class Judging(TypedDict, total=False):
    """A breaker's keywords beyond its shape: what counts as a failure, the randomness, the
    clock, how often the shared counts are read, and where they live."""

    is_failure: Callable[[BaseException], bool] | None
    acceptable: Callable[[Any], bool] | None
    rng: Random | None
    clock: Clock | None
    refresh: Duration
    backend: str | None


JUDGING_DEFAULTS: dict[str, Any] = {"refresh": "1ms"}  # the others: None


@dataclass(frozen=True)
class BreakerStats:
    """The shared counts over the window, and the drop probability they give."""

    drop_ratio: float
    accepts: int
    failures: int
    drops: int
    total: int


def drop_ratio(accepts: int, total: int, k: float, protection: int) -> float:
    """The SRE formula: ``max(0, (total - protection - k * accepts) / (total + 1))``."""
    return max(0.0, (total - protection - k * accepts) / (total + 1))


def stats_of(counts: Any, k: float = K, protection: int = PROTECTION) -> BreakerStats:
    """A breaker's shared counts read now from its window ``counts``, and the drop ratio they
    give with ``k`` and ``protection`` (which the window does not record: each process has its
    own; an inspector assumes the defaults)."""
    totals = counts.totals()
    accepts, failures, drops = (int(totals[f]) for f in FIELDS)
    total = accepts + failures + drops
    return BreakerStats(drop_ratio(accepts, total, k, protection), accepts, failures, drops, total)


def is_breaker(window: Any) -> bool:
    """Does this window hold a breaker's counts? (What an inspector asks of a window.)"""
    return bool(window.geometry.role == "breaker")  # recorded by Breaker() when it made it


class Breaker:
    """``Breaker("payments")``: create the shared counts, or attach if they exist.

    Use it as a decorator (sync or async functions), as a context manager around one call
    (``with breaker:``, ``async with breaker:``), through ``call(fn, ...)``, or by hand:
    ``if breaker.allow(): ... breaker.accept() / breaker.reject()``. A refused call raises
    :class:`BreakerOpenError` (``allow()`` returns False instead).

    What counts as a failure: an exception for which ``is_failure(exc)`` is true (default:
    every ``Exception``), or a return value for which ``acceptable(result)`` is false
    (default: every value is acceptable). ``BaseException``\\ s that are not ``Exception``
    (cancellation, ``KeyboardInterrupt``) count as nothing.

    ``rng`` (anything with ``random()``) and ``clock`` (monotonic ns) make it deterministic
    in tests; ``backend="redis://..."`` shares the counts between hosts. ``close()`` detaches
    this process, ``unlink()`` removes the counts for everyone.
    """

    @spelled_out(Judging, JUDGING_DEFAULTS)
    def __init__(
        self,
        name: str,
        window: Duration = "10s",
        buckets: int = 40,
        k: float = K,
        protection: int = PROTECTION,
        *,
        perm: int = 0o600,
        **options: Unpack[Judging],
    ):
        settings = _Settings.check(k, protection, options)
        shm_only: dict[str, Any] = {} if perm == 0o600 else {"perm": perm}  # a remote backend: no modes
        clock = options.get("clock")
        counts = Window._for_role(
            "breaker", name, window, buckets, FIELDS, clock=clock, backend=options.get("backend"), **shm_only
        )
        self._bind(counts, settings, clock)

    @classmethod
    @spelled_out(Judging, JUDGING_DEFAULTS)
    def attach(
        cls, name: str, *, k: float = K, protection: int = PROTECTION, **options: Unpack[Judging]
    ) -> Breaker:
        """Attach to an existing breaker (its window and buckets are read from it). ``k`` and
        ``protection`` are each process's own: the shared counts do not record them."""
        settings = _Settings.check(k, protection, options)
        clock = options.get("clock")
        refusal = GeometryMismatchError(f"{name!r} is not a breaker's window (fields {FIELDS})")
        counts = Window._attach_as(name, is_breaker, refusal, clock=clock, backend=options.get("backend"))
        self = object.__new__(cls)
        self._bind(counts, settings, clock)
        return self

    def _bind(self, counts: Any, settings: _Settings, clock: Clock | None) -> None:
        self.window = counts
        self.name: str = counts.name
        self.k, self.protection = settings.k, settings.protection
        self._is_failure, self._acceptable = settings.is_failure, settings.acceptable
        self._random = settings.rng.random
        self._refresh_ns = settings.refresh_ns
        self._clock: Clock = clock or host_clock()
        self._add = counts.add
        # this process's view: the last shared read plus its own outcomes since
        self._accepts = self._total = 0
        self._p = 0.0
        self._next_read_ns = -(2**63)
        self._pass_until_ns = -(2**63)  # allow() is True before this without a look: healthy, fresh

    # -- the decision ---------------------------------------------------------------------------

    def allow(self) -> bool:
        """True: go ahead, then report the outcome with ``accept()`` or ``reject()``.
        False: the call is dropped (and counted as a request, as the SRE book does)."""
        now_ns = self._clock()
        if now_ns < self._pass_until_ns:  # the common case: nothing to drop, counts read lately
            return True
        if now_ns >= self._next_read_ns:
            self._read(now_ns)
        p = self._p
        if p <= 0.0 or self._random() >= p:
            return True
        self._add(1, "drops")
        total = self._total = self._total + 1
        self._p = (total - self.protection - self.k * self._accepts) / (total + 1)
        return False

    def accept(self) -> None:
        """The call was served: one more accept (and request)."""
        self._add(1, "accepts")
        accepts = self._accepts = self._accepts + 1
        total = self._total = self._total + 1
        p = self._p = (total - self.protection - self.k * accepts) / (total + 1)  # allow(): <= 0 is 0
        if p > 0.0:
            self._pass_until_ns = -(2**63)

    def reject(self) -> None:
        """The call failed: one more request that the backend did not accept."""
        self._add(1, "failures")
        total = self._total = self._total + 1
        p = self._p = (total - self.protection - self.k * self._accepts) / (total + 1)
        if p > 0.0:
            self._pass_until_ns = -(2**63)

    def _read(self, now_ns: int) -> None:
        counts = self.window.totals()
        self._accepts = int(counts["accepts"])
        self._total = int(counts["accepts"] + counts["failures"] + counts["drops"])
        self._p = drop_ratio(self._accepts, self._total, self.k, self.protection)
        self._next_read_ns = now_ns + self._refresh_ns
        self._pass_until_ns = self._next_read_ns if self._p <= 0.0 else -(2**63)

    # -- guarding calls ---------------------------------------------------------------------------

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args, **kwargs)`` if allowed, its outcome recorded; else :class:`BreakerOpenError`."""
        self._enter()
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            self._record_exception(exc)
            raise
        self._record_result(result)
        return result

    async def call_async(self, fn: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
        """:meth:`call` for a coroutine function."""
        self._enter()
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:
            self._record_exception(exc)
            raise
        self._record_result(result)
        return result

    def __call__(self, fn: Callable[P, T]) -> Callable[P, T]:
        """``@breaker``: every call of ``fn`` goes through :meth:`call` (or :meth:`call_async`)."""
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                return await self.call_async(fn, *args, **kwargs)

            return guarded_async  # type: ignore[return-value]

        @functools.wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
            return self.call(fn, *args, **kwargs)

        return guarded

    def __enter__(self) -> Breaker:
        self._enter()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.accept()
        elif isinstance(exc, Exception):
            self._record_exception(exc)

    async def __aenter__(self) -> Breaker:
        return self.__enter__()

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        self.__exit__(exc_type, exc, tb)

    def _enter(self) -> None:
        if not self.allow():
            raise BreakerOpenError(f"breaker {self.name!r} dropped the call (drop ratio {self._p:.2f})")

    def _record_exception(self, exc: Exception) -> None:
        if self._is_failure(exc):
            self.reject()
        else:
            self.accept()

    def _record_result(self, result: object) -> None:
        if self._acceptable(result):
            self.accept()
        else:
            self.reject()

    # -- visibility -------------------------------------------------------------------------------

    def stats(self) -> BreakerStats:
        """The shared counts read now (not this process's cached view)."""
        return stats_of(self.window, self.k, self.protection)

    def describe(self) -> dict[str, Any]:
        """Everything an inspector or an exporter shows, as plain values."""
        return {
            **window_facts("breaker", self.window),
            "k": self.k,
            "protection": self.protection,
            **asdict(self.stats()),
        }

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Detach this process; the counts live on for everyone else."""
        self.window.close()

    def unlink(self) -> bool:
        """Remove the shared counts for everyone (idempotent)."""
        return bool(self.window.unlink())

    def __repr__(self) -> str:
        return f"<shmwin.Breaker {self.name!r} k={self.k} protection={self.protection}>"


def describe(name: str, *, backend: str | None = None) -> dict[str, Any] | None:
    """``Breaker.attach(name).describe()`` with the default k and protection, or None if
    ``name`` is not a breaker (for the CLI and the Prometheus export)."""
    return described(lambda: Breaker.attach(name, backend=backend))


@dataclass(frozen=True)
class _Settings:
    k: float
    protection: int
    refresh_ns: int
    is_failure: Callable[[BaseException], bool]
    acceptable: Callable[[Any], bool]
    rng: Random

    @classmethod
    def check(cls, k: float, protection: int, options: Judging) -> _Settings:
        is_failure, acceptable, rng = options.get("is_failure"), options.get("acceptable"), options.get("rng")
        refresh = options.get("refresh", JUDGING_DEFAULTS["refresh"])
        if isinstance(k, bool) or not isinstance(k, int | float) or not 0 < k < float("inf"):
            raise ValueError(f"k must be a positive finite number, not {k!r}")
        if isinstance(protection, bool) or not isinstance(protection, int) or protection < 0:
            raise ValueError(f"protection must be an int >= 0, not {protection!r}")
        for what, fn in (("is_failure", is_failure), ("acceptable", acceptable)):
            if fn is not None and not callable(fn):
                raise TypeError(f"{what} must be callable, not {fn!r}")
        if rng is not None and not callable(getattr(rng, "random", None)):
            raise TypeError(f"rng must have a random() method (random.Random), not {rng!r}")
        refresh_ns = 0 if refresh == 0 else to_ns(refresh, "refresh")
        import random  # the default rng: imported by a breaker's set-up, not by every process's import

        return cls(
            float(k),
            protection,
            refresh_ns,
            is_failure or _any_exception,
            acceptable or _always,
            rng or random,  # the module: CPython reseeds it in every forked child
        )


def _any_exception(exc: BaseException) -> bool:
    return isinstance(exc, Exception)


def _always(result: object) -> bool:
    return True


__all__ = [
    "FIELDS",
    "PROTECTION",
    "Breaker",
    "BreakerOpenError",
    "BreakerStats",
    "K",
    "describe",
    "drop_ratio",
    "is_breaker",
    "stats_of",
]
