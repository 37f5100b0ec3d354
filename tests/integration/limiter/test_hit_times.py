"""Window.hit_times: an exact limiter's hit times for a key, per rate, read back lock-free (what
pyrate-limiter's ``peek`` needs of ShmwinBucket)."""

from __future__ import annotations

import pytest

from shmwin import Limiter, ManualClock

pytestmark = pytest.mark.integration

S = 1_000_000_000


def test_hit_times_per_rate_oldest_first_and_only_those_still_counted(name):
    clock = ManualClock(100 * S)
    lim = Limiter(name, "3/second;10/minute", exact=True, clock=clock)
    try:
        lim.hit("k")
        clock.advance(0.5)
        lim.hit("k", 2)
        clock.advance(0.5, ns=1)
        assert lim.hit("k")  # the first left the second (a hit counts while t >= now - P), not the minute
        now = 101 * S + 1
        assert lim.window.hit_times("k") == [(100 * S + S // 2, 2), (now, 1)]
        assert lim.window.hit_times("k", 1) == [(100 * S, 1), (100 * S + S // 2, 2), (now, 1)]
        assert lim.window.hit_times("other") == []
    finally:
        lim.unlink()


def test_hit_times_of_a_limiter_of_buckets_is_a_clear_error(name):
    lim = Limiter(name, "3/second")
    try:
        with pytest.raises(ValueError, match="keeps buckets, not hit times"):
            lim.window.hit_times("k")
    finally:
        lim.unlink()
