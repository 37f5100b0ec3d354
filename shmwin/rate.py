"""Rates such as ``"100/minute"``: parsing and the Rate value type.

Every string that ``limits.parse_many`` accepts (Flask-Limiter and slowapi config strings)
means the same here: ``N/unit``, ``N per unit``, ``N/2 units``, ``N per 2 units``, units
second, minute, hour, day, month (30 days) and year (12 months: 360 days, as in limits),
singular or plural, any case, joined by ``;``, ``,`` or ``|``. Two rates over the same
period mean the stricter one. On top of that: the short units ``s``, ``sec``, ``m``,
``min``, ``h``, ``hr``, ``d`` and a trailing separator. The differences (``0/minute``,
``10/0 minutes``, numbers beyond int64) are errors here, listed in docs/limits-storage.md.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass

from .duration import MAX_NS, NS_PER_S, format_ns

MAX_LIMIT = 2**63 - 1  # counts are int64

_DAY_NS = 86400 * NS_PER_S
_UNIT_NS = {
    "second": NS_PER_S,
    "minute": 60 * NS_PER_S,
    "hour": 3600 * NS_PER_S,
    "day": _DAY_NS,
    "month": 30 * _DAY_NS,  # limits' month
    "year": 12 * 30 * _DAY_NS,  # limits' year: 12 of its months
}
_UNIT_OF = {word: unit for unit in _UNIT_NS for word in (unit, unit + "s")} | {
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
            ns = _UNIT_NS[unit]
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
    if count * _UNIT_NS[unit] > MAX_NS:
        raise ValueError(
            f"{text!r}: the period must be at most {MAX_NS // NS_PER_S} seconds (2**63-1 ns, about 292 years)"
        )
    return Rate(limit, count * _UNIT_NS[unit])


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
