"""The prometheus_client collector: what it exports, and that it does not grow."""

from __future__ import annotations

import multiprocessing as mp

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from shmwin import Window
from shmwin.integrations.prometheus import ShmwinCollector


def _scrape(names) -> dict[tuple, float]:
    registry = CollectorRegistry()
    registry.register(ShmwinCollector(names))
    text = generate_latest(registry).decode()
    return {
        (f.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def _worker(name: str) -> None:
    w = Window.attach(name)
    w.add(10, "ok")
    w.close()


def test_totals_and_no_growth_when_workers_are_recycled(name):
    with Window(name, resolutions=("1m/1s", "1h/1m"), fields=("ok", "err")) as w:
        w.add(1, "err")
        ctx = mp.get_context("fork")
        first = None
        for round_ in range(3):  # each round: 4 short-lived workers, as gunicorn recycles them
            procs = [ctx.Process(target=_worker, args=(name,)) for _ in range(4)]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            scraped = _scrape([name])
            if first is None:
                first = set(scraped)
            assert set(scraped) == first  # the same series, however many workers came and went
            total = ("shmwin_window_total", (("field", "ok"), ("resolution", "1h/1m"), ("window", name)))
            assert scraped[total] == 40 * (round_ + 1) == w.total("ok")
        assert len(first) == 2 * 2 * 2  # total + rate, 2 fields, 2 resolutions
        w.unlink()


def test_missing_windows_are_skipped(name):
    assert _scrape([name]) == {}
