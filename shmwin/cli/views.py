"""What ``show``, ``watch`` and ``ls`` print: snapshots as lines of at most ``width`` cells."""

from __future__ import annotations

from typing import Any

from ..metrics import Info, ShmUsage
from .text import (
    Column,
    clip,
    clip_middle,
    human_bytes,
    human_s,
    number,
    pad,
    safe,
    sparkline,
    table,
)

NUMBER_CELLS = 14
KEY_MIN_CELLS = 16
_RATE_GROUP = (8, 8, 9)  # USED, LEFT, RESET


def window_lines(snap: dict[str, Any], width: int) -> list[str]:
    """One window or limiter: per ring, each field's total, rate and sparkline; then the
    busiest keys (for a limiter: used / remaining / reset against each rate)."""
    head = f"{safe(snap['name'])} ({snap['kind']})"
    if snap.get("key") is not None:
        head += f"  key={safe(snap['key'])!r}"
    lines = [clip(head, width)]
    fields = [safe(f) for f in snap["fields"]]
    field_cells = min(max(len(f) for f in fields), NUMBER_CELLS)
    for row in snap["resolutions"]:
        title = f"  {row['resolution']}  last {row['last']}"
        if "rate" in row:
            title = f"  {row['rate']}  ({row['resolution']}, limit {row['limit']:,})"
        lines.append(clip(title, width))
        if "totals" not in row:
            continue  # a Redis limiter: no totals, only its keys
        for name, f in zip(fields, snap["fields"], strict=True):
            rate = row["rates"][f]
            rate_text = number(rate, NUMBER_CELLS - 2) + "/s"
            text = (f"    {pad(name, field_cells)} {number(row['totals'][f]):>{NUMBER_CELLS}}"
                    f"  {rate_text:>{NUMBER_CELLS}}  ")  # fmt: skip
            room = width - len(text)
            lines.append(text + sparkline(row["series"][f], room) if room >= 8 else text.rstrip())
    if snap.get("stats"):
        lines += _limiter_keys([snap["stats"]], width)
    elif snap.get("top"):
        by = f" by {safe(snap['top_field'])}" if len(fields) > 1 else ""
        lines.append(clip(f"  busiest keys{by} ({snap['keys']:,} live):", width))
        if isinstance(snap["top"][0], dict):
            lines += _limiter_keys(snap["top"], width)
        else:
            room = width - 4 - NUMBER_CELLS - 2
            lines += [f"    {number(v):>{NUMBER_CELLS}}  {clip_middle(safe(k), room)}"
                      for k, v in snap["top"]]  # fmt: skip
    return [clip(line, width) for line in lines]


def _limiter_keys(entries: list[dict[str, Any]], width: int) -> list[str]:
    """A table: one row per key, per rate its used / remaining / seconds to reset."""
    group = sum(_RATE_GROUP)
    rates = entries[0]["rates"]
    fit = max(1, min(len(rates), (width - 4 - KEY_MIN_CELLS) // group))
    key_cells = max(KEY_MIN_CELLS, min(width - 4 - fit * group, max(len(safe(e["key"])) for e in entries)))
    top = " " * (4 + key_cells) + "".join(pad(f"  {r['rate']}", group) for r in rates[:fit])
    used, left, reset = _RATE_GROUP
    head = "    " + pad("KEY", key_cells) + f"{'USED':>{used}}{'LEFT':>{left}}{'RESET':>{reset}}" * fit
    lines = [top, head]
    for e in entries:
        row = "    " + pad(clip_middle(safe(e["key"]), key_cells), key_cells)
        for r in e["rates"][:fit]:
            row += f"{number(r['used'], _RATE_GROUP[0] - 1):>{_RATE_GROUP[0]}}"
            row += f"{number(r['remaining'], _RATE_GROUP[1] - 1):>{_RATE_GROUP[1]}}"
            row += f"{human_s(r['reset_s']) if r['used'] else '-':>{_RATE_GROUP[2]}}"
        lines.append(row)
    if fit < len(rates):
        lines.append(f"    (+{len(rates) - fit} more rates: widen the terminal, or use --json)")
    return [clip(line, width) for line in lines]


LS_COLUMNS = [
    Column("NAME", keep=9, min_width=12, shrink=5),
    Column("KIND", keep=9),
    Column("FIELDS/RATES", keep=3, min_width=12, shrink=0),
    Column("RESOLUTIONS", keep=2),
    Column("SIZE", ">", keep=9),
    Column("KEYS", ">", keep=6),
    Column("PROCS", ">", keep=8),
    Column("STRIPES", ">", keep=1),
    Column("CREATOR", ">", keep=0),
    Column("AGE", ">", keep=4),
    Column("IDLE", ">", keep=7),
]


def ls_lines(rows: list[Info], usage: ShmUsage | None, width: int, reason: str = "") -> list[str]:
    """The ``ls`` table, one line per window, then /dev/shm's use."""
    if not rows:
        lines = ["no shmwin windows on this host"]
    else:
        lines = table(LS_COLUMNS, [_ls_row(r) for r in rows if not r.error], width)
        for r in rows:
            if r.error:
                text = f"{safe(r.name)}  unreadable ({human_bytes(r.allocated_bytes)}): {safe(r.error)}"
                lines.append(clip(text, width))
    if usage is not None:
        windows = f"{usage.windows} window{'' if usage.windows == 1 else 's'}"
        free = f"{human_bytes(usage.free_bytes)} free of {human_bytes(usage.size_bytes)}"
        taken = f"{human_bytes(usage.windows_bytes)}; {human_bytes(usage.used_bytes)} used"
        lines.append(clip(f"/dev/shm: {windows} take {taken}, {free}", width))
    if reason:
        lines.append(clip(f"PROCS n+: at least n; {reason}", width))
    return lines


def _ls_row(r: Info) -> list[str]:
    keys = "-" if r.keys is None else f"{r.keys:,}" + (f"/{r.capacity:,}" if r.capacity else "")
    procs = "?" if r.attached is None else f"{r.attached}{'' if r.attached_complete else '+'}"
    stripes = "-" if r.stripes is None else f"{r.stripes_in_use}/{r.stripes}"
    creator = f"{r.creator_pid} {'alive' if r.creator_alive else 'dead'}"
    what = ",".join(r.rates) if r.rates else ",".join(r.fields)
    return [
        safe(r.name), r.kind, safe(what), " ".join(r.resolutions), human_bytes(r.allocated_bytes),
        keys, procs, stripes, creator, human_s(r.age_s), human_s(r.idle_s),
    ]  # fmt: skip
