"""The pure arithmetic that the tools and readers share with the core, with plain integers:
GCRA's tokens from a state word (``limiter.tokens_at``), which ring a read uses
(``geometry.pick_ring``), a moving log's quantum (``format.moving_quantum_shift``) and a
batch's buckets (``policy.items_by_bucket``). No shared memory, no process, no clock."""

from __future__ import annotations

import random

import numpy as np
import pytest

from shmwin.backends.shm.format import EMPTY_EPOCH, MOVING_MIN_SHIFT, MOVING_SPAN_BITS, moving_quantum_shift
from shmwin.geometry import Geometry, Ring, pick_ring, resolution_index
from shmwin.limiter import tokens_at
from shmwin.policy import items_by_bucket, stamps_of

S = 1_000_000_000

# -- GCRA: tokens_at(tat, now, interval, burst) ---------------------------------------------


def tokens_model(tat_ns: int, now_ns: int, interval_ns: int, burst: int) -> int:
    """The bucket by its definition: it was full ``burst * interval`` before its theoretical
    arrival time; each interval since then took one token back; whole tokens, 0..burst."""
    if tat_ns == EMPTY_EPOCH or tat_ns < 0:
        return burst
    if tat_ns <= now_ns:
        return burst  # the TAT is in the past: nothing is owed
    owed_ns = tat_ns - now_ns  # time the bucket still needs to refill completely
    # tokens not yet back: ceil(owed / interval); what is left of the burst is whole
    return max(burst - -(-owed_ns // interval_ns), 0)


@pytest.mark.parametrize(
    ("tat_ns", "now_ns", "interval_ns", "burst", "want"),
    [
        (EMPTY_EPOCH, 5 * S, S, 10, 10),  # no state: a full bucket
        (-1, 5 * S, S, 10, 10),  # junk (negative): full, never an error in the tools
        (4 * S, 5 * S, S, 10, 10),  # TAT in the past
        (5 * S, 5 * S, S, 10, 10),  # TAT now: full
        (5 * S + 1, 5 * S, S, 10, 9),  # 1 ns owed: one token is not back yet
        (6 * S, 5 * S, S, 10, 9),  # one interval owed
        (15 * S, 5 * S, S, 10, 0),  # the whole burst owed: empty
        (16 * S, 5 * S, S, 10, 0),  # more than the burst owed (a charge): still 0, never negative
        (5 * S + S // 2, 5 * S, S, 1, 0),  # burst 1, half an interval owed
    ],
)
def test_tokens_at_at_its_edges(tat_ns: int, now_ns: int, interval_ns: int, burst: int, want: int) -> None:
    assert tokens_at(tat_ns, now_ns, interval_ns, burst) == want
    assert tokens_model(tat_ns, now_ns, interval_ns, burst) == want


def test_tokens_at_agrees_with_the_definition_on_random_states() -> None:
    rnd = random.Random(20261128)
    for _ in range(20_000):
        interval_ns = rnd.choice((1, 7, 1_000, S, 3_600 * S))
        burst = rnd.choice((1, 2, 10, 1_000))
        now_ns = rnd.randrange(0, 2**62)
        tat_ns = now_ns + rnd.randrange(-3 * burst * interval_ns, 3 * burst * interval_ns + 1)
        got = tokens_at(tat_ns, now_ns, interval_ns, burst)
        assert got == tokens_model(tat_ns, now_ns, interval_ns, burst), (tat_ns, now_ns, interval_ns, burst)
        assert 0 <= got <= burst


def test_tokens_at_never_goes_down_as_time_passes() -> None:
    rnd = random.Random(7)
    for _ in range(2_000):
        interval_ns, burst = rnd.choice(((S, 10), (37, 3), (S // 10, 100)))
        tat_ns = rnd.randrange(0, 10**12)
        now_ns = rnd.randrange(0, 10**12)
        seen = [tokens_at(tat_ns, now_ns + step * interval_ns // 3, interval_ns, burst) for step in range(40)]
        assert seen == sorted(seen)


# -- which ring a read uses ------------------------------------------------------------------

RINGS = (Ring(S, 60), Ring(60 * S, 60), Ring(3_600 * S, 24))  # 1m/1s, 1h/1m, 24h/1h


@pytest.mark.parametrize(
    ("last", "resolution", "want"),
    [
        (None, None, (2, 24)),  # no last: the longest ring, whole
        ("1s", None, (0, 1)),  # the finest ring that covers it
        ("1500ms", None, (0, 2)),  # rounds up: never narrower than asked
        ("60s", None, (0, 60)),  # exactly the finest span
        ("61s", None, (1, 2)),  # just past it: the next ring, rounded up
        ("1h", None, (1, 60)),
        ("2h", None, (2, 2)),
        ("24h", None, (2, 24)),
        (None, "1h/1m", (1, 60)),  # named: whole
        ("5m", "1h/1m", (1, 5)),
        ("30s", 1, (1, 1)),  # an index names a ring too
        (None, 0, (0, 60)),
    ],
)
def test_pick_ring_chooses_the_finest_ring_that_covers_last(
    last: str | None, resolution: str | int | None, want: tuple[int, int]
) -> None:
    assert pick_ring(RINGS, last, resolution) == want


@pytest.mark.parametrize(
    ("last", "resolution"), [("25h", None), ("2m", "1m/1s"), ("0s", None), ("2h", "1h/1m")]
)
def test_pick_ring_refuses_a_read_longer_than_its_ring(last: str, resolution: str | None) -> None:
    with pytest.raises(ValueError):
        pick_ring(RINGS, last, resolution)


@pytest.mark.parametrize("resolution", ["1m/2s", "7d/1d", 3, -1, True, 1.0, "soon"])
def test_a_resolution_the_window_has_not_is_named_in_the_error(resolution: object) -> None:
    with pytest.raises(ValueError, match="1m/1s"):
        resolution_index(RINGS, resolution)  # type: ignore[arg-type]


def test_a_log_ring_is_read_whole_and_no_further_than_its_period() -> None:
    log = (Ring(60 * S, 100, limit=100, log=True),)
    assert pick_ring(log, None) == (0, 1)
    assert pick_ring(log, "30s") == (0, 1)
    assert pick_ring(log, "60s") == (0, 1)
    with pytest.raises(ValueError, match="period"):
        pick_ring(log, "61s")


def test_pick_ring_k_is_the_ceiling_of_last_over_the_bucket() -> None:
    rnd = random.Random(3)
    for _ in range(5_000):
        bucket_ns, n = rnd.choice(((S, 60), (7, 1000), (250_000_000, 8)))
        last_ns = rnd.randrange(1, bucket_ns * n + 1)
        index, k = pick_ring((Ring(bucket_ns, n),), f"{last_ns}ns")
        assert index == 0 and (k - 1) * bucket_ns < last_ns <= k * bucket_ns


# -- a moving log's quantum ------------------------------------------------------------------


@pytest.mark.parametrize("period_ns", [1, 31, 32, 33, S, 60 * S, 3_600 * S, 86_400 * S, 2**40, 2**60])
def test_a_moving_log_quantum_keeps_a_period_within_its_span_bits(period_ns: int) -> None:
    shift = moving_quantum_shift(period_ns)
    assert shift >= MOVING_MIN_SHIFT  # 32 ns at least
    assert -(-period_ns >> shift) <= 2**MOVING_SPAN_BITS  # a period spans at most 2**28 quanta
    if shift > MOVING_MIN_SHIFT:  # and the quantum is the finest that does
        assert -(-period_ns >> (shift - 1)) > 2**MOVING_SPAN_BITS


def test_the_moving_log_quantum_never_shrinks_as_the_period_grows() -> None:
    shifts = [moving_quantum_shift(p) for p in sorted({2**e + d for e in range(1, 62) for d in (-1, 0, 1)})]
    assert shifts == sorted(shifts)


# -- a batch's buckets -----------------------------------------------------------------------


def test_a_batch_is_summed_into_the_buckets_of_every_ring() -> None:
    g = Geometry((Ring(S, 60), Ring(60 * S, 60)), ("hits",))
    now_ns = 10_000 * S + S // 2
    stamps = np.array([now_ns, now_ns - S, now_ns - S - 1, now_ns - 59 * S], dtype=np.int64)
    items = items_by_bucket(g, now_ns, np.array([1, 2, 3, 4], dtype=np.int64), stamps)
    by_ring: dict[int, dict[int, int]] = {}
    for ring, epoch, total in items:
        by_ring.setdefault(ring, {})[epoch] = by_ring.get(ring, {}).get(epoch, 0) + int(total)
    assert by_ring[0] == {10_000: 1, 9_999: 5, 9_941: 4}
    assert by_ring[1] == {166: 6, 165: 4}  # 10,000 s is in minute 166; 9,941 s in minute 165


def test_a_batch_stamp_in_the_future_or_older_than_the_span_is_refused() -> None:
    g = Geometry((Ring(S, 60),), ("hits",))
    now_ns = 1_000 * S
    for bad in (now_ns + 1, now_ns - 60 * S):
        with pytest.raises(ValueError, match="at="):
            items_by_bucket(g, now_ns, np.array([1]), np.array([bad], dtype=np.int64))


@pytest.mark.parametrize("at", [[1.5], [[1]], ["1"], [1, 2]])
def test_batch_stamps_are_integers_one_per_value(at: list[object]) -> None:
    with pytest.raises(ValueError, match="at="):
        stamps_of(at, np.array([1]))
