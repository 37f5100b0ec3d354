"""What ``show``, ``watch`` and ``ls`` print: snapshots as lines of at most ``width`` cells."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..inspector.snapshots import Info, ShmUsage
from ..rate import NS_PER_S, format_ns
from .text import Column, clip, clip_middle, human_bytes, human_s, number, pad, safe, sparkline, table

NUMBER_CELLS = 14
KEY_MIN_CELLS = 16
_RATE_GROUP = (8, 8, 9)  # USED, LEFT, RESET


def window_lines(snap: dict[str, Any], width: int) -> list[str]:
    """One window or limiter: per ring, each field's total, rate and sparkline; then the
    busiest keys (for a limiter: used / remaining / reset against each rate)."""
    role = snap.get("role")
    head = f"{safe(snap['name'])} ({ROLE_TITLES.get(role, role) if role else snap['kind']})"
    if snap.get("key") is not None:
        head += f"  key={safe(snap['key'])!r}"
    lines = [clip(head, width)]
    if role and snap.get(role):
        lines += ROLE_LINES[role](snap[role])
        if role != "concurrency" and "value" in snap and "value" in snap[role]:  # one key of a counter role
            lines.append(clip(f"  {snap[role]['value']}: {snap['value']:,}", width))
    if snap.get("decisions"):
        lines.append(clip(_decided(snap["decisions"]), width))
    if snap.get("fallback"):
        lines.append(clip(_fallback(snap["fallback"]), width))
    if snap.get("live"):
        lines.append(clip(_live(snap["live"], LIVE_WORDS.get(role or "", "rates")), width))
    if role == "concurrency" and "value" in snap:  # show --key
        lines.append(clip(f"  {snap['value']:,} of its {snap[role]['limit']:,} slots held now", width))
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
            series = row["series"].get(f, [])  # none for an exact limiter's log of hit times
            lines.append(text + sparkline(series, room) if room >= 8 and series else text.rstrip())
    if snap.get("full"):
        text = f"  full: {snap['full']:,} requests met a full key table (on_full answered them)"
        lines.append(clip(text, width))
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


# -- breakers, shedders, adaptive limiters: a few lines under the name ---------------------------

# the others go by their role's name
ROLE_TITLES = {
    "adaptive": "adaptive limiter",
    "fixed-starts": "fixed-window starts",
    "fixed-window": "limits' fixed windows",
    "sliding-counter": "limits' sliding window counters",
    "concurrency": "per-key concurrency",
    "token-bucket": "token bucket",
    "moving-log": "limits' moving windows",
    "lease": "two-tier limiter (shm+redis://): this host's leases",
    "counter-cache": "Django's counters (ShmwinCounterCache)",
}


def _fallback(f: dict[str, Any]) -> str:
    """A limiter's local share on this host (on_error="local"): active since when, or when last."""
    at = "%Y-%m-%d %H:%M:%S"
    since, last = time.strftime(at, time.localtime(f["since"])), time.strftime(at, time.localtime(f["last"]))
    if f["active"]:
        return (f"  fallback: ACTIVE since {since} (this host's local share: the backend is away; "
                f"{f['failures']:,} calls met it away in the last minute)")  # fmt: skip
    return f"  fallback: inactive (last active {since} to {last})"


LIVE_WORDS = {"token-bucket": "rate and burst", "concurrency": "limit"}  # what changes live; else rates


def _live(live: dict[str, Any], what: str = "rates") -> str:
    """A limiter's rates (a token bucket's rate and burst, a concurrency's limit): as created,
    or changed live (``shmwin set``, an open with others)."""
    if live["moved"]:
        return f"  {what}: changed; this segment was replaced under its name (show it again)"
    if not live["changes"]:
        return f"  {what}: as created (never changed live)"
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(live["changed"]))
    times = "once" if live["changes"] == 1 else f"{live['changes']:,} times"
    return f"  {what}: changed live {times}, last at {at}"


def _breaker(b: dict[str, Any]) -> list[str]:
    return [
        f"  drop ratio {b['drop_ratio']:.3f}   accepts {b['accepts']:,}   total {b['total']:,}"
        f" over {_span(b['window_s'])} (failures {b['failures']:,}, drops {b['drops']:,})",
        f"  with k {b['k']:g} and protection {b['protection']}: the defaults (each process has its own)",
    ]


def _shedder(v: dict[str, Any]) -> list[str]:
    min_rt = "-" if v["min_rt_ms"] is None else f"{v['min_rt_ms']:,.3f}ms"
    capacity = f"max pass {v['max_pass']:,} per {_span(v['bucket_s'])} × min RT {min_rt}"
    recent = f"{v['recent_drops']:,} in the last {_span(v['cool_off_s'])}"
    threshold = f"{v['cpu_threshold'] / 10:g}%"
    if v["cpu"] is None:
        cpu = f"host cpu not measured (sheds from {threshold}, and in a cool-off after a drop)"
    elif v["cpu"] >= v["cpu_threshold"]:
        cpu = f"host cpu {v['cpu'] / 10:.1f}%: hot, max in flight × {v['overload_factor']:.2f} now"
    else:
        cooling = "; a worker that dropped is in its cool-off" if v["recent_drops"] else ""
        cpu = f"host cpu {v['cpu'] / 10:.1f}% (sheds from {threshold}){cooling}"
    return [
        f"  in flight {_in_flight(v)}",
        f"  max in flight {v['max_in_flight']:,.2f} = {capacity}",
        f"  passes {v['passes']:,}   drops {v['drops']:,} over {_span(v['window_s'])} ({recent})",
        f"  {cpu}",
    ]


def _in_flight(v: dict[str, Any]) -> str:
    """Requests in flight on live processes, and each one's: "5 in 2 processes (pid 1: 3, pid 2: 2)"."""
    if v["in_flight"] is None:
        return "unknown (no in-flight window)"
    procs = v["processes"]
    each = ", ".join(f"pid {pid}: {n:,}" for pid, n in procs)
    return f"{v['in_flight']:,} in {len(procs)} process{'' if len(procs) == 1 else 'es'}" + (
        f" ({each})" if procs else ""
    )


def _adaptive(a: dict[str, Any]) -> list[str]:
    pairs = zip(a["rates"], a["effective"], strict=True)
    now = [f"{n:,}/{rate.partition('/')[2]} of {rate}" for rate, n in pairs]
    seen = a["ok"] + a["errors"]
    return [
        f"  effective now {', '.join(now)} (× {a['factor']:.2f})",
        f"  errors {a['error_ratio']:.1%} of {seen:,} outcomes in {safe(a['name'])}.health"
        f" (ok {a['ok']:,}, error {a['errors']:,})",
        f"  counted below in units: {a['scale']:,} per hit at the full rate, {a['cost']:,} now",
    ]


def _decided(d: dict[str, Any]) -> str:
    """A limiter's or token bucket's decisions, one line."""
    return (f"  decisions over {_span(d['period_s'])}: admitted {d['admitted']:,}"
            f" ({d['near_limit']:,} near the limit), rejected {d['rejected']:,}")  # fmt: skip


def _counters(v: dict[str, Any]) -> list[str]:
    keys = f"{v['keys']:,} key{'' if v['keys'] == 1 else 's'}"
    return [f"  period {_span(v['period_s'])}: {keys} counting, {v['total']:,} in all ({v['value']} per key)"]


def _concurrency(v: dict[str, Any]) -> list[str]:
    keys = f"{v['keys']:,} key{'' if v['keys'] == 1 else 's'}"
    total = f"{v['total']:,} holders in all (live processes)"
    return [f"  limit {v['limit']:,} holders per key: {keys} held, {total}"]


def _tokens(v: dict[str, Any]) -> list[str]:
    keys = f"{v['keys']:,} key{'' if v['keys'] == 1 else 's'}"
    return [
        f"  {v['rate']}, burst {v['burst']:,}: a token every {_span(v['interval_s'])}",
        f"  {keys} below a full bucket, {v['total']:,} token{'' if v['total'] == 1 else 's'} taken in all"
        f" ({v['value']} per key)",
    ]


def _leases(v: dict[str, Any]) -> list[str]:
    keys = f"{v['keys']:,} key{'' if v['keys'] == 1 else 's'}"
    lines = [
        f"  {v['live']:,} lease{'' if v['live'] == 1 else 's'} held now, {v['held']:,} hits unspent; {keys}",
        f"  {v['served']:,} hits served locally; {v['round_trips']:,} round trips to redis"
        f" ({v['leases']:,} leases taken, {v['refusals']:,} refusals)",
    ]
    mine = v.get("key")
    if mine is not None:
        lease = f"lease {mine['spent']:,} of {mine['granted']:,} spent, expires in {mine['expires_s']:.3f}s"
        lines.append(f"  this key: {lease}; served {mine['served']:,}, {mine['leases']:,} leases")
    return lines


def _distribution(v: dict[str, Any]) -> list[str]:
    """Per resolution: count, p50/p90/p99, min, max (values as recorded: seconds, bytes...)."""
    lines = [f"  quantiles within {v['relative_error']:.2%} (relative); count, sum, min and max exact"]
    for row in v["resolutions"]:
        if not row["count"]:
            lines.append(f"  {row['resolution']:<10} count 0")
            continue
        qs = "  ".join(f"{p} {row[p]:.4g}" for p in ("p50", "p90", "p99"))
        lines.append(f"  {row['resolution']:<10} count {row['count']:,}  {qs}  min {row['min']:.4g}"
                     f"  max {row['max']:.4g}")  # fmt: skip
    if v.get("top"):
        lines.append(f"  keys with the most values ({v['keys']:,}), over the longest resolution:")
    for key, count, p50, p99 in v.get("top", []):
        lines.append(f"    {count:>10,}  p50 {p50:.4g}  p99 {p99:.4g}  {safe(str(key))}")
    return lines


def _span(seconds: float) -> str:
    return format_ns(round(seconds * NS_PER_S))


ROLE_LINES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "breaker": _breaker,
    "shedder": _shedder,
    "in-flight": lambda v: [f"  in flight {_in_flight(v)}"],
    "adaptive": _adaptive,
    "health": lambda v: [f"  the health window of adaptive limiter {safe(v['of'])}"],
    "decisions": lambda v: [
        f"  decisions of limiter {safe(v['of'])} over {_span(v['period_s'])}: admitted {v['admitted']:,}"
        f" ({v['near_limit']:,} near the limit), rejected {v['rejected']:,}"
    ],
    "fixed-window": lambda v: _counters(v),
    "sliding-counter": lambda v: _counters(v),
    "concurrency": _concurrency,
    "token-bucket": _tokens,
    "moving-log": lambda v: _counters(v),
    "counter-cache": lambda v: _counters(v),
    "lease": _leases,
    "distribution": _distribution,
    "fixed-starts": lambda v: [
        f"  start times of limits' fixed windows, {v['records']:,} records (times, not counts)",
        f"  the counts are in {safe(v['counts'])}",
    ],
}


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
    Column("FULL", ">", keep=5),
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
    full = "-" if r.full is None else f"{r.full:,}"
    what = ",".join(r.rates) if r.rates else ",".join(r.fields)
    return [
        safe(r.name), r.role or r.kind, safe(what), " ".join(r.resolutions), human_bytes(r.allocated_bytes),
        keys, full, procs, stripes, creator, human_s(r.age_s), human_s(r.idle_s),
    ]  # fmt: skip
