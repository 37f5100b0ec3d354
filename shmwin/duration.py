"""Durations: ``60``, ``1.5``, ``"90s"``, ``"5m"``, ``"1h"``, ``"500ms"`` -> nanoseconds."""

from __future__ import annotations

import math
import re

NS_PER_S = 1_000_000_000
MAX_NS = 2**63 - 1  # every time and duration is stored as an int64 count of nanoseconds

_UNIT_NS = {
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
        ns = int(whole) * _UNIT_NS[unit] + int(fraction or "0") * _UNIT_NS[unit] // 10 ** len(fraction)
    elif isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{what} must be finite, not {value!r}")
        ns = round(value * NS_PER_S)
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
        if ns % _UNIT_NS[unit] == 0:
            return f"{ns // _UNIT_NS[unit]}{unit}"
    return f"{ns}ns"
