"""Rates such as ``"100/minute"``: parsing and the Rate value type."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .duration import NS_PER_S, format_ns

_UNIT_NS = {"second": NS_PER_S, "minute": 60 * NS_PER_S, "hour": 3600 * NS_PER_S, "day": 86400 * NS_PER_S}
_ALIASES = {
    "s": "second",
    "sec": "second",
    "m": "minute",
    "min": "minute",
    "h": "hour",
    "hr": "hour",
    "d": "day",
}
_RATE = re.compile(
    r"^\s*(?P<limit>\d+)\s*(?:/|per\s)\s*(?P<count>\d+)?\s*(?P<unit>[a-z]+?)s?\s*$", re.IGNORECASE
)
_EXPECTED = "expected e.g. '10/second', '5 per minute', '100/5 minutes', '1000/hour', '20000/day'"


@dataclass(frozen=True, order=True)
class Rate:
    """At most ``limit`` hits in any period of ``period_ns``."""

    limit: int
    period_ns: int

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"a rate's limit must be at least 1, not {self.limit}")
        if self.period_ns < 1:
            raise ValueError("a rate's period must be positive")

    @property
    def period(self) -> float:
        """The period in seconds."""
        return self.period_ns / NS_PER_S

    def __str__(self) -> str:
        for unit, ns in reversed(_UNIT_NS.items()):
            if self.period_ns == ns:
                return f"{self.limit}/{unit}"
            if self.period_ns % ns == 0:
                return f"{self.limit}/{self.period_ns // ns} {unit}s"
        return f"{self.limit}/{format_ns(self.period_ns)}"


def parse(text: str) -> Rate:
    """One rate: ``"10/second"``, ``"5 per minute"``, ``"100/5 minutes"``, ``"3/h"``."""
    if not isinstance(text, str):
        raise ValueError(f"a rate is a string like '10/second', not {text!r}")
    match = _RATE.match(text)
    unit = match and _ALIASES.get(match["unit"].lower(), match["unit"].lower())
    if not match or unit not in _UNIT_NS:
        raise ValueError(f"{text!r} is not a rate: {_EXPECTED}")
    count = int(match["count"] or 1)
    if count < 1:
        raise ValueError(f"{text!r} is not a rate: the period must be at least 1 {unit}")
    return Rate(int(match["limit"]), count * _UNIT_NS[unit])


def parse_many(text: str | Rate | list[str | Rate] | tuple[str | Rate, ...]) -> list[Rate]:
    """Several rates, ``"10/second;1000/hour"`` or ``"10/second, 1000/hour"`` or a list."""
    if isinstance(text, Rate):
        return [text]
    parts: list[str | Rate] = list(text) if isinstance(text, list | tuple) else re.split(r"[;,]", text)
    rates = [p if isinstance(p, Rate) else parse(p) for p in parts if isinstance(p, Rate) or p.strip()]
    if not rates:
        raise ValueError(f"{text!r} holds no rate: {_EXPECTED}")
    periods = [r.period_ns for r in rates]
    if len(set(periods)) != len(periods):
        raise ValueError(f"{text!r} gives two limits for the same period")
    return sorted(rates, key=lambda r: r.period_ns)


@dataclass(frozen=True)
class LimitStats:
    """Where one key stands against one rate."""

    rate: Rate
    limit: int
    used: int
    remaining: int
    reset_after: float  # seconds until the oldest counted hit is forgotten (0 if none)
