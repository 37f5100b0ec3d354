"""AdaptiveLimiter: the effective rate follows an injected error window down and back up."""

from __future__ import annotations

import math

import pytest
from support.helpers import run_python

import shmwin
from shmwin import ManualClock, Window
from shmwin.overload.adaptive import AdaptiveLimiter

S = 1_000_000_000
MS = 1_000_000

# per second: (ok, errors) recorded into the health window
SCRIPT = [(50, 0)] * 4 + [(10, 90)] * 6 + [(50, 0)] * 14


def _expected(ok: int, errors: int, limit: int = 10, scale: int = 1000) -> int:
    """The documented recipe, written out: error ratio -> factor -> units per hit -> hits."""
    ratio = errors / (ok + errors) if ok + errors >= 20 else 0.0
    if ratio <= 0.05:
        factor = 1.0
    elif ratio >= 0.5:
        factor = 0.1
    else:
        factor = 1 - 0.9 * (ratio - 0.05) / 0.45
    cost = max(1, round(scale / factor))
    return limit * scale // cost


def test_follows_an_injected_error_window_down_and_back_up(make_name):
    clock = ManualClock(S)
    health = Window(make_name("health"), span=10, buckets=10, fields=("good", "bad"), clock=clock)
    limiter = AdaptiveLimiter(
        make_name("lim"), "10/second", health=health, ok_field="good", error_field="bad", clock=clock
    )
    try:
        admitted, expected = [], []
        for second, (ok, errors) in enumerate(SCRIPT, start=1):
            clock.set(second * S)
            health.add(ok, "good")
            health.add(errors, "bad")
            clock.set(second * S + 500 * MS)  # past the 100 ms refresh: the factor is re-read
            admitted.append(sum(limiter.hit(f"client-{second}") for _ in range(30)))
            recent = SCRIPT[max(0, second - 10) : second]  # the 10 one-second buckets the window holds
            expected.append(_expected(sum(o for o, _ in recent), sum(e for _, e in recent)))
        assert admitted == expected
        assert admitted[:4] == [10] * 4  # healthy
        assert min(admitted) == 1  # down to the floor (10 %) while errors dominate
        worst = admitted.index(1)
        assert admitted[:worst] == sorted(admitted[:worst], reverse=True)  # down...
        assert admitted[worst:] == sorted(admitted[worst:])  # ...and back up as errors age out
        assert admitted[-1] == 10
    finally:
        limiter.unlink()
        limiter.close()
        health.unlink()
        health.close()


def test_record_test_stats_and_describe(name):
    clock = ManualClock(S)
    limiter = AdaptiveLimiter(name, "10/second;100/minute", clock=clock, min_samples=10)
    try:
        assert limiter.test("k") and limiter.key_stats("k")[0].remaining == 10
        limiter.record(ok=True, n=5)
        limiter.record(ok=False, n=15)  # 75 % errors: the floor
        clock.advance(0.2)
        assert limiter.test("k")
        assert limiter.hit("k") and not limiter.hit("k")  # 10 % of 10/second: 1
        first = limiter.key_stats("k")[0]
        assert (first.limit, first.used, first.remaining) == (1, 1, 0)
        stats = limiter.stats()
        assert (stats.ok, stats.errors, stats.factor, stats.cost) == (5, 15, 0.1, 10_000)
        assert [n for _, n in stats.effective] == [1, 10]
        info = limiter.describe()
        assert info["kind"] == "adaptive_limiter" and info["effective"] == [1, 10]
        assert info["rates"] == ["10/second", "100/minute"] and info["error_ratio"] == 0.75
        clock.advance(11)  # the health window has forgotten
        assert limiter.stats().factor == 1.0 and limiter.hit("k2")
    finally:
        limiter.unlink()
        limiter.close()
    assert name not in shmwin.names() and name + ".health" not in shmwin.names()


def test_errors_recorded_by_another_process_lower_this_ones_limit(name, tmp_path):
    clock = ManualClock(S, path=tmp_path / "clock")
    limiter = AdaptiveLimiter(name, "100/second", clock=clock)
    try:
        assert sum(limiter.hit("a") for _ in range(200)) == 100
        run_python(
            """
            import sys
            from shmwin import ManualClock
            from shmwin.overload.adaptive import AdaptiveLimiter
            other = AdaptiveLimiter(sys.argv[1], "100/second", clock=ManualClock(path=sys.argv[2]))
            other.record(ok=True, n=70)
            other.record(ok=False, n=30)  # 30 %: factor 1 - 0.9 * 0.25 / 0.45 = 0.5
            other.close()
            """,
            name,
            str(tmp_path / "clock"),
        )
        clock.advance(0.2)
        assert sum(limiter.hit("b") for _ in range(200)) == 50
    finally:
        limiter.unlink()
        limiter.close()


def test_attach_and_describe_by_name(name):
    clock = ManualClock(S)
    limiter = AdaptiveLimiter(name, "10/second;100/minute", clock=clock)
    try:
        limiter.record(ok=False, n=30)
        other = AdaptiveLimiter.attach(name, clock=clock)
        assert other.rates == limiter.rates and other.stats() == limiter.stats()
        assert other.hit("k") and not other.hit("k")  # the floor: 1 of 10 per second
        other.close()
        assert shmwin.overload.adaptive.describe(name)["rates"] == ["10/second", "100/minute"]
        with pytest.raises(shmwin.GeometryMismatchError, match="scale"):
            AdaptiveLimiter.attach(name, scale=7)
        assert shmwin.overload.adaptive.describe(name, scale=7) is None
    finally:
        limiter.unlink()
        limiter.close()
    with shmwin.Limiter(name, "5/second") as plain:  # a limiter with no health window
        try:
            assert shmwin.overload.adaptive.describe(name, scale=1) is None
        finally:
            plain.unlink()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"good": 0.5, "bad": 0.5}, "below"),
        ({"floor": 0}, "floor"),
        ({"floor": 1.5}, "floor"),
        ({"scale": 0}, "scale"),
        ({"min_samples": -1}, "min_samples"),
        ({"refresh": "never"}, "refresh"),
        ({"ok_field": "nope"}, "no field"),
    ],
)
def test_bad_arguments_raise_and_create_nothing(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveLimiter(name, "10/second", **kwargs)
    assert not [n for n in shmwin.names() if n.startswith(name)]


@pytest.mark.unit
def test_expected_recipe_is_monotonic():
    hits = [_expected(100 - e, e) for e in range(0, 101, 5)]
    assert hits == sorted(hits, reverse=True) and hits[0] == 10 and hits[-1] == 1
    assert math.isclose(_expected(70, 30) / 10, 0.5)
