"""Keyed windows: per-key counts, keys(), top(), reclaiming idle keys, a full table."""

from __future__ import annotations

import pytest

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm import layout

S = 1_000_000_000


@pytest.fixture
def clock():
    return ManualClock(1_000 * S)


@pytest.fixture
def routes(name, clock):
    w = Window(name, span=60, buckets=60, fields=("req", "err"), capacity=64, clock=clock)
    yield w
    w.close()
    w.unlink()


def test_per_key_counts(routes, clock):
    routes.add(1, key="GET /users")
    routes.add(1, key="GET /users")
    routes.add(1, "err", key="GET /users")
    routes.add(5, key=b"POST /login")
    assert routes.total("req", key="GET /users") == 2
    assert routes.totals(key="GET /users") == {"req": 2, "err": 1}
    assert routes.total(key=b"POST /login") == 5
    assert routes.total(key="never seen") == 0
    assert routes.total("req") == 7  # no key: every key
    clock.advance(1)
    routes.add(3, key="GET /users")
    assert routes.series("req", last=2, key="GET /users").tolist() == [2, 3]
    assert routes.mode == "locked" and routes.capacity == 64


def test_keys_and_top(routes):
    for i, route in enumerate(["a", "b", "c", "d"]):
        routes.add(i + 1, key=route)
    routes.add(1, "err", key="a")
    assert sorted(routes.keys()) == ["a", "b", "c", "d"]
    assert routes.top(2, "req") == [("d", 4), ("c", 3)]
    assert routes.top(10, "err") == [("a", 1)]
    assert routes.top(0) == []


def test_str_and_bytes_keys_stay_distinct_and_typed(routes):
    routes.add(1, key="k")
    routes.add(2, key=b"k")
    assert routes.total(key="k") == 1 and routes.total(key=b"k") == 2
    assert {(type(k), k) for k in routes.keys()} == {(str, "k"), (bytes, b"k")}


def test_long_keys_are_told_apart_by_digest(routes):
    a, b = "x" * 300 + "a", "x" * 300 + "b"
    routes.add(1, key=a)
    routes.add(2, key=b)
    assert routes.total(key=a) == 1 and routes.total(key=b) == 2
    prefix = layout.KEY_LONG_PREFIX  # then "…" and the 16-byte digest in hex
    assert all(k.startswith("x" * prefix + "…") and len(k) == prefix + 1 + 32 for k in routes.keys())


def test_idle_keys_are_reclaimed_and_expire(routes, clock):
    routes.add(1, key="old")
    clock.advance(61 + 1)  # past span + one bucket: nothing of "old" is left
    assert routes.keys() == []
    assert routes.total(key="old") == 0
    routes.add(1, key="old")  # comes back fresh, not with stale counts
    assert routes.total(key="old") == 1


def test_clear(routes):
    routes.add(3, key="a")
    routes.add(4, key="b")
    routes.clear("a")
    routes.clear("never seen")
    assert routes.total(key="a") == 0 and routes.total(key="b") == 4
    assert routes.keys() == ["b"]


def test_full_table_raises_and_live_keys_keep_counts(name, clock):
    with Window(name, span=10, buckets=10, capacity=10, clock=clock) as w:
        stored = 0
        with pytest.raises(shmwin.KeyTableFullError, match="larger capacity"):
            for i in range(100):
                w.add(i + 1, key=f"k{i}")
                stored += 1
        assert stored >= 10  # at least the capacity asked for
        for i in range(stored):
            assert w.total(key=f"k{i}") == i + 1
        assert w.total(key=f"k{stored}") == 0  # the refused add counted nothing
        clock.advance(12)  # every key idle: their entries can be reused
        w.add(7, key="newcomer")
        assert w.total(key="newcomer") == 7
        w.unlink()


def test_key_misuse(routes, make_name):
    with pytest.raises(TypeError, match="keyed"):
        routes.add(1)
    with pytest.raises(TypeError, match="str or bytes"):
        routes.add(1, key=42)  # type: ignore[arg-type]
    with Window(make_name("plain")) as plain:
        with pytest.raises(ValueError, match="not keyed"):
            plain.add(1, key="x")
        with pytest.raises(ValueError, match="not keyed"):
            plain.keys()
        plain.unlink()
    with pytest.raises(ValueError, match="mode='locked'"):
        Window(make_name("bad"), capacity=10, mode="striped")


def test_reset_empties_every_key(routes):
    routes.add(2, key="a")
    routes.reset()
    assert routes.total(key="a") == 0 and routes.total() == 0
    routes.add(1, key="a")
    assert routes.total(key="a") == 1
