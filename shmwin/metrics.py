"""What the inspector and the exporters show: read-only snapshots of windows.

Everything here reads without taking a lock (a worker never waits on the
inspector) and never writes. A segment that cannot be read is reported with
the reason instead of raising.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import owners
from .duration import NS_PER_S, format_ns
from .errors import ShmwinError
from .rate import Rate
from .segment import names, path_of
from .window import Window


@dataclass
class Info:
    """One line of ``shmwin ls``."""

    name: str
    kind: str = "?"
    fields: list[str] = field(default_factory=list)
    resolutions: list[str] = field(default_factory=list)
    mode: str = "?"
    nbytes: int = 0
    keys: int | None = None
    capacity: int | None = None
    stripes_in_use: int | None = None
    stripes: int | None = None
    creator_pid: int = 0
    creator_alive: bool = False
    age_s: float = 0.0
    idle_s: float | None = None
    span_s: float = 0.0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def open_window(name: str) -> Window:
    """Attach for reading; raises ShmwinError (or FileNotFoundError) with the reason."""
    return Window.attach(name, ready_timeout=0.5)


def info(name: str) -> Info:
    """Describe one segment; unreadable ones come back with ``error`` set."""
    try:
        w = open_window(name)
    except (ShmwinError, OSError) as exc:
        size = _file_size(name)
        return Info(name, nbytes=size, error=f"{type(exc).__name__}: {exc}")
    try:
        g, now_ns = w.geometry, time.monotonic_ns()
        live = [o for o in w.stripe_owners() if o[2]]
        return Info(
            name=name,
            kind=g.kind,
            fields=list(g.fields),
            resolutions=labels(w),
            mode=g.mode,
            nbytes=w.nbytes,
            keys=len(w.keys()) if g.keyed else None,
            capacity=g.capacity or None,
            stripes_in_use=len(live) if g.mode == "striped" else None,
            stripes=g.n_stripes if g.mode == "striped" else None,
            creator_pid=w.meta.creator_pid,
            creator_alive=owners.pid_alive(w.meta.creator_pid),
            age_s=(now_ns - w.meta.created_mono_ns) / NS_PER_S,
            idle_s=_idle_s(w, now_ns),
            span_s=g.span_ns / NS_PER_S,
        )
    finally:
        w.close()


def infos() -> list[Info]:
    return [info(name) for name in names()]


def _idle_s(w: Window, now_ns: int) -> float | None:
    """Seconds since the newest write, at least (None: never written).

    Every write stamps every ring, so the finest ring's newest epoch is the bucket
    of the last write; measuring from that bucket's *end* never overstates idleness,
    which is what makes ``gc`` safe.
    """
    newest = w.last_write_ns()
    return None if newest is None else max(now_ns - newest, 0) / NS_PER_S


def _file_size(name: str) -> int:
    try:
        return os.stat(path_of(name)).st_size
    except (OSError, ValueError):
        return 0


def labels(w: Window) -> list[str]:
    """What each ring is called: "1m/1s" for a window's resolutions, "5/minute" for a limiter's rates."""
    if w.geometry.kind == "limiter":
        return [str(Rate(r.limit, r.bucket_ns * (r.n_buckets - 1))) for r in w.geometry.rings]
    return w.resolutions


def snapshot(w: Window, key: str | None = None, last: str | None = None, top: int = 10) -> dict[str, Any]:
    """Totals, rates and series per field for each resolution (or only over ``last``)."""
    g = w.geometry
    out: dict[str, Any] = {"name": w.name, "kind": g.kind, "fields": list(g.fields), "key": key}
    indexes = [w.resolution_for(last)] if last else range(len(g.rings))
    out["resolutions"] = [
        {
            "resolution": labels(w)[i],
            "last": last or format_ns(g.rings[i].span_ns),
            "totals": _clean(w.totals(last=last, key=key, resolution=i)),
            "rates": {f: _clean(w.rate(f, last=last, key=key, resolution=i)) for f in g.fields},
            "series": {f: w.series(f, key=key, resolution=i).tolist() for f in g.fields},
        }
        for i in indexes
    ]
    if g.keyed and key is None:
        out["top"] = [[_text(k), _clean(v)] for k, v in w.top(top, g.fields[0])]
        out["keys"] = len(w.keys())
    return out


def _text(key: Any) -> str:
    return key if isinstance(key, str) else bytes(key).decode(errors="replace")


def _clean(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclass
class Sample:
    """One exported number: ``metric{labels} value``."""

    metric: str
    labels: dict[str, str]
    value: float


HELP = {
    "shmwin_window_total": "Sum of a field over the span of one resolution of a shmwin window.",
    "shmwin_window_rate_per_second": "Per-second rate of a field over the span of one resolution.",
}


def samples(w: Window, top: int = 100) -> list[Sample]:
    """Gauges per field x resolution (x key, for the ``top`` busiest keys of a keyed window)."""
    out: list[Sample] = []
    keys: list[Any] = [k for k, _ in w.top(top, w.fields[0])] if w.geometry.keyed else [None]
    for index, label in enumerate(labels(w)):
        for key in keys:
            base = {"window": w.name, "resolution": label}
            if key is not None:
                base["key"] = _text(key)
            for f in w.fields:
                value = w.total(f, key=key, resolution=index)
                rate = w.rate(f, last=None, key=key, resolution=index)
                out.append(Sample("shmwin_window_total", {**base, "field": f}, float(value)))
                out.append(Sample("shmwin_window_rate_per_second", {**base, "field": f}, float(rate)))
    return out


def prometheus_text(all_samples: list[Sample]) -> str:
    """The Prometheus text exposition format (version 0.0.4)."""
    lines: list[str] = []
    for metric in dict.fromkeys(s.metric for s in all_samples):
        lines += [f"# HELP {metric} {HELP.get(metric, metric)}", f"# TYPE {metric} gauge"]
        for s in all_samples:
            if s.metric == metric:
                labels = ",".join(f'{k}="{_escape(v)}"' for k, v in s.labels.items())
                lines.append(f"{metric}{{{labels}}} {_number(s.value)}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))
