"""A prometheus_client ``Summary`` with quantiles, shared by every process of an app.

    from shmwin.integrations.prometheus_summary import Summary
    LAT = Summary("http_request_seconds", "Latency", ["route"], app="myapp")
    LAT.labels("/users").observe(0.012)
    with LAT.labels("/orders").time():
        ...

prometheus_client's own Summary keeps a count and a sum, no quantiles ("the Python client does
not compute quantiles locally"). This one is registered and exposed like it (``observe()``,
``.time()``, ``labels()``; a collector in ``registry``) and keeps its values in a
:class:`shmwin.Distribution` named ``APP.summary.NAME=LABEL+LABEL``: every process of the app
records into the same buckets, and a scrape from any of them (or ``collect_summaries(app)``,
which ``MultiProcessCollector(registry, app)`` calls) reads them all once:

- ``NAME{quantile="q"}``: over the last ``max_age`` seconds (in 10 age buckets, as the Go
  client's ``MaxAge`` and ``AgeBuckets``), within the distribution's relative error (1 %);
- ``NAME_count`` and ``NAME_sum``: every observation since the segment was made (a second
  resolution of one bucket of 4,000 days), exact, as prometheus_client's are cumulative.

Limits: observations are finite and >= 0 (a negative one is a ValueError, where
prometheus_client would take it); a label set is stored whole as its key (the values joined
by U+001F), at most 32 bytes of UTF-8, else a ValueError; a process that did not register the
Summary exports it with a generic HELP text (the segment keeps no documentation).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import SummaryMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString as _go_float

from ..backends.shm.roles.distribution import DistributionEngine, check_quantile, quantiles_of
from ..backends.shm.segment import names as shm_names
from ..distribution import Distribution
from ..errors import ShmwinError, WindowNotFoundError
from ..rate import format_ns, to_ns

SEP = "\x1f"  # between label values in a key
# a keyed row keeps a key of at most this many bytes whole (format.MAX_STORED_KEY; longer ones
# keep a prefix and a digest, which no other process could read back as label values)
MAX_STORED_KEY = 32
LIFETIME = "4000d"  # the cumulative resolution: one bucket, 11 years (a ring spans < 2**60 ns)
AGE_BUCKETS = 10
_DEFAULT_QUANTILES = (0.5, 0.9, 0.99)


def _quantile_text(q: float) -> str:
    """A quantile label as prometheus_client writes one ("0.5", "0.99")."""
    return str(_go_float(q))  # type: ignore[no-untyped-call]


def segment_name(app: str, name: str, labelnames: Sequence[str]) -> str:
    """``APP.summary.NAME=LABEL+LABEL``: the app, the metric and its label names, which any
    process reads back from the name alone."""
    return f"{app}.summary.{name}" + (f"={'+'.join(labelnames)}" if labelnames else "")


def _parse_segment(app: str, segment: str) -> tuple[str, tuple[str, ...]] | None:
    prefix = f"{app}.summary."
    if not segment.startswith(prefix):
        return None
    metric, _, labels = segment[len(prefix) :].partition("=")
    return metric, tuple(labels.split("+")) if labels else ()


def _resolutions(max_age: float) -> tuple[str, str]:
    span_ns = to_ns(max_age, "max_age")
    if span_ns % AGE_BUCKETS or span_ns <= 0:
        raise ValueError(f"max_age must be a positive duration of whole 10 ns, not {max_age!r}")
    return f"{format_ns(span_ns)}/{format_ns(span_ns // AGE_BUCKETS)}", f"{LIFETIME}/{LIFETIME}"


class _Child:
    """One label set: ``observe(v)`` and ``time()``."""

    def __init__(self, dist: Distribution, key: str | None):
        self._record, self._key = dist.record, key

    def observe(self, amount: float) -> None:
        """Record ``amount`` (finite, >= 0): one native call."""
        if self._key is None:
            self._record(amount)
        else:
            self._record(amount, key=self._key)

    def time(self) -> _Timer:
        """A context manager and decorator observing the seconds it took."""
        return _Timer(self.observe)


class _Timer:
    def __init__(self, observe: Any):
        self._observe = observe

    def __enter__(self) -> _Timer:
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._observe(max(time.perf_counter() - self._start, 0.0))

    def __call__(self, fn: Any) -> Any:
        import functools

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with _Timer(self._observe):
                return fn(*args, **kwargs)

        return wrapped


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _check_names(name: str, labelnames: Sequence[str]) -> None:
    """Prometheus's spelling of a metric name and its label names (as prometheus_client checks
    them): a clear ValueError, before a segment is named after them."""
    if not isinstance(name, str) or not _METRIC_NAME.fullmatch(name):
        raise ValueError(f"invalid metric name {name!r}: letters, digits, _ and :, not starting with a digit")
    for label in labelnames:
        if not isinstance(label, str) or not _LABEL_NAME.fullmatch(label) or label.startswith("__"):
            raise ValueError(f"invalid label name {label!r}: letters, digits and _, not starting with a "
                             "digit or __")  # fmt: skip


class Summary(Collector):
    """``Summary(name, documentation, labelnames=(), quantiles=(0.5, 0.9, 0.99), max_age=600,
    app=...)``: registered in ``registry`` (prometheus_client's default) like its Summary.
    ``max_label_sets`` (1,024): the label sets it keeps (a segment's capacity, the same in every
    process); one more raises KeyTableFullError."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        app: str,
        quantiles: Sequence[float] = _DEFAULT_QUANTILES,
        max_age: float = 600,
        relative_error: float = 0.01,
        max_label_sets: int = 1024,
        namespace: str = "",
        subsystem: str = "",
        unit: str = "",
        registry: CollectorRegistry | None = REGISTRY,
    ):
        full = "_".join(p for p in (namespace, subsystem, name) if p) + (f"_{unit}" if unit else "")
        if isinstance(labelnames, str):
            labelnames = (labelnames,)
        _check_names(full, labelnames)
        if "quantile" in labelnames:
            raise ValueError("a Summary's label names may not include 'quantile' (its own)")
        self.name, self.documentation, self.labelnames = full, documentation, tuple(labelnames)
        self.quantiles = tuple(check_quantile(q) for q in quantiles)
        self._dist = Distribution(
            segment_name(app, full, self.labelnames), _resolutions(max_age), relative_error=relative_error,
            keyed=bool(self.labelnames), capacity=max_label_sets if self.labelnames else None,
        )  # fmt: skip
        self._children: dict[tuple[str, ...], _Child] = {}
        self._unlabelled = None if self.labelnames else _Child(self._dist, None)
        if registry is not None:
            registry.register(self)

    # -- what prometheus_client's Summary offers ----------------------------------------------

    def labels(self, *values: Any, **named: Any) -> _Child:
        if not self.labelnames:
            raise ValueError(f"summary {self.name!r} has no labels")
        if values and named:
            raise ValueError("labels() takes positional or keyword label values, not both")
        if named:
            if set(named) != set(self.labelnames):
                raise ValueError(
                    f"summary {self.name!r} takes the labels {self.labelnames}, not {sorted(named)}"
                )
            values = tuple(named[n] for n in self.labelnames)
        if len(values) != len(self.labelnames):
            raise ValueError(f"summary {self.name!r} takes {len(self.labelnames)} label values")
        texts = tuple(str(v) for v in values)
        child = self._children.get(texts)
        if child is None:
            child = self._children[texts] = _Child(self._dist, _key_of(texts))
        return child

    def observe(self, amount: float) -> None:
        self._no_labels().observe(amount)

    def time(self) -> _Timer:
        return self._no_labels().time()

    def _no_labels(self) -> _Child:
        if self._unlabelled is None:
            raise ValueError(f"summary {self.name!r} has labels: call .labels(...) first")
        return self._unlabelled

    # -- the collector -----------------------------------------------------------------------

    def describe(self) -> Iterator[SummaryMetricFamily]:
        yield SummaryMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[SummaryMetricFamily]:
        yield summary_family(self._dist, self.name, self.documentation, self.labelnames, self.quantiles)

    def close(self) -> None:
        self._dist.close()

    def unlink(self) -> bool:
        return self._dist.unlink()


def _key_of(values: tuple[str, ...]) -> str:
    if any(SEP in v for v in values):
        raise ValueError("a label value may not hold U+001F (the separator of a stored label set)")
    key = SEP.join(values)
    if len(key.encode()) > MAX_STORED_KEY:
        raise ValueError(
            f"label values {values!r} take {len(key.encode())} bytes; a shmwin Summary stores a label set "
            f"whole in at most {MAX_STORED_KEY} bytes"
        )
    return key


def summary_family(
    dist: Distribution, name: str, documentation: str, labelnames: tuple[str, ...], quantiles: Sequence[float]
) -> SummaryMetricFamily:
    """One scrape of a summary: each label set's quantiles over max_age, count and sum ever."""
    family = SummaryMetricFamily(name, documentation, labels=labelnames)
    max_age = format_ns(dist.geometry.rings[0].span_ns)  # the finest resolution's span (rings: finest first)
    keys: list[Any] = sorted(dist.keys(), key=str) if labelnames else [None]
    for key in keys:
        values = [] if key is None else (key.decode() if isinstance(key, bytes) else key).split(SEP)
        if len(values) != len(labelnames):
            continue  # not a label set this summary stored whole
        ever = dist._merged(LIFETIME, key)
        family.add_metric(values, ever.count, ever.sum)
        recent = dist.quantiles(quantiles, last=max_age, key=key)
        labels = dict(zip(labelnames, values, strict=True))
        for q, v in zip(quantiles, recent, strict=True):
            family.samples.append(Sample(name, {**labels, "quantile": _quantile_text(q)}, v))
    return family


def collect_summaries(
    app: str, quantiles: Sequence[float] = _DEFAULT_QUANTILES
) -> Iterator[SummaryMetricFamily]:
    """Every shmwin Summary of ``app`` on this host, read from shared memory (any process: a
    worker, the master, the CLI). HELP is generic: the segment keeps no documentation."""
    for segment in shm_names():
        parsed = _parse_segment(app, segment)
        if parsed is None:
            continue
        metric, labelnames = parsed
        try:
            dist = Distribution.attach(segment)
        except (WindowNotFoundError, ShmwinError):
            continue
        try:
            yield summary_family(dist, metric, f"{metric} (a shmwin Summary of {app})", labelnames, quantiles)
        finally:
            dist.close()


def add_distribution(families: dict[str, Any], w: Any, labels: list[str]) -> None:
    """The Prometheus export of a distribution segment (:class:`ShmwinCollector`'s, for role
    "distribution"): per resolution a summary (quantile 0.5, 0.9, 0.99; count; sum) and its
    exact min and max as gauges; every key merged."""
    engine = DistributionEngine(w)
    name = w.name
    for i, (label, r) in enumerate(zip(labels, w.geometry.rings, strict=True)):
        m = engine.merged(i, r.n_buckets, None)
        families["shmwin_distribution"].add_metric([name, label], m.count, m.sum)
        values = quantiles_of(engine.sketch, m.bins, _DEFAULT_QUANTILES, m.min, m.max)
        for q, v in zip(_DEFAULT_QUANTILES, values, strict=True):
            if not math.isnan(v):
                families["shmwin_distribution"].samples.append(
                    Sample(
                        "shmwin_distribution",
                        {"window": name, "resolution": label, "quantile": _quantile_text(q)},
                        v,
                    )
                )
        if m.count:
            families["shmwin_distribution_min"].add_metric([name, label], m.min)
            families["shmwin_distribution_max"].add_metric([name, label], m.max)
