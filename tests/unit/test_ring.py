"""Pure ring arithmetic: plain integers and arrays, no shared memory."""

import pytest

from shmwin import geometry as ring  # the ring's arithmetic lives in geometry

pytestmark = pytest.mark.unit


def test_epoch_and_slot():
    assert ring.epoch_of(12_400_000_000, 1_000_000_000) == 12
    assert ring.slot_of(12, 5) == 2
    assert ring.epoch_of(0, 7) == 0
    assert ring.epoch_of(6, 7) == 0 and ring.epoch_of(7, 7) == 1


@pytest.mark.parametrize(
    ("last_ns", "expected"),
    [(1, 1), (1_000_000_000, 1), (1_000_000_001, 2), (10_000_000_000, 10), (60_000_000_000, 60)],
)
def test_buckets_for_rounds_up(last_ns, expected):
    assert ring.buckets_for(last_ns, 1_000_000_000, 60) == expected


def test_buckets_for_rejects_longer_than_span_and_nonpositive():
    with pytest.raises(ValueError, match="longer than the window's span"):
        ring.buckets_for(61_000_000_000, 1_000_000_000, 60)
    with pytest.raises(ValueError):
        ring.buckets_for(0, 1_000_000_000, 60)


def test_expected_epochs_match_the_picture():
    # the ring drawn in ring.py: 5 slots, now_epoch = 12 -> slots hold 10, 11, 12, 8, 9
    assert ring.expected_epochs(12, 5, 5).tolist() == [10, 11, 12, 8, 9]
    assert ring.expected_epochs(12, 5, 2).tolist() == [-1, 11, 12, -1, -1]
    assert ring.expected_epochs(12, 5, 1).tolist() == [-1, -1, 12, -1, -1]
    # near the clock's start, slots whose epoch would be negative expect nothing
    assert ring.expected_epochs(1, 5, 5).tolist() == [0, 1, -1, -1, -1]


def test_expected_epochs_never_match_empty_or_future_slots():
    expected = ring.expected_epochs(3, 5, 5)
    assert ring.EMPTY_EPOCH not in expected.tolist()
    assert 3 + 5 not in expected.tolist()  # written by a clock one lap ahead: not counted yet


def test_slots_oldest_first():
    assert ring.slots_oldest_first(12, 5, 5).tolist() == [3, 4, 0, 1, 2]
    assert ring.slots_oldest_first(12, 5, 2).tolist() == [1, 2]
    assert ring.slots_oldest_first(2, 5, 5).tolist() == [3, 4, 0, 1, 2]
