"""Fail points at every store of role "series" (core/seriesdir.c, seriesval.c, series.c): its
directory's append ("series_insert") and its index's growth ("series_grow"), a process slot's
claim ("series_claim"), a live gauge entry's adoption ("series_adopt"), a shared cell's CAS add
("series_add") and a gauge cell's write ("series_set"), each struck by SIGKILL and by an
exception. Then, from survivor processes: no lock hangs (a dead inserter's directory lock is
repaired: every whole entry back in the index), no series is in the directory twice, every
confirmed add is counted and the one in flight at most once, a torn gauge write reads as the
old value or the new one. The harness is tests/support/failpoints.py."""

from __future__ import annotations

import json

import pytest
from prometheus_client import Counter, Gauge
from support.failpoints import KILL, SIGNALS, assert_monotone, every_store, in_child, promptly, strike
from support.metrics import samples

import shmwin.integrations.prometheus as shp
from shmwin.backends.shm.roles.series import SeriesStore

pytestmark = [pytest.mark.integration, pytest.mark.failpoints, pytest.mark.sanitize]


def _entries_of(app: str, label: str) -> int:
    """How many directory entries hold the series whose label k is ``label``."""
    store = SeriesStore.attach(app)
    try:
        _, entries = store.entries(0)
        return sum(1 for _, key in entries if json.dumps({"k": label}).encode() in key)
    finally:
        store.close()


def _insert_again(app: str, label: str) -> tuple[float | None, int, float | None, int]:
    """A survivor's view of a struck insert, then its own insert of the same series."""
    before, entries_before = samples(app).get(("c_total", (("k", label),))), _entries_of(app, label)
    promptly(Counter("c", "help", ["k"], registry=None).labels(label).inc)
    return before, entries_before, samples(app)[("c_total", (("k", label),))], _entries_of(app, label)


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_insert(app, sig):
    shp.multiprocess(app)
    c = Counter("c", "help", ["k"], registry=None)
    c.labels("warm").inc()  # the name's meta entry is made: a victim's first insert is its series'
    seen: dict[int, int] = {}

    def strike_at(n: int) -> bool:
        label = f"new{n}"
        with strike("series_insert", n, sig, lambda report: None, lambda _: c.labels(label).inc(),
                    again=lambda _: c.labels(label + "-again").inc()) as s:  # fmt: skip
            before, entries_before, after, entries_after = in_child(_insert_again, app, label)
        assert entries_after == 1, f"store {n}: the series is in the directory {entries_after} times"
        assert before in (None, 0.0, 1.0) and after == (before or 0.0) + 1.0
        assert s.completed <= (entries_before == 1)  # a whole section left its entry
        seen[n] = entries_before
        return s.fired

    assert every_store(strike_at) == 14  # a cell's 4 words, the entry's 6, cells_top, entry_top, index,
    # and the entries word
    assert_monotone(seen, "the entry of a struck insert")
    assert promptly(samples, app)[("c_total", (("k", "warm"),))] == 1.0


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_add(app, sig):
    shp.multiprocess(app)
    c = Counter("c", "help", ["k"], registry=None)

    def confirmed(report) -> None:
        for _ in range(3):
            c.labels("a").inc()  # returned: confirmed

    def strike_at(n: int) -> bool:
        shp.reset(app)
        shp.multiprocess(app)
        nonlocal c
        c = Counter("c", "help", ["k"], registry=None)
        with strike("series_add", n, sig, confirmed, lambda _: c.labels("a").inc()) as s:
            total = in_child(samples, app)[("c_total", (("k", "a"),))]
        assert total == (4.0 if s.fired or s.completed else 3.0)  # the CAS is the one store
        return s.fired

    assert every_store(strike_at) == 1


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_set(app, sig):
    shp.multiprocess(app)
    g = Gauge("g", "help", multiprocess_mode="mostrecent", registry=None)
    seen: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        with strike("series_set", n, sig, lambda report: g.set(1.0), lambda _: g.set(2.0)) as s:
            value = promptly(in_child, samples, app)[("g", ())]  # a torn write never hangs the read
        assert value in (1.0, 2.0), f"store {n}: {value}"
        if s.sig == KILL:
            seen[n] = value == 2.0
        return s.fired

    assert every_store(strike_at) == 4  # sequence odd, value, stamp, sequence even
    assert_monotone(seen, "a struck gauge write")


def _claim_and_read(app: str) -> float:
    promptly(Gauge("g", "help", multiprocess_mode="livesum", registry=None).set, 7.0)
    return samples(app)[("g", ())]


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_claim(app, sig):
    shp.multiprocess(app, slots=3)  # this process, a parked victim, a survivor
    g = Gauge("g", "help", multiprocess_mode="livesum", registry=None)

    def strike_at(n: int) -> bool:
        with strike("series_claim", n, sig, lambda report: None, lambda _: g.set(5.0)) as s:
            total = in_child(_claim_and_read, app)  # a slot is found at once, dead victim's or free
        assert total == (12.0 if not s.fired else 7.0), f"store {n}: livesum {total}"
        return s.fired

    assert every_store(strike_at) == 5


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_adopt(app, sig):
    shp.multiprocess(app, slots=3)  # this process, a victim, a survivor
    g = Gauge("g", "help", multiprocess_mode="livesum", registry=None)

    def strike_at(n: int) -> bool:
        in_child(g.set, 4.0)  # a lifetime that ends, leaving its slot's entry to adopt
        with strike("series_adopt", n, sig, lambda report: None, lambda _: g.set(5.0)) as s:
            total = in_child(_claim_and_read, app)
        # the ended lifetime's 4.0 gone; the victim's 5.0 set only if no fail point stopped it
        assert total == (7.0 if s.fired else 12.0), f"store {n}: livesum {total}"
        return s.fired

    assert every_store(strike_at) == 7  # sequence, value, stamp, sequence, flags, pid, lifetime


def _all_once(app: str, labels: list[str]) -> list[tuple[int, float | None]]:
    """Each label's (directory entries, value), after a survivor inserted "after" too."""
    promptly(Counter("c", "help", ["k"], registry=None).labels("after").inc)
    got = samples(app)
    return [(_entries_of(app, label), got.get(("c_total", (("k", label),)))) for label in labels]


@pytest.mark.parametrize("sig", SIGNALS)
def test_fp_series_grow(make_name, sig):
    first_level = 64 // 2  # entries the first index level takes (half its places)
    apps: list[str] = []

    def strike_at(n: int) -> bool:
        app = make_name(f"grow{n}")
        apps.append(app)
        shp.multiprocess(app)
        c = Counter("c", "help", ["k"], registry=None)
        labels = [str(i) for i in range(first_level - 1)]  # with the name's meta entry: level 0 full
        for label in labels:
            c.labels(label).inc()
        with strike("series_grow", n, sig, lambda report: None, lambda _: c.labels("x").inc()) as s:
            got = in_child(_all_once, app, [*labels, "x", "after"])
        assert got[:-2] == [(1, 1.0)] * len(labels) and got[-1] == (1, 1.0), f"store {n}: {got}"
        assert got[-2] in ((0, None), (1, 0.0), (1, 1.0))  # the struck insert: whole or not at all
        shp.reset(app)
        return s.fired

    try:
        assert every_store(strike_at) == first_level + 1  # every entry into the next level, then the level
    finally:
        for app in apps:
            shp.reset(app)
