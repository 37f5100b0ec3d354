"""Durations and rates: ``60``, ``"90s"``, ``"500ms"`` -> nanoseconds; ``"100/minute"`` -> Rate.

Durations: seconds (int or float) or a number and a unit (ns, us, ms, s, m, h, d), held as a
positive int64 count of nanoseconds (``to_ns``) and spelled back exactly (``format_ns``).

Rates such as ``"100/minute"``: parsing and the Rate value type.

Every string that ``limits.parse_many`` accepts (Flask-Limiter and slowapi config strings)
means the same here: ``N/unit``, ``N per unit``, ``N/2 units``, ``N per 2 units``, units
second, minute, hour, day, month (30 days) and year (12 months: 360 days, as in limits),
singular or plural, any case, joined by ``;``, ``,`` or ``|``. Two rates over the same
period mean the stricter one. On top of that: the short units ``s``, ``sec``, ``m``,
``min``, ``h``, ``hr``, ``d`` and a trailing separator. The differences (``0/minute``,
``10/0 minutes``, numbers beyond int64) are errors here, listed in docs/limits-storage.md.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

NS_PER_S = 1_000_000_000
MAX_NS = 2**63 - 1  # every time and duration is stored as an int64 count of nanoseconds

_SHORT_UNIT_NS = {
    "ns": 1,
    "us": 1_000,
    "ms": 1_000_000,
    "s": NS_PER_S,
    "m": 60 * NS_PER_S,
    "h": 3600 * NS_PER_S,
    "d": 86400 * NS_PER_S,
}
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ns|us|ms|s|m|h|d)\s*$")

Duration = int | float | str


def to_ns(value: Duration, what: str = "duration") -> int:
    """Convert seconds (int/float) or a string with a unit to a positive count of ns,
    at most 2**63-1 (about 292 years)."""
    ns: int
    if isinstance(value, bool):
        raise ValueError(f"{what} must be seconds or a string like '90s', not {value!r}")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(
                f"{what} {value!r} is not a duration: expected a number and a unit "
                f"(ns, us, ms, s, m, h, d), e.g. '90s', '5m', '1h'"
            )
        number, unit = str(match.group(1)), str(match.group(2))
        whole, _, fraction = number.partition(".")
        # exact for any length of digits: no float on the way
        unit_ns = _SHORT_UNIT_NS[unit]
        ns = int(whole) * unit_ns + int(fraction or "0") * unit_ns // 10 ** len(fraction)
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be finite, not {value!r}")
        scaled = value * NS_PER_S  # past 1.8e299 s: inf, which round() refuses with an OverflowError
        ns = round(scaled) if math.isfinite(scaled) else MAX_NS + 1
    else:
        raise ValueError(f"{what} must be seconds or a string like '90s', not {value!r}")
    if ns <= 0:
        raise ValueError(f"{what} must be positive, not {value!r}")
    if ns > MAX_NS:
        raise ValueError(f"{what} {value!r} is too long: at most {MAX_NS // NS_PER_S} seconds (2**63-1 ns)")
    return ns


def format_ns(ns: int) -> str:
    """The shortest exact spelling of a duration: 60_000_000_000 -> '1m'."""
    for unit in ("d", "h", "m", "s", "ms", "us"):
        if ns % _SHORT_UNIT_NS[unit] == 0:
            return f"{ns // _SHORT_UNIT_NS[unit]}{unit}"
    return f"{ns}ns"


# -- rates: what a limit means ------------------------------------------------------------------

MAX_LIMIT = 2**63 - 1  # counts are int64

_DAY_NS = 86400 * NS_PER_S
_RATE_UNIT_NS = {
    "second": NS_PER_S,
    "minute": 60 * NS_PER_S,
    "hour": 3600 * NS_PER_S,
    "day": _DAY_NS,
    "month": 30 * _DAY_NS,  # limits' month
    "year": 12 * 30 * _DAY_NS,  # limits' year: 12 of its months
}
_UNIT_OF = {word: unit for unit in _RATE_UNIT_NS for word in (unit, unit + "s")} | {
    "s": "second", "sec": "second", "secs": "second",
    "m": "minute", "min": "minute", "mins": "minute",
    "h": "hour", "hr": "hour", "hrs": "hour",
    "d": "day",
}  # fmt: skip
_STR_UNITS = ("day", "hour", "minute", "second")  # str(rate) uses the exact, unambiguous ones
_RATE = re.compile(
    r"^\s*(?P<limit>[0-9]+)\s*(?:/|per)\s*(?P<count>[0-9]+)?\s*(?P<unit>[a-z]+)\s*$", re.IGNORECASE
)
_SEPARATOR = re.compile(r"[;,|]")
_EXPECTED = "expected e.g. '10/second', '5 per minute', '100/5 minutes', '1000/hour', '20000/day', '1/month'"


@dataclass(frozen=True, order=True)
class Rate:
    """At most ``limit`` hits in any period of ``period_ns``."""

    limit: int
    period_ns: int

    def __post_init__(self) -> None:
        for what, value, bound in (("limit", self.limit, MAX_LIMIT), ("period_ns", self.period_ns, MAX_NS)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"a rate's {what} must be an int, not {value!r}")
            object.__setattr__(self, what, int(value))  # numpy ints become plain ints
            if value > bound:
                raise ValueError(f"a rate's {what} must be at most {bound} (2**63-1: an int64), not {value}")
        if self.limit < 1:
            raise ValueError(f"a rate's limit must be at least 1, not {self.limit}")
        if self.period_ns < 1:
            raise ValueError("a rate's period must be positive")

    @property
    def period(self) -> float:
        """The period in seconds."""
        return self.period_ns / NS_PER_S

    def __str__(self) -> str:
        for unit in _STR_UNITS:
            ns = _RATE_UNIT_NS[unit]
            if self.period_ns == ns:
                return f"{self.limit}/{unit}"
            if self.period_ns % ns == 0:
                return f"{self.limit}/{self.period_ns // ns} {unit}s"
        return f"{self.limit}/{format_ns(self.period_ns)}"


def parse(text: str) -> Rate:
    """One rate: ``"10/second"``, ``"5 per minute"``, ``"100/5 minutes"``, ``"1/month"``, ``"3/h"``."""
    if not isinstance(text, str):
        raise TypeError(f"a rate is a string like '10/second', not {text!r} ({type(text).__name__})")
    match = _RATE.match(text)
    unit = _UNIT_OF.get(match["unit"].lower()) if match else None
    if match is None or unit is None:
        raise ValueError(f"{text!r} is not a rate: {_EXPECTED}")
    limit, count = int(match["limit"]), int(match["count"] or 1)
    if limit < 1:
        raise ValueError(f"{text!r} is not a rate: the limit must be at least 1")
    if count < 1:
        raise ValueError(f"{text!r} is not a rate: the period must be at least 1 {unit}")
    if limit > MAX_LIMIT:
        raise ValueError(f"{text!r}: the limit must be at most {MAX_LIMIT} (2**63-1: counts are int64)")
    if count * _RATE_UNIT_NS[unit] > MAX_NS:
        raise ValueError(
            f"{text!r}: the period must be at most {MAX_NS // NS_PER_S} seconds (2**63-1 ns, about 292 years)"
        )
    return Rate(limit, count * _RATE_UNIT_NS[unit])


Rates = str | Rate | list[str | Rate] | tuple[str | Rate, ...]


def parse_many(text: Rates) -> list[Rate]:
    """Several rates: ``"10/second;1000/hour"``, ``"10/second, 1000/hour"``,
    ``"10/second|1000/hour"`` or a list of strings and Rates. Shortest period first; two
    rates over the same period keep the stricter."""
    if isinstance(text, Rate):
        return [text]
    if isinstance(text, str):
        parts: list[str | Rate] = [p for p in _SEPARATOR.split(text) if p.strip()]
    elif isinstance(text, list | tuple):
        parts = list(text)
        for i, part in enumerate(parts):
            if not isinstance(part, str | Rate):
                raise TypeError(
                    f"rates[{i}] is {part!r} ({type(part).__name__}): each rate is a string like "
                    "'10/second' or a shmwin.Rate"
                )
    else:
        raise TypeError(
            f"rates must be a string like '10/second;1000/hour', a shmwin.Rate or a list of them, "
            f"not {text!r} ({type(text).__name__})"
        )
    strictest: dict[int, Rate] = {}
    for part in parts:
        rate = part if isinstance(part, Rate) else parse(part)
        if rate.period_ns not in strictest or rate.limit < strictest[rate.period_ns].limit:
            strictest[rate.period_ns] = rate
    if not strictest:
        raise ValueError(f"{text!r} holds no rate: {_EXPECTED}")
    return sorted(strictest.values(), key=lambda r: r.period_ns)


@dataclass(frozen=True)
class LimitStats:
    """Where one key stands against one rate."""

    rate: Rate
    limit: int
    used: int
    remaining: int
    reset_after: float  # seconds until the oldest counted hit is forgotten (0 if none)
