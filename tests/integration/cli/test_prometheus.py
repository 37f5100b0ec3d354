"""The Prometheus exposition: one renderer for the collector and `shmwin export`, clean
for promtool, gauges with consistent labels, bounded per-key series, no growth."""

from __future__ import annotations

import multiprocessing as mp
import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.cli_support import cli, promtool_check

from shmwin import Breaker, Limiter, Window
from shmwin.integrations.prometheus import FAMILIES, MAX_TOP_KEYS, ShmwinCollector, exposition
from shmwin.overload.adaptive import AdaptiveLimiter
from shmwin.overload.shedder import Shedder


def _scrape_text(names, **how) -> str:
    registry = CollectorRegistry()
    registry.register(ShmwinCollector(names, **how))
    return generate_latest(registry).decode()


def _scrape(names, **how) -> dict[tuple, float]:
    return {
        (f.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(_scrape_text(names, **how))
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
            total = ("shmwin_window_value", (("field", "ok"), ("resolution", "1h/1m"), ("window", name)))
            assert scraped[total] == 40 * (round_ + 1) == w.total("ok")
        values = [k for k in first if k[0] in ("shmwin_window_value", "shmwin_window_rate_per_second")]
        assert len(values) == 2 * 2 * 2  # value + rate, 2 fields, 2 resolutions
        assert {k[0] for k in first} == {
            "shmwin_window_value", "shmwin_window_rate_per_second", "shmwin_window_info",
            "shmwin_window_size_bytes", "shmwin_window_readable",
        }  # fmt: skip
        w.unlink()


def test_missing_windows_are_skipped(name):
    assert _scrape([name]) == {}


@pytest.fixture
def mixed(make_name):
    """A window of two resolutions, a keyed window, a float window, a two-rate limiter, a
    breaker, a shedder with a request in flight and an adaptive limiter."""
    names = [make_name(s) for s in ("plain", "routes", "float", "login", "breaker", "shedder", "adaptive")]
    plain = Window(names[0], resolutions=("1m/1s", "1h/1m"), fields=("ok", "err"))
    routes = Window(names[1], fields=("req", "bytes"), capacity=64)
    floats = Window(names[2], dtype="float64")
    login = Limiter(names[3], "5/minute;100/hour")
    breaker = Breaker(names[4], window="1h", buckets=60)  # an hour: the scrapes see the same counts
    shedder = Shedder(names[5], window="1h", buckets=60, cpu=lambda: 0)
    adaptive = AdaptiveLimiter(names[6], "10/second")
    plain.add(3, "ok")
    floats.add(2.5)
    for i in range(12):
        routes.add(i + 1, "req", key=f"GET /r{i}")
        routes.add(100, "bytes", key=f"GET /r{i}")
        login.hit(f"10.0.0.{i % 3}")
    for _ in range(4):
        breaker.accept()
    breaker.reject()
    ticket = shedder.allow()
    yield names
    assert ticket is not None
    ticket.done()
    for x in (plain, routes, floats, login, breaker, shedder, adaptive):
        x.unlink()
        x.close()


def test_promtool_accepts_the_collector_and_export_and_they_are_one_renderer(mixed):
    pattern = mixed[0].rsplit("-", 1)[0] + "-*"
    for top_keys in (0, 5):
        scraped = _scrape_text([pattern], top_keys=top_keys)
        exported = cli("export", pattern, "--format", "prometheus", "--top", str(top_keys)).stdout
        promtool_check(scraped)
        promtool_check(exported)
        assert _same_but_rates(exported, scraped)
        assert _same_but_rates(exposition([pattern], top_keys=top_keys), scraped)


def _same_but_rates(a: str, b: str) -> bool:
    """Byte for byte the same text, but for rate values (time passes between two scrapes)."""
    rate = re.compile(r"^(shmwin_(?:window|key)_rate_per_second\{[^}]*\}) .*$", re.MULTILINE)
    return rate.sub(r"\1 R", a) == rate.sub(r"\1 R", b)


def test_names_types_and_labels_follow_the_conventions(mixed):
    plain, routes, floats, login, breaker, shedder, adaptive = mixed
    families = list(text_string_to_metric_families(_scrape_text(mixed, top_keys=3)))
    # one counter (it only goes up): the requests that met a full key table; the rest are gauges
    counters = {f.name: f.type for f in families if f.type != "gauge"}
    assert counters == {"shmwin_window_full_requests": "counter"}
    assert not any(f.name.endswith("_total") for f in families)  # a counter's samples end in _total
    full = next(f for f in families if f.name == "shmwin_window_full_requests")
    assert {s.name for s in full.samples} == {"shmwin_window_full_requests_total"}
    for f in families:
        for s in f.samples:  # every sample has every label of its family, in one (sorted) order
            assert list(s.labels) == sorted(FAMILIES[f.name][1])
            if "resolution" in s.labels:  # one style for windows and limiters alike
                assert re.fullmatch(r"\d+[a-z]+/\d+[a-z]+", s.labels["resolution"]), s.labels
    by = {}
    for f in families:
        for s in f.samples:
            by[(f.name, tuple(s.labels[k] for k in FAMILIES[f.name][1]))] = s.value
    assert by[("shmwin_limiter_limit", (login, "1m/3s"))] == 5
    assert by[("shmwin_limiter_limit", (login, "1h/3m"))] == 100
    assert by[("shmwin_window_value", (login, "1m/3s", "hits"))] == 12
    assert by[("shmwin_window_value", (plain, "1h/1m", "ok"))] == 3
    assert by[("shmwin_window_value", (floats, "1m/1s", "count"))] == 2.5
    assert by[("shmwin_window_keys", (routes,))] == 12
    assert by[("shmwin_window_info", (login, "limiter", "locked", "int64"))] == 1
    assert by[("shmwin_window_size_bytes", (plain,))] > 0
    assert by[("shmwin_breaker_drop_ratio", (breaker,))] == 0.0  # 5 calls: within its protection
    outcomes = ("accepted", "failed", "dropped")  # their sum is the total
    assert [by[("shmwin_breaker_requests", (breaker, o))] for o in outcomes] == [4, 1, 0]
    assert by[("shmwin_shedder_in_flight", (shedder,))] == 1  # this process's open ticket
    assert by[("shmwin_shedder_passes", (shedder,))] == by[("shmwin_shedder_drops", (shedder,))] == 0
    assert by[("shmwin_shedder_max_in_flight", (shedder,))] == 1  # nothing served: max(1, ...)
    assert ("shmwin_shedder_min_rt_seconds", (shedder,)) not in by  # nothing served: no min RT
    assert by[("shmwin_adaptive_limit", (adaptive, "1s/50ms"))] == 10
    assert by[("shmwin_adaptive_factor", (adaptive,))] == 1
    for role in ("breaker", "shedder", "adaptive"):  # beside the series every window has
        assert any(n.startswith(f"shmwin_{role}_") for n, _ in by)
    assert by[("shmwin_window_value", (breaker, "1h/1m", "accepts"))] == 4


def test_per_key_series_are_opt_in_and_bounded(mixed):
    _, routes, _, login, *_ = mixed
    none = _scrape([routes, login])
    assert not any(k[0].startswith("shmwin_key_") for k in none)
    some = _scrape([routes, login], top_keys=4)
    keys = {dict(k[1])["key"] for k in some if k[0] == "shmwin_key_value" and dict(k[1])["window"] == routes}
    assert keys == {"GET /r11", "GET /r10", "GET /r9", "GET /r8"}  # the busiest four by "req"
    per_key = [k for k in some if k[0] == "shmwin_key_value" and dict(k[1])["window"] == routes]
    assert len(per_key) == 4 * 2  # 4 keys x 2 fields x 1 resolution
    value = (("field", "req"), ("key", "GET /r11"), ("resolution", "1m/1s"), ("window", routes))
    assert some[("shmwin_key_value", value)] == 12
    hits = (("field", "hits"), ("key", "10.0.0.0"), ("resolution", "1m/3s"), ("window", login))
    assert some[("shmwin_key_value", hits)] == 4
    for bad in (-1, MAX_TOP_KEYS + 1, True, 2.0):
        with pytest.raises(ValueError, match="top_keys"):
            ShmwinCollector(top_keys=bad)


def test_registering_reads_nothing_and_a_junk_segment_is_reported(make_name):
    import shmwin

    junk = make_name("junk")
    registry = CollectorRegistry()  # auto_describe: describe() is called on register
    registry.register(ShmwinCollector([junk]))
    with open(shmwin.backends.shm.segment.path_of(junk), "wb") as f:
        f.write(b"\x07" * 4096)
    text = generate_latest(registry).decode()
    assert f'shmwin_window_readable{{window="{junk}"}} 0.0' in text
    promtool_check(text)
    shmwin.unlink(junk)


def test_limits_counters_export_each_keys_value(make_name):
    """A shm:// storage's fixed windows and sliding counters hold per-key state (their roles
    say so): the export gives the keys counting, their sum and the busiest keys' values."""
    pytest.importorskip("limits")
    from limits import RateLimitItemPerMinute
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES

    import shmwin.integrations.limits  # registers shm://

    prefix = make_name("lim")
    storage, item = storage_from_string(f"shm://{prefix}"), RateLimitItemPerMinute(5)
    try:
        for strategy in ("fixed-window", "sliding-window-counter"):
            for who in ("a", "a", "a", "b"):
                STRATEGIES[strategy](storage).hit(item, who)
        names = [f"{prefix}.fixed.1m", f"{prefix}.sliding.1m"]
        by = _scrape(names, top_keys=1)
        for window in names:
            assert by[("shmwin_window_keys", (("window", window),))] == 2
            total = (("field", "hits"), ("resolution", "1m"), ("window", window))
            assert by[("shmwin_window_value", total)] == 4
            top = (("field", "hits"), ("key", item.key_for("a")), ("resolution", "1m"), ("window", window))
            assert by[("shmwin_key_value", top)] == 3
            assert [k for k in by if k[0] == "shmwin_key_value" and dict(k[1])["window"] == window] == [
                ("shmwin_key_value", top)
            ]
    finally:
        storage.segments.close()
        for n in storage.segments.names():
            shmwin.unlink(n)


def test_keys_spelled_alike_each_get_their_own_series(make_name):
    """A str key and a bytes key with the same text ("abc", b"abc"; "\\xff" spelled out and the
    byte 0xff) are two keys: two series, each with its own count (one of each pair was dropped,
    its count lost from the export: red team rtwin)."""
    name = make_name("w")
    with Window(name, span=10, buckets=10, keyed=True) as w:
        for n, key in enumerate(["abc", b"abc", "\\xff", b"\xff", 'a"b\nc'], start=1):
            w.add(n, key=key)
        values = sorted(v for (metric, labels), v in _scrape([name], top_keys=10).items()
                        if metric == "shmwin_key_value")  # fmt: skip
        assert values == [1.0, 2.0, 3.0, 4.0, 5.0]
        w.unlink()
