"""Text that fits a terminal: cell widths, clipping, safe keys, numbers, sparklines, tables.

Widths are counted in terminal cells: East Asian wide characters take two, combining
marks none. Keys and names come from outside (HTTP clients, files in /dev/shm), so
control characters are escaped before anything reaches the terminal.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BARS = " ▁▂▃▄▅▆▇█"
ELLIPSIS = "…"


def cells(text: str) -> int:
    """How many terminal cells ``text`` takes (for text already made :func:`safe`)."""
    if text.isascii():
        return len(text)
    return sum(_cell(ch) for ch in text)


def _cell(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def safe(text: str) -> str:
    """``text`` with control and other unprintable characters escaped (\\n, \\x1b, ...)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


def clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells, ending in an ellipsis when cut."""
    if cells(text) <= width:
        return text
    if width <= 0:
        return ""
    out, used = [], 0
    for ch in text:
        w = _cell(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + ELLIPSIS


def clip_middle(text: str, width: int) -> str:
    """``text`` cut to ``width`` cells in the middle (names and keys differ at both ends)."""
    if cells(text) <= width:
        return text
    if width < 5:
        return clip(text, width)
    head = clip(text, (width + 1) // 2)[:-1]
    tail_cells, tail = width - 1 - cells(head), ""
    for ch in reversed(text):
        if cells(tail) + _cell(ch) > tail_cells:
            break
        tail = ch + tail
    return head + ELLIPSIS + tail


def pad(text: str, width: int, align: str = "<") -> str:
    """``text`` clipped to ``width`` cells and padded to exactly that many."""
    text = clip(text, width)
    room = " " * (width - cells(text))
    return text + room if align == "<" else room + text


def number(value: Any, width: int = 14, decimals: int = 2) -> str:
    """A count or sum for a column of ``width``: exact with separators when it fits, else
    with a k/M/G/T/P/E suffix (4 digits), else in scientific notation; nan / inf as such."""
    if value is None:
        return "-"
    if isinstance(value, str):  # "nan", "inf", "-inf" from metrics.finite
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.{decimals}f}"
    if len(text) <= width:
        return text
    for suffix, scale in _SCALES:
        scaled = f"{value / scale:.4g}"
        if 1 <= abs(float(scaled)) < 1000 and "e" not in scaled and len(scaled) < width:
            return scaled + suffix
    for precision in range(max(width - 6, 0), -1, -1):
        text = f"{value:.{precision}e}"
        if len(text) <= width:
            break
    return text


_SCALES = (("k", 1e3), ("M", 1e6), ("G", 1e9), ("T", 1e12), ("P", 1e15), ("E", 1e18))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1000
    return f"{size:.1f}TB"  # pragma: no cover - the loop returns


def human_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def sparkline(values: Sequence[Any], width: int) -> str:
    """At most ``width`` bars, newest last; more values than bars are summed in groups that
    end at the newest. A bucket that is nan or infinite shows as ``!``."""
    if width <= 0 or not values:
        return ""
    group = math.ceil(len(values) / width)
    first = len(values) - (len(values) // group) * group  # the oldest, partial group
    chunks = [values[:first]] if first else []
    chunks += [values[i : i + group] for i in range(first, len(values), group)]
    sums = [_sum_or_none(c) for c in chunks][-width:]
    top = max((v for v in sums if v is not None and v > 0), default=0.0)
    out = []
    for v in sums:
        if v is None:
            out.append("!")
        elif v <= 0 or not top:
            out.append(BARS[0])
        else:
            out.append(BARS[max(1, min(8, round(v / top * 8)))])
    return "".join(out)


def _sum_or_none(chunk: Sequence[Any]) -> float | None:
    total = 0.0
    for v in chunk:
        if isinstance(v, str) or (isinstance(v, float) and not math.isfinite(v)):
            return None
        total += v
    return total if math.isfinite(total) else None


@dataclass
class Column:
    """One column of a :class:`table`. When lines are too wide, columns go in order of
    ``keep`` (lowest first, those with the highest ``keep`` never); a column with a
    ``min_width`` is clipped down to it (in the middle) when its ``shrink`` turn comes."""

    header: str
    align: str = "<"
    keep: int = 0
    min_width: int = 0
    shrink: int = 0


def table(columns: list[Column], rows: list[list[str]], width: int, gap: int = 2) -> list[str]:
    """``rows`` under ``columns``, every line at most ``width`` cells."""
    widths = [max([cells(c.header)] + [cells(r[i]) for r in rows]) for i, c in enumerate(columns)]
    shown = list(range(len(columns)))
    top = max(c.keep for c in columns)
    steps = sorted(
        [(c.keep, 1, i) for i, c in enumerate(columns) if c.keep < top]
        + [(c.shrink, 0, i) for i, c in enumerate(columns) if c.min_width]
    )

    def total() -> int:
        return sum(widths[i] for i in shown) + gap * (len(shown) - 1)

    for _, drop, i in steps:
        if total() <= width:
            break
        if drop:
            shown.remove(i)
        elif i in shown:
            widths[i] = max(columns[i].min_width, widths[i] - (total() - width))
    lines = []
    for texts in [[c.header for c in columns], *rows]:
        parts = []
        for i in shown:
            text = texts[i] if cells(texts[i]) <= widths[i] else clip_middle(texts[i], widths[i])
            parts.append(pad(text, widths[i], columns[i].align))
        lines.append(clip((" " * gap).join(parts).rstrip(), width))
    return lines
