"""geometry.Sketch and the quantile arithmetic of a Distribution's bins (no shared memory)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from shmwin.backends.shm.roles.distribution import quantiles_of
from shmwin.geometry import BIN_OVER, BIN_UNDER, BIN_ZERO, FIRST_LOG_BIN, Sketch

pytestmark = pytest.mark.unit


def test_the_default_sketch_is_one_percent_over_a_microsecond_to_a_day_in_1270_bins():
    s = Sketch()
    assert (s.relative_error, s.low, s.high, s.n_bins) == (0.01, 1e-6, 1e5, 1270)
    assert s.low * s.gamma**s.n_log >= s.high > s.low * s.gamma ** (s.n_log - 1)


@pytest.mark.parametrize("error", [0.001, 0.01, 0.05])
def test_every_value_in_range_is_answered_within_the_relative_error(error):
    s = Sketch(error, 1e-6, 1e5)
    values = np.geomspace(1e-6, 1e5, 200_001)
    reps = s.values()
    got = reps[[s.bin_of(float(v)) for v in values]]
    assert np.max(np.abs(got - values) / values) <= error * (1 + 1e-9)


def test_the_bins_outside_the_log_range():
    s = Sketch(0.01, 1e-3, 10.0)
    assert [s.bin_of(v) for v in (0.0, 1e-9, 1e-3, 10.0, 10.000001)] == [
        BIN_ZERO, BIN_UNDER, FIRST_LOG_BIN, s.n_bins - 1, BIN_OVER
    ]  # fmt: skip
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(ValueError, match="finite values >= 0"):
            s.bin_of(bad)


def test_quantiles_walk_the_bins_in_value_order_and_clamp_to_min_and_max():
    s = Sketch(0.01, 1.0, 100.0)
    bins = np.zeros(s.n_bins, np.int64)
    bins[BIN_OVER] = 1  # 500.0
    bins[s.bin_of(2.0)] = 2
    bins[BIN_ZERO] = 1
    assert quantiles_of(s, bins, (0.0, 0.34, 0.67, 1.0), 0.0, 500.0) == [0.0, pytest.approx(2.0, rel=0.01),
                                                                        pytest.approx(2.0, rel=0.01), 500.0]
    assert all(math.isnan(q) for q in quantiles_of(s, np.zeros(s.n_bins, np.int64), (0.5,), 0.0, 0.0))


@pytest.mark.parametrize(
    "args", [(0.0, 1.0, 2.0), (0.6, 1.0, 2.0), (0.01, 0.0, 1.0), (0.01, 2.0, 1.0), (0.01, 1.0, math.inf),
             (1e-5, 1e-300, 1e300)],
)  # fmt: skip
def test_impossible_sketches_are_value_errors(args):
    with pytest.raises(ValueError):
        Sketch(*args)
