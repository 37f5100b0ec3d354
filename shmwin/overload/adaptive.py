"""AdaptiveLimiter: a rate limit that follows what the backend sustains.

A recipe on top of :class:`~shmwin.limiter.Limiter` and a :class:`~shmwin.window.Window`,
no new core. Two shared pieces:

- a *health* window of outcomes (``ok``, ``error``), written with ``record()`` by every
  process (or any window of yours with an ok and an error field);
- a Limiter configured at ``scale`` times the nominal rate: "100/second" is kept as
  100 000 units per second.

From the health window's error ratio over ``last`` (default: its span) comes a factor:

    factor = 1                                 while errors <= good (or fewer than min_samples)
    factor = floor                             once errors >= bad
    linear between them

and every hit costs ``round(scale / factor)`` units, so the effective limit is
``floor(units / cost)`` hits per period: the rate goes down while the window is bad and back
up as bad buckets age out of it. The check-and-count stays one native ``hit()``, strict across
processes; hits taken at an earlier cost keep their units until they leave the period, so the
limit moves smoothly rather than resetting. The factor is re-read from the window at most
once per ``refresh`` of the clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ..backends.contract import Closing, Key
from ..backends.options import spelled_out
from ..clock import Clock, host_clock
from ..errors import GeometryMismatchError, WindowNotFoundError
from ..geometry import DEFAULT_BUCKETS, limiter_geometry
from ..limiter import Limiter
from ..rate import Duration, LimitStats, Rate, parse_many, to_ns
from ..window import Window
from .described import described

if TYPE_CHECKING:
    from typing_extensions import Unpack

HEALTH_FIELDS = ("ok", "error")
HEALTH_SUFFIX = ".health"  # the health window's name, after the limiter's
DEFAULT_SCALE = 1000  # units per hit at the full rate


@dataclass(frozen=True)
class AdaptiveStats:
    """The health window and what it makes of the configured rate."""

    ok: int
    errors: int
    error_ratio: float
    factor: float
    cost: int  # units per hit
    effective: list[tuple[Rate, int]]  # (configured rate, hits it admits now per period)


def factor_for(ok: int, errors: int, good: float, bad: float, floor: float, min_samples: int) -> float:
    """The share of the configured rate to allow, from the outcomes in the health window."""
    seen = ok + errors
    if seen < min_samples or seen <= 0:
        return 1.0
    ratio = errors / seen
    if ratio <= good:
        return 1.0
    if ratio >= bad:
        return floor
    return 1.0 - (1.0 - floor) * (ratio - good) / (bad - good)


class Policy(TypedDict, total=False):
    """How an adaptive limiter judges its health window: each process's own (not stored)."""

    ok_field: str
    error_field: str
    last: Duration | None
    good: float
    bad: float
    floor: float
    min_samples: int
    refresh: Duration


# last: None, the health window's span
POLICY_DEFAULTS: dict[str, Any] = {
    "ok_field": "ok", "error_field": "error", "good": 0.05, "bad": 0.5, "floor": 0.1, "min_samples": 20,
    "refresh": "100ms",
}  # fmt: skip


class AdaptiveLimiter(Closing):
    """``AdaptiveLimiter("api", "100/second")``: ``hit(key)`` as a Limiter's, at a rate that
    falls while ``record(ok=False)`` outcomes dominate the health window and recovers after.

    ``health`` is the window to judge by (default: ``NAME.health``, 10 s of 10 buckets,
    fields ok and error); ``good``/``bad`` are error ratios; ``floor`` the least share of
    the rate ever allowed; ``scale`` the units per hit at the full rate.
    """

    @spelled_out(Policy, POLICY_DEFAULTS)
    def __init__(
        self,
        name: str,
        rates: str | Rate | list[str | Rate] | tuple[str | Rate, ...],
        *,
        health: Window | None = None,
        scale: int = DEFAULT_SCALE,
        capacity: int = 10_000,
        clock: Clock | None = None,
        perm: int = 0o600,
        **policy: Unpack[Policy],
    ):
        self._configure(parse_many(rates), scale, clock, policy)
        judged = HEALTH_FIELDS if health is None else tuple(health.fields)
        _check_fields(judged, self._ok_field, self._error_field)
        self._own_health = health is None
        self.health: Any = health or Window._for_role(
            "health", name + HEALTH_SUFFIX, "10s", 10, HEALTH_FIELDS, clock=clock, perm=perm
        )
        scaled: list[str | Rate] = [Rate(r.limit * scale, r.period_ns) for r in self.rates]
        try:
            want = limiter_geometry(parse_many(scaled), DEFAULT_BUCKETS, capacity)
            self.limiter = Limiter._open_geometry(
                name, dataclasses.replace(want, role="adaptive"), clock=clock, perm=perm
            )
        except BaseException:  # all or none: the health window goes if this call made it
            if self._own_health:
                self.health._discard()
            raise
        self.name = self.limiter.name

    @classmethod
    @spelled_out(Policy, POLICY_DEFAULTS)
    def attach(
        cls,
        name: str,
        *,
        scale: int = DEFAULT_SCALE,
        health: Window | None = None,
        clock: Clock | None = None,
        **policy: Unpack[Policy],
    ) -> AdaptiveLimiter:
        """Attach to an existing adaptive limiter: its rates are the limiter's divided by
        ``scale`` (not stored: give the one it was made with); its health window is
        ``NAME.health`` unless ``health`` is given. The policy is each process's own."""
        limiter = Limiter.attach(name, clock=clock)
        opened: Window | None = None
        try:
            if any(r.limit % scale for r in limiter.rates):
                raise GeometryMismatchError(f"{name!r} is not an adaptive limiter of scale {scale}")
            self = object.__new__(cls)
            rates = [Rate(r.limit // scale, r.period_ns) for r in limiter.rates]
            self._configure(rates, scale, clock, policy)
            if health is None:
                health = opened = Window.attach(name + HEALTH_SUFFIX, clock=clock)
            _check_fields(tuple(health.fields), self._ok_field, self._error_field)
        except BaseException:
            limiter.close()
            if opened is not None:
                opened.close()
            raise
        self._own_health = opened is not None
        self.health = health
        self.limiter = limiter
        self.name = limiter.name
        return self

    def _configure(self, rates: list[Rate], scale: int, clock: Clock | None, policy: Policy) -> None:
        """The policy, checked before anything is created or attached."""
        given: dict[str, Any] = {**POLICY_DEFAULTS, **policy}
        good, bad, floor, min_samples = given["good"], given["bad"], given["floor"], given["min_samples"]
        _check(good, bad, floor, min_samples, scale)
        self.rates = rates
        self.good, self.bad, self.floor, self.min_samples, self.scale = good, bad, floor, min_samples, scale
        self._ok_field, self._error_field = given["ok_field"], given["error_field"]
        self._last = given.get("last")
        refresh = given["refresh"]
        self._refresh_ns = 0 if refresh == 0 else to_ns(refresh, "refresh")
        self._clock: Clock = clock or host_clock()
        self._cost = scale
        self._next_read_ns = -(2**63)

    # -- limiting -----------------------------------------------------------------------------------

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if the current effective rates allow them."""
        return self.limiter.hit(key, cost * self._current_cost())

    def test(self, key: Key, cost: int = 1) -> bool:
        """Would ``hit(key, cost)`` pass now? Counts nothing."""
        return self.limiter.test(key, cost * self._current_cost())

    def record(self, ok: bool = True, n: int = 1) -> None:
        """Report ``n`` outcomes of the protected backend (into the health window)."""
        self.health.add(n, self._ok_field if ok else self._error_field)

    def _current_cost(self) -> int:
        now_ns = self._clock()
        if now_ns >= self._next_read_ns:
            self._next_read_ns = now_ns + self._refresh_ns
            self._cost = self._cost_for(self._factor_now())
        return self._cost

    def _factor_now(self) -> float:
        counts = self.health.totals(last=self._last)
        ok, errors = int(counts[self._ok_field]), int(counts[self._error_field])
        return factor_for(ok, errors, self.good, self.bad, self.floor, self.min_samples)

    def _cost_for(self, factor: float) -> int:
        return max(1, round(self.scale / factor))

    # -- visibility -------------------------------------------------------------------------------

    def stats(self) -> AdaptiveStats:
        """The health window read now, and the limits it gives."""
        counts = self.health.totals(last=self._last)
        ok, errors = int(counts[self._ok_field]), int(counts[self._error_field])
        factor = factor_for(ok, errors, self.good, self.bad, self.floor, self.min_samples)
        cost = self._cost_for(factor)
        effective = [(r, r.limit * self.scale // cost) for r in self.rates]
        ratio = errors / (ok + errors) if ok + errors else 0.0
        return AdaptiveStats(ok, errors, ratio, factor, cost, effective)

    def key_stats(self, key: Key) -> list[LimitStats]:
        """Where ``key`` stands against each rate, in *hits* at the current cost."""
        cost = self._current_cost()
        out = []
        for rate, s in zip(self.rates, self.limiter.stats_all(key), strict=True):
            limit = s.limit // cost
            used = -(-s.used // cost)
            out.append(LimitStats(rate, limit, used, max(limit - used, 0), s.reset_after))
        return out

    def describe(self) -> dict[str, Any]:
        s = self.stats()
        return {
            "kind": "adaptive_limiter",
            "name": self.name,
            "rates": [str(r) for r in self.rates],
            "effective": [limit for _, limit in s.effective],
            "factor": s.factor,
            "error_ratio": s.error_ratio,
            "ok": s.ok,
            "errors": s.errors,
            "scale": self.scale,
            "cost": s.cost,
        }

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        self.limiter.close()
        self._close_health()

    def unlink(self) -> bool:
        """Remove the limiter (and the health window, if this class made it) for everyone."""
        first = self.limiter.unlink()
        if self._own_health:
            return bool(self.health.unlink() or first)
        return bool(first)

    def _close_health(self) -> None:
        if self._own_health:
            self.health.close()

    def __repr__(self) -> str:
        rates = ";".join(str(r) for r in self.rates)
        return f"<shmwin.AdaptiveLimiter {self.name!r} {rates}>"


def describe(name: str, *, scale: int = DEFAULT_SCALE) -> dict[str, Any] | None:
    """``AdaptiveLimiter.attach(name).describe()``, or None if ``name`` is not one (a limiter
    whose rates divide by ``scale``, beside a ``NAME.health`` window with ok and error)."""
    not_one = (GeometryMismatchError, WindowNotFoundError, ValueError)
    return described(lambda: AdaptiveLimiter.attach(name, scale=scale), not_one)


def _check_fields(have: tuple[str, ...], ok_field: str, error_field: str) -> None:
    for field in (ok_field, error_field):
        if field not in have:
            raise ValueError(f"the health window has no field {field!r} (it has {have})")


def _check(good: float, bad: float, floor: float, min_samples: int, scale: int) -> None:
    for what, value in (("good", good), ("bad", bad), ("floor", floor)):
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ValueError(f"{what} must be a ratio in [0, 1], not {value!r}")
    if not good < bad:
        raise ValueError(f"good ({good}) must be below bad ({bad})")
    if floor <= 0:
        raise ValueError(f"floor must be above 0 (a share of the rate), not {floor!r}")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 0:
        raise ValueError(f"min_samples must be an int >= 0, not {min_samples!r}")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be an int >= 1, not {scale!r}")


__all__ = [
    "DEFAULT_SCALE",
    "HEALTH_FIELDS",
    "HEALTH_SUFFIX",
    "AdaptiveLimiter",
    "AdaptiveStats",
    "describe",
    "factor_for",
]
