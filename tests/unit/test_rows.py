"""Rows.live(): the lock-free live sums every read is built on, over hand-made ring views --
a slot recycled while it is read, sums that would pass int64, and the shapes callers get."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from shmwin import ManualClock, Window
from shmwin.backends.shm.rows import RingView, Rows
from shmwin.geometry import expected_epochs

N = 4  # buckets
BUCKET_NS = 1_000
NOW_NS = 10 * N * BUCKET_NS  # epochs N*10-3 .. N*10 are the live ones


def view(values: np.ndarray, epochs: np.ndarray) -> RingView:
    return RingView(0, 0, BUCKET_NS, N, epochs, values)


def live_epochs(rows: int) -> np.ndarray:
    return np.tile(expected_epochs(NOW_NS // BUCKET_NS, N, N), (rows, 1))


class Flipping(np.ndarray):
    """Epochs whose slot (0, 0) is recycled between any two looks: every comparison with
    them sees it live, then not, then live again..."""

    looks = 0

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        result = np.asarray(self).__eq__(other)
        Flipping.looks += 1
        if Flipping.looks % 2 == 0:
            result[0, 0] = not result[0, 0]
        return result


def test_sums_over_rows_and_per_row_with_fields_in_either_shape():
    values = np.arange(3 * N * 2, dtype=np.int64).reshape(3, N, 2)
    epochs = live_epochs(3)
    epochs[1, 2] = 0  # stale: never counted
    r = view(values, epochs)
    counted = np.where((epochs != 0)[:, :, None], values, 0)
    assert (Rows.live(r, N, NOW_NS, slice(0, 3), None, False) == counted.sum(axis=0)).all()
    assert (Rows.live(r, N, NOW_NS, slice(0, 3), None, True) == counted.sum(axis=1)).all()
    assert (Rows.live(r, N, NOW_NS, slice(0, 3), 1, False) == counted[:, :, 1].sum(axis=0)).all()
    assert (Rows.live(r, N, NOW_NS, slice(1, 2), 0, True) == counted[1:2, :, 0].sum(axis=1)).all()
    assert Rows.live(r, N, NOW_NS, slice(0, 0), None, False).shape == (N, 2)


def test_a_slot_recycled_while_it_is_read_counts_as_expired():
    values = np.full((2, N, 1), 5, dtype=np.int64)
    epochs = live_epochs(2).view(Flipping)
    Flipping.looks = 0
    got = Rows.live(view(values, epochs), N, NOW_NS, slice(0, 2), 0, False)
    assert Flipping.looks >= 8  # every try saw it move: the torn path ran
    assert got.tolist() == [5, 10, 10, 10]  # slot 0 of row 0 left out, every other one counted


def test_sums_past_int64_come_back_as_python_ints():
    big = 2**62 + 2**61
    values = np.zeros((2, N, 1), dtype=np.int64)
    values[:, 1, 0] = big
    r = view(values, live_epochs(2))
    summed = Rows.live(r, N, NOW_NS, slice(0, 2), 0, False)
    assert summed[1] == 2 * big and summed.dtype == object
    per_row = Rows.live(r, N, NOW_NS, slice(0, 2), None, True)
    assert per_row[:, 0].tolist() == [big, big]


def test_keys_whose_sum_passes_int64_raise_instead_of_wrapping(name):
    with Window(name, span=10, buckets=10, keyed=True, clock=ManualClock(1000 * 10**9)) as w:
        w.add(2**62 + 2**61, key="a")
        w.add(2**62 + 2**61, key="b")  # the same bucket of another row
        assert w.total(key="a") == 2**62 + 2**61
        with pytest.raises(OverflowError, match="past int64"):
            w.total()
        assert sorted(v for _, v in w.top(2)) == [2**62 + 2**61] * 2
        w.unlink()
