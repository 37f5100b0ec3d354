"""shmwin.Distribution in one process: resolutions and last=, bucket rotation on a hand-driven
clock, record_many with stamps, keys, the out-of-range and bad-value treatment, geometry on
attach, memory."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from shmwin import Distribution, GeometryMismatchError, ManualClock, ShmwinError, Window
from shmwin.backends.shm.segment import path_of

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # also against the sanitized cores

S = 1_000_000_000
T0 = 1_000 * S
RESOLUTIONS = ("1m/1s", "1h/1m", "24h/1h")


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def dist(name, clock):
    d = Distribution(name, RESOLUTIONS, clock=clock)
    yield d
    d.unlink()


def test_an_empty_distribution_answers_nan_and_zero(dist):
    assert dist.count() == 0 and dist.sum() == 0.0
    assert all(math.isnan(v) for v in (dist.mean(), dist.min(), dist.max(), dist.quantile(0.5)))
    assert dist.histogram((0.1, 1.0)) == [0, 0]


def test_buckets_rotate_with_the_clock_and_last_picks_the_finest_covering_resolution(dist, clock):
    dist.record(1.0)  # at T0
    clock.advance(30)
    dist.record(2.0)
    assert dist.count(last="10s") == 1 and dist.count(last="1m") == 2
    clock.advance(31)  # 61 s after the first: gone from the 1m/1s ring, not from 1h/1m
    assert dist.count(last="1m") == 1 and dist.min(last="1m") == 2.0
    assert dist.count(last="2m") == 2 and dist.min(last="2m") == 1.0
    clock.advance(3600)
    assert dist.count(last="1h") == 0 and dist.count(last="24h") == 2 and dist.count() == 2
    dist.record(3.0)  # recycles a 1s and a 1m bucket that held nothing live
    assert dist.count(last="1s") == 1 and dist.max(last="1s") == 3.0
    clock.advance(24 * 3600)
    assert dist.count() == 0 and math.isnan(dist.max())


def test_a_bucket_recycled_by_a_later_write_forgets_its_old_values(dist, clock):
    for v in (5.0, 6.0, 7.0):
        dist.record(v)
    clock.advance(60)  # the same 1s slot, a minute later
    dist.record(0.5)
    assert dist.count(last="1s") == 1
    assert (dist.min(last="1s"), dist.max(last="1s"), dist.sum(last="1s")) == (0.5, 0.5, 0.5)
    assert dist.quantile(1.0, last="1s") == 0.5


def test_min_and_max_are_exact_and_quantiles_stay_inside_them(dist):
    x = np.random.default_rng(7).lognormal(0, 2, 2000)
    dist.record_many(x)
    assert dist.min() == x.min() and dist.max() == x.max()
    assert dist.quantile(0.0) == x.min() and dist.quantile(1.0) == x.max()
    assert dist.count() == 2000 and dist.mean() == pytest.approx(x.mean(), rel=1e-12)


def test_record_many_with_stamps_lands_in_their_buckets(dist, clock):
    clock.advance(120)
    now = clock()
    dist.record_many([1.0, 2.0, 3.0], at=[now - 90 * S, now - 30 * S, now])
    assert dist.count(last="1s") == 1 and dist.count(last="1m") == 2 and dist.count(last="1h") == 3
    assert dist.min(last="1h") == 1.0  # the 90 s old value skipped the 1m ring only


@pytest.mark.parametrize(
    ("at", "message"), [(lambda now: [now + 1], "future"), (lambda now: [now - 25 * 3600 * S], "older")]
)
def test_record_many_refuses_bad_stamps_before_storing_anything(dist, clock, at, message):
    with pytest.raises(ValueError, match=message):
        dist.record_many([1.0], at=at(clock()))
    with pytest.raises(ValueError, match="one stamp per value"):
        dist.record_many([1.0, 2.0], at=[clock()])
    assert dist.count() == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -1.0, -1e-300])
def test_nan_inf_and_negative_values_raise_and_store_nothing(dist, bad):
    dist.record(1.0)
    with pytest.raises(ValueError, match="finite values >= 0"):
        dist.record(bad)
    with pytest.raises(ValueError, match="finite values >= 0"):
        dist.record_many([2.0, bad, 3.0])  # checked whole before any store
    assert dist.count() == 1 and dist.sum() == 1.0


def test_a_non_number_is_a_type_error(dist):
    with pytest.raises(TypeError):
        dist.record("1.5")  # type: ignore[arg-type]


def test_zero_is_its_own_bin_and_out_of_range_values_are_counted_and_clamped(name, clock):
    d = Distribution(name, "1m/1s", value_range=(1e-3, 10.0), clock=clock)
    try:
        d.record_many([0.0, 1e-5, 2e-5, 0.5, 50.0, 80.0])
        assert d.count() == 6 and d.min() == 0.0 and d.max() == 80.0
        # ranks 0..5 (method "lower"): 0 (ZERO), 1e-5 and 2e-5 (UNDER: answered with the exact
        # minimum, a lower bound), 0.5 (a log bin), 50 and 80 (OVER: the exact maximum, an upper bound)
        expected = [0.0, 0.0, 0.0, pytest.approx(0.5, rel=0.01), 80.0, 80.0]
        assert d.quantiles((0.0, 0.2, 0.4, 0.6, 0.8, 1.0)) == expected
        assert d.histogram((0.0, 1e-3, 1.0, 79.0, 80.0)) == [1, 3, 4, 4, 6]
    finally:
        d.unlink()


def test_a_negative_zero_is_zero(dist):
    dist.record(-0.0)
    assert dist.count() == 1 and math.copysign(1, dist.min()) == 1.0


def test_histogram_counts_are_cumulative_and_within_the_bins_of_the_bounds(dist):
    x = np.random.default_rng(3).lognormal(-3, 1, 5000)
    dist.record_many(x)
    bounds = (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
    got = dist.histogram(bounds)
    assert got == sorted(got)
    for bound, n in zip(bounds, got, strict=True):  # off only by values within 1 % of the bound
        assert (x <= bound * 0.99).sum() <= n <= (x <= bound * 1.01).sum()
    with pytest.raises(ValueError, match="ascending"):
        dist.histogram((1.0, 0.5))


def test_bad_quantiles_are_value_errors(dist):
    for q in (-0.1, 1.5, math.nan, "0.5", True):
        with pytest.raises(ValueError, match="quantile"):
            dist.quantile(q)  # type: ignore[arg-type]


def test_keyed_distributions_keep_each_key_apart(name, clock):
    d = Distribution(name, ("1m/1s",), keyed=True, capacity=8, clock=clock)
    try:
        d.record(0.2, key="GET /users")
        d.record(0.4, key="GET /users")
        d.record_many([5.0, 6.0], key=b"POST /orders")
        assert d.count(key="GET /users") == 2 and d.max(key="GET /users") == 0.4
        assert d.count(key=b"POST /orders") == 2 and d.min(key=b"POST /orders") == 5.0
        assert d.count(key="nobody") == 0
        assert d.count() == 4 and d.max() == 6.0  # key=None: every key merged
        assert sorted(d.keys(), key=str) == sorted(["GET /users", b"POST /orders"], key=str)
        with pytest.raises(TypeError, match="keyed"):
            d.record(1.0)
    finally:
        d.unlink()


def test_an_unkeyed_distribution_refuses_a_key(dist):
    with pytest.raises(ValueError, match="not keyed"):
        dist.record(1.0, key="k")
    with pytest.raises(ValueError, match="not keyed"):
        dist.count(key="k")


def test_create_insists_on_a_new_name(name):
    from shmwin import WindowExistsError

    d = Distribution.create(name, "1m/1s")
    try:
        with pytest.raises(WindowExistsError):
            Distribution.create(name, "1m/1s")
        d.record(1.0)
        assert Distribution(name, "1m/1s").count() == 1
    finally:
        d.unlink()


def test_attach_insists_on_the_same_geometry(name):
    d = Distribution(name, RESOLUTIONS)
    try:
        for other in ({"resolutions": ("1m/1s",)}, {"relative_error": 0.02}, {"value_range": (1e-3, 1e3)},
                      {"keyed": True}):  # fmt: skip
            with pytest.raises(GeometryMismatchError):
                Distribution(name, **{"resolutions": RESOLUTIONS, **other})
        again = Distribution.attach(name)
        assert again.geometry == d.geometry and again.relative_error == 0.01
        again.record(1.0)
        assert d.count() == 1
        again.close()
    finally:
        d.unlink()


def test_a_window_is_not_a_distribution_and_a_distribution_is_not_a_window(make_name):
    w = Window(make_name("w"), 60, 60)
    d = Distribution(make_name("d"), "1m/1s")
    try:
        with pytest.raises(GeometryMismatchError, match="not a distribution"):
            Distribution.attach(w.name)
        as_window = Window.attach(d.name)
        assert not hasattr(as_window._backend._core, "add")  # its core's type has no plain add
        with pytest.raises(ShmwinError):
            as_window.add(1.0)
        with pytest.raises(ShmwinError):
            as_window.total()
        as_window.close()
    finally:
        w.unlink()
        d.unlink()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"relative_error": 0.0}, "relative_error"), ({"relative_error": 0.9}, "relative_error"),
     ({"value_range": (0.0, 1.0)}, "0 < low < high"), ({"value_range": (2.0, 1.0)}, "0 < low < high"),
     ({"value_range": (1e-100, 1e100), "relative_error": 1e-5}, "bins per bucket"),
     ({"resolutions": "1m"}, "span/bucket"), ({"capacity": 0}, "capacity")],
)  # fmt: skip
def test_bad_arguments_are_clear_errors(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        Distribution(name, **kwargs)
    assert not os.path.exists(path_of(name))


def test_three_resolutions_at_one_percent_hold_under_one_mib_of_dev_shm(name):
    d = Distribution(name, RESOLUTIONS)
    try:
        d.record_many(np.random.default_rng(1).lognormal(-3, 2, 10_000))
        held = os.stat(path_of(name)).st_blocks * 512
        assert held <= 1 << 20 and d.nbytes <= 1 << 20
    finally:
        d.unlink()


def test_close_detaches_and_unlink_removes_for_everyone(name):
    from shmwin import WindowClosedError

    d = Distribution(name, "1m/1s")
    other = Distribution.attach(name)
    d.record(1.0)
    d.close()
    d.close()  # idempotent
    with pytest.raises(WindowClosedError):
        d.record(2.0)
    with pytest.raises(WindowClosedError):
        d.count()
    assert other.count() == 1
    assert other.unlink() and not os.path.exists(path_of(name))
    assert not other.unlink()
    other.close()


def test_a_keyed_distribution_holds_under_one_mib_per_key_in_use(name):
    d = Distribution(name, RESOLUTIONS, keyed=True)
    try:
        before = os.stat(path_of(name)).st_blocks * 512
        for i in range(20):
            d.record(0.1 * (i + 1), key=f"route-{i}")
        per_key = (os.stat(path_of(name)).st_blocks * 512 - before) / 20
        assert per_key <= 1 << 20, per_key
        assert d.count() == 20 and d.count(key="route-7") == 1 and d.max(key="route-7") == pytest.approx(0.8)
    finally:
        d.unlink()


def test_a_bound_record_kept_alone_keeps_the_distribution_open(name):
    """As a window's bound add: the core holds the segment, whatever becomes of the front."""
    record = Distribution(name, "1m/1s").record
    record(1.0)
    record(2.0)
    d = Distribution.attach(name)
    try:
        assert d.count() == 2
    finally:
        d.unlink()


def test_histogram_counts_the_values_below_the_range_at_the_exact_min(name):
    """Values below value_range share one bin (UNDER): a bound at or above the exact min counts
    it (it counted nothing below the range's low end once, whatever the min)."""
    d = Distribution(name, ("1m/1s",))  # value_range (1e-6, 1e5)
    try:
        d.record_many([1e-8, 5e-7, 1.0])
        assert d.histogram([1e-9, 1e-8, 6e-7, 1.0]) == [0, 2, 2, 3]
    finally:
        d.unlink()


def test_a_value_range_wider_than_1e300_is_refused(name):
    """(1e-200, 1e200) was accepted, and v / low overflowed: 1e110 and 1e120 fell in the last
    bin (quantiles 1e150 for both)."""
    with pytest.raises(ValueError, match="spans more than"):
        Distribution(name, ("1m/1s",), relative_error=0.1, value_range=(1e-200, 1e200))
    d = Distribution(name, ("1m/1s",), relative_error=0.1, value_range=(1e-150, 1e150))
    try:
        d.record_many([1e100, 1e110, 1e120, 1e140])
        assert d.quantile(0.34) == pytest.approx(1e110, rel=0.1)
        assert d.quantile(0.67) == pytest.approx(1e120, rel=0.1)
        assert d.histogram([1e130]) == [3]
    finally:
        d.unlink()


def test_record_many_stamps_and_values_are_checked_whole(name):
    """A stamp no bucket keeps any more is refused, not dropped (it was accepted and counted
    nowhere); floats that are not whole ns, a uint64 past int64 and strings are refused; numpy
    numbers are quantiles."""
    clock = ManualClock(1_000_500_000_000)
    d = Distribution(name, ("1m/1s", "5m/1m"), clock=clock)
    try:
        now = clock()
        with pytest.raises(ValueError, match="oldest bucket"):
            d.record_many([1.0], at=[now - 300_000_000_000 + 1])
        d.record_many([1.0], at=[(now // 60_000_000_000 - 4) * 60_000_000_000])  # the 5m ring's oldest
        assert d.count(last="5m") == 1
        with pytest.raises(ValueError, match="whole"):
            d.record_many([1.0], at=[float(now) + 0.5])
        with pytest.raises(ValueError, match="out of range"):
            d.record_many([1.0], at=np.array([2**63 + 5], dtype=np.uint64))
        with pytest.raises(TypeError, match="numbers"):
            d.record_many(["1", "2"])
        assert d.count() == 1  # nothing of the refused batches
        assert d.quantile(np.float32(0.5)) == d.quantile(0.5)
    finally:
        d.unlink()


def test_a_stamped_batch_cannot_overflow_a_past_buckets_sum(name):
    """record() refused a sum past a float's range; record_many(at=) into a past bucket did
    not (its sum became inf)."""
    clock = ManualClock(1_000 * S)
    d = Distribution(name, ("1m/1s",), clock=clock)
    try:
        past = clock() - 30 * S
        d.record_many([1e308], at=[past])
        with pytest.raises(OverflowError):
            d.record_many([1e308], at=[past])
        assert d.sum() == 1e308 and d.count() == 1
    finally:
        d.unlink()
