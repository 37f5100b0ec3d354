"""prometheus_client's values in shmwin's shared memory, written by real processes: counts exact
under contention, gauge modes over live, exited and SIGKILLed processes, forks, slots reused."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import pytest
from prometheus_client import Counter, Gauge, Histogram
from support.metrics import samples

import shmwin.integrations.prometheus as shp
from shmwin.backends.shm.roles.series import SeriesStore

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # also against the sanitized cores
FORK = mp.get_context("fork")


def _run(target, *args) -> None:
    p = FORK.Process(target=target, args=args)
    p.start()
    p.join(60)
    assert p.exitcode == 0


def test_counters_and_histograms_are_exact_under_contention(app):
    shp.multiprocess(app)
    reqs = Counter("reqs", "Requests", ["route"], registry=None)
    lat = Histogram("lat", "Latency", buckets=(0.1, 1.0), registry=None)
    start = FORK.Event()

    def worker() -> None:
        start.wait(30)
        for i in range(5_000):
            reqs.labels("a").inc()
            lat.observe(0.05 if i % 2 else 0.5)

    procs = [FORK.Process(target=worker) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()  # all four add to the same shared cells at once
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = samples(app)
    assert got[("reqs_total", (("route", "a"),))] == 20_000.0
    assert got[("lat_bucket", (("le", "0.1"),))] == 10_000.0
    assert got[("lat_bucket", (("le", "1.0"),))] == 20_000.0
    assert got[("lat_count", ())] == 20_000.0
    assert got[("lat_sum", ())] == pytest.approx(10_000 * 0.55)


MODES = ("all", "liveall", "min", "livemin", "max", "livemax", "sum", "livesum", "mostrecent",
         "livemostrecent")  # fmt: skip


def test_gauge_modes_over_live_exited_and_killed_processes(app):
    shp.multiprocess(app)
    gauges = {mode: Gauge(f"g_{mode}", "help", multiprocess_mode=mode, registry=None) for mode in MODES}
    for g in gauges.values():
        g.set(5)  # this (live) process: 5, set first

    def exited(value: float) -> None:
        for g in gauges.values():
            g.set(value)

    def killed(value: float, ready) -> None:
        for g in gauges.values():
            g.set(value)
        ready.set()
        signal.pause()

    _run(exited, 1.0)
    ready = FORK.Event()
    victim = FORK.Process(target=killed, args=(9.0, ready))
    victim.start()
    assert ready.wait(30)
    alive = samples(app)
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(30)
    dead = samples(app)
    pids = {os.getpid(), victim.pid}
    assert {int(dict(labels)["pid"]) for (name, labels) in alive if name == "g_liveall"} == pids
    assert alive[("g_livesum", ())] == 14.0 and dead[("g_livesum", ())] == 5.0
    assert alive[("g_livemax", ())] == 9.0 and dead[("g_livemax", ())] == 5.0
    assert alive[("g_livemin", ())] == 5.0 and dead[("g_livemin", ())] == 5.0
    assert alive[("g_livemostrecent", ())] == 9.0 and dead[("g_livemostrecent", ())] == 5.0
    assert {int(dict(labels)["pid"]) for (name, labels) in dead if name == "g_liveall"} == {os.getpid()}
    assert len([1 for (name, _) in dead if name == "g_all"]) == 3  # mode "all" keeps every lifetime
    assert dead[("g_sum", ())] == 15.0 and dead[("g_min", ())] == 1.0 and dead[("g_max", ())] == 9.0
    assert dead[("g_mostrecent", ())] == 9.0  # the latest set(), its writer dead or not


def test_a_forked_child_writes_its_own_gauge_cells(app):
    shp.multiprocess(app)
    g = Gauge("g", "help", multiprocess_mode="all", registry=None)
    g.set(5)
    child_pid = FORK.Value("q", 0)

    def child() -> None:
        child_pid.value = os.getpid()
        assert g._value.get() == 0.0  # a new lifetime starts from zero, as prometheus_client's does
        g.set(7)

    _run(child)
    assert g._value.get() == 5.0
    got = samples(app)
    assert got[("g", (("pid", str(os.getpid())),))] == 5.0
    assert got[("g", (("pid", str(child_pid.value)),))] == 7.0


def test_dead_processes_slots_are_claimed_again(app):
    shp.multiprocess(app, slots=2)  # this process and one more at a time
    g = Gauge("g", "help", multiprocess_mode="livesum", registry=None)
    g.set(1)

    def writer(i: float) -> None:
        g.set(i)

    for i in range(6):  # six lifetimes through one free slot
        _run(writer, float(i))
    assert samples(app)[("g", ())] == 1.0
    store = SeriesStore.attach(app)
    try:  # a live-mode gauge's entry is its slot's: the six lifetimes adopted one, zeroed
        assert sum(1 for _, key in store.entries(0)[1] if key.startswith(b'["gauge"')) == 2
        assert store.usage()["lifetimes"] == 7
    finally:
        store.close()


def test_non_live_gauges_keep_every_lifetime(app):
    shp.multiprocess(app, slots=2)
    g = Gauge("g", "help", multiprocess_mode="sum", registry=None)
    g.set(1)
    for _ in range(3):
        _run(g.set, 2.0)
    assert samples(app)[("g", ())] == 7.0  # as prometheus_client keeps each dead pid's file


def test_mark_process_dead_drops_live_gauges_of_a_pid(app):
    shp.multiprocess(app, process_identifier=lambda: 123)
    g = Gauge("g", "help", multiprocess_mode="liveall", registry=None)
    a = Gauge("a", "help", multiprocess_mode="all", registry=None)
    g.set(1)
    a.set(1)
    assert shp.mark_process_dead(123, app) == 1
    got = samples(app)
    assert ("g", (("pid", "123"),)) not in got and got[("a", (("pid", "123"),))] == 1.0


def test_processes_creating_series_at_once_find_each_others(app):
    """Eight processes create 200 series each (half shared by all) at once: a finder racing an
    insert (an index word newer than the entry_top it read first) and index levels growing
    under it never see junk, and no series is made twice."""
    shp.multiprocess(app)
    c = Counter("c", "help", ["k"], registry=None)
    start = FORK.Event()

    def creator(me: int) -> None:
        start.wait(30)
        for i in range(100):
            c.labels(f"shared{i}").inc()
            c.labels(f"own{me}-{i}").inc()

    procs = [FORK.Process(target=creator, args=(me,)) for me in range(8)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    got = samples(app)
    assert len(got) == 100 + 800 and all(got[("c_total", (("k", f"shared{i}"),))] == 8.0 for i in range(100))
    store = SeriesStore.attach(app)
    try:
        assert store.usage()["cells"] == 900  # each series one cell: none made twice
    finally:
        store.close()
