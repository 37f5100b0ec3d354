"""shmwin's windowed Summary (integrations/prometheus_summary.py) beside prometheus_client's
values in shmwin's mode: observed in forked workers, its quantiles, _count and _sum come out of
the app's MultiProcessCollector, from any process."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from support.metrics import samples

import shmwin.integrations.prometheus as shp

pytestmark = [pytest.mark.integration]


def _observe(app: str, values: list[float]) -> None:
    s = shp.Summary("latency_seconds", "Latency", ["route"], app=app, registry=None)
    for v in values:
        s.labels("/users").observe(v)
    s.close()


def test_the_collector_exports_the_summary_of_every_worker(app):
    shp.multiprocess(app)
    rng = np.random.default_rng(7)
    parts = [list(rng.lognormal(-4, 1, 500)) for _ in range(3)]
    workers = [mp.get_context("fork").Process(target=_observe, args=(app, part)) for part in parts]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    try:
        got = samples(app)
        values = np.concatenate(parts)
        route = (("route", "/users"),)
        assert got[("latency_seconds_count", route)] == 1500
        assert got[("latency_seconds_sum", route)] == pytest.approx(values.sum())
        p99 = got[("latency_seconds", (("quantile", "0.99"), *route))]
        assert p99 == pytest.approx(np.quantile(values, 0.99, method="lower"), rel=0.011)
    finally:
        shp.Summary("latency_seconds", "Latency", ["route"], app=app, registry=None).unlink()
