"""ShmwinCounterCache, a Django cache of int counters in shared memory: django-ratelimit exact
across processes (spawned, and unrelated ``python -c``), add a native set-if-absent, Django's
cache API for int counters, and what it refuses. Expiry is driven by hand (a ManualClock on the
cache's segment, through its engine) or by timeouts of 0."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from support.helpers import run_python

pytest.importorskip("django")
pytest.importorskip("django_ratelimit")

from django_workers import add_once, count_both_orders, ratelimited_requests

from shmwin import ManualClock, Window
from shmwin.backends.shm.roles.cache import CounterCacheEngine, geometry
from shmwin.errors import GeometryMismatchError, KeyTableFullError, ShmwinError
from shmwin.integrations.django import ShmwinCounterCache

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # its native sections under the sanitizers too

S = 1_000_000_000
HERE = os.path.dirname(__file__)

CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
from django_workers import ratelimited_requests
print(ratelimited_requests(sys.argv[1], int(sys.argv[2]), 400))
"""


@pytest.fixture
def cache(name):
    c = ShmwinCounterCache(name, {"TIMEOUT": 60})
    yield c
    c.unlink()


def test_django_ratelimit_admits_exactly_the_limit_across_processes(name):
    """500 an hour, 6 x 400 requests by 4 spawned processes and 2 ``python -c`` ones at once:
    exactly 500 pass (the file cache let 1,717-3,732 of 1,000 through; locmem is per process)."""
    limit = 500
    opener = ShmwinCounterCache(name, {})
    try:
        with multiprocessing.get_context("spawn").Pool(4) as pool:
            spawned = pool.starmap_async(ratelimited_requests, [(name, limit, 400)] * 4)
            unrelated = [run_python(CHILD, name, str(limit), HERE) for _ in range(2)]
            passed = sum(spawned.get(120)) + sum(int(p.stdout) for p in unrelated)
        assert passed == limit
    finally:
        opener.unlink()


def test_add_is_a_native_set_if_absent_one_process_of_many_sets_it(name):
    opener = ShmwinCounterCache(name, {})
    try:
        with multiprocessing.get_context("spawn").Pool(4) as pool:
            won = pool.starmap(add_once, [(name, "k", i) for i in range(16)])
        assert sum(won) == 1
        assert opener.get("k") == won.index(True)
    finally:
        opener.unlink()


def test_every_request_counted_whatever_the_order_of_the_calls(name):
    """2 processes count add-then-incr (django-ratelimit's order), 2 incr-then-add, all on one
    key from its first request: the count is every request, once (the file and database caches,
    whose add is a get then a set, lose some)."""
    opener = ShmwinCounterCache(name, {})
    try:
        with multiprocessing.get_context("spawn").Pool(4) as pool:
            pool.starmap(count_both_orders, [(name, 500, incr_first) for incr_first in (False, True) * 2])
        assert opener.get("hits") == 2000
    finally:
        opener.unlink()


def test_the_django_api_for_int_counters(cache):
    assert cache.add("k", 1) is True and cache.add("k", 5) is False
    assert cache.incr("k") == 2 and cache.incr("k", 10) == 12 and cache.decr("k", 2) == 10
    assert cache.get("k") == 10 and cache.get("missing", "default") == "default"
    assert cache.has_key("k") and not cache.has_key("missing")
    cache.set("a", -3)
    assert cache.get_many(["k", "a", "missing"]) == {"k": 10, "a": -3}
    assert cache.touch("k", 30) is True and cache.touch("missing") is False
    assert cache.delete("a") is True and cache.delete("a") is False and cache.get("a") is None
    assert cache.get_or_set("g", 7) == 7 and cache.get_or_set("g", 8) == 7
    cache.set_many({"m1": 1, "m2": 2})
    cache.delete_many(["m1"])
    assert cache.get_many(["m1", "m2"]) == {"m2": 2}
    assert cache.incr_version("k") == 2 and cache.get("k", version=2) == 10 and cache.get("k") is None
    cache.clear()
    assert cache.get("k", version=2) is None and cache.get("g") is None


def test_a_timeout_of_zero_or_less_stores_a_value_already_expired(cache):
    assert cache.add("k", 1, 0) is True and cache.get("k") is None
    assert cache.add("k", 2, -1) is True and cache.get("k") is None
    cache.set("k", 3)
    assert cache.touch("k", 0) is True and cache.get("k") is None
    with pytest.raises(ValueError, match=r"Key '.*k' not found"):
        cache.incr("k")


def test_values_expire_on_the_clock(name):
    """The native sections by hand: a value lives while now < its expiry; add sets a key again
    once it expired; touch moves the expiry; incr never makes a key."""
    clock = ManualClock(1000 * S)
    w = Window.open_geometry(name, geometry(60 * S, None), clock=clock)
    try:
        counters = CounterCacheEngine(w)
        assert counters.add("k", 1, 10 * S) and counters.incr("k") == 2
        clock.advance(9.999)
        assert counters.get("k") == 2 and not counters.add("k", 7, 10 * S)
        assert counters.touch("k", 5 * S)
        clock.advance(5)
        assert counters.get("k") is None and counters.incr("k") is None
        assert counters.add("k", 7, None) and counters.get("k") == 7  # None: the longest, 60 s
        clock.advance(59.999)
        assert counters.get("k") == 7
        clock.advance(0.001)
        assert counters.get("k") is None
        assert counters.values(clock()) == []
    finally:
        w.unlink()
        w.close()


def test_a_keys_row_is_reused_a_second_after_its_value_expired(name):
    """A table of one key: a new key finds no row while the value lives (however long its
    timeout), and takes it a second after the value expired (django-ratelimit's keys, one per
    client and window, never pile up for the longest timeout)."""
    clock = ManualClock(1000 * S)
    w = Window.open_geometry(name, geometry(3600 * S, 1), clock=clock, on_full="deny")
    try:
        counters = CounterCacheEngine(w)
        assert counters.add("a", 1, 600 * S)
        clock.advance(599)
        assert not counters.add("b", 1, 60 * S), "a live value's row was taken"
        clock.advance(1)
        assert counters.get("a") is None and not counters.add("b", 1, 60 * S)  # expired, not yet idle
        clock.advance(1.001)
        assert counters.add("b", 1, 60 * S) and counters.get("b") == 1
    finally:
        w.unlink()
        w.close()


@pytest.mark.parametrize("value", ["1", 1.0, True, None, [1], b"1"])
def test_anything_but_an_int_is_refused(cache, value):
    for call in (lambda: cache.set("k", value), lambda: cache.add("k", value)):
        with pytest.raises(TypeError, match="keeps int counters"):
            call()
    assert cache.get("k") is None


def test_what_does_not_fit_is_refused_clearly(cache):
    with pytest.raises(OverflowError, match="64-bit"):
        cache.set("big", 1 << 63)
    cache.set("k", (1 << 63) - 1)
    with pytest.raises(OverflowError, match="nothing counted"):
        cache.incr("k")
    assert cache.get("k") == (1 << 63) - 1
    with pytest.raises(ValueError, match="MAX_TIMEOUT"):
        cache.set("k", 1, 90_001)
    with pytest.raises(TypeError, match="seconds"):
        cache.set("k", 1, float("inf"))


def test_options_are_checked(name):
    with pytest.raises(ValueError, match="OPTIONS takes"):
        ShmwinCounterCache(name, {"OPTIONS": {"MAX_TIMOUT": 5}})
    with pytest.raises(ValueError, match="ON_FULL"):
        ShmwinCounterCache(name, {"OPTIONS": {"ON_FULL": "allow"}})
    with pytest.raises(ValueError, match="must be positive"):
        ShmwinCounterCache(name, {"OPTIONS": {"MAX_TIMEOUT": 0}})
    first = ShmwinCounterCache(name, {"OPTIONS": {"MAX_TIMEOUT": 60}})
    try:
        with pytest.raises(GeometryMismatchError):
            ShmwinCounterCache(name, {"OPTIONS": {"MAX_TIMEOUT": 120}})
    finally:
        first.unlink()


def test_a_full_table_stores_nothing(name):
    cache = ShmwinCounterCache(name, {"OPTIONS": {"CAPACITY": 1}})
    try:
        assert cache.add("a", 1)
        assert cache.add("b", 1) is False
        with pytest.raises(ValueError, match="not found"):
            cache.incr("b")
        with pytest.raises(KeyTableFullError):
            cache.set("b", 1)
        assert cache.incr("a") == 2
    finally:
        cache.unlink()


def test_the_tools_show_its_live_values(cache):
    cache.add("a", 3)
    cache.set("b", 5)
    cache.set("gone", 9, 0)
    shown = json.loads(run_python(SHOW, cache.location).stdout)
    assert shown["role"] == "counter-cache"
    assert shown["counter-cache"]["keys"] == 2 and shown["counter-cache"]["total"] == 8
    assert shown["top"] == [[":1:b", 5], [":1:a", 3]]


SHOW = """
import sys
from shmwin.cli import main
sys.exit(main(["show", "--json", sys.argv[1]]))
"""


def test_a_window_over_it_says_what_it_holds(cache):
    cache.set("k", 1)
    with Window.attach(cache.location) as w:
        with pytest.raises(ShmwinError, match="holds Django's counters: write through ShmwinCounterCache"):
            w.add(1, key="k")
        with pytest.raises(ShmwinError, match="not buckets"):
            w.total(key="k")
