"""The counter roles' units: fixed windows and sliding counters count in thousandths of a hit
(:data:`UNIT`, as nginx keeps its excess), so a fractional cost is counted exactly to 1/1000;
what they report is in hits, an int when whole, else a float."""

from __future__ import annotations

UNIT = 1000  # a count's units per hit


def to_hits(units: int) -> int | float:
    """A count in units as hits: an int when whole, else a float."""
    whole, part = divmod(units, UNIT)
    return whole if part == 0 else units / UNIT
