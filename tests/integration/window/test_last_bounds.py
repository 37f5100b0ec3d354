"""``total(last=s)`` never counts an event older than ``s``, and misses at most one bucket width
of the oldest events -- whatever ``s`` is, not only a whole number of buckets. (Reads took the
newest ceil(s / bucket) buckets: with 1-minute buckets an event 119 s old was in
``total(last="90s")``, and with 1-s buckets one 0.9 s old in ``total(last=0.5)``: red team
rtwin.) A model over random event times and reads, on a manual clock."""

from __future__ import annotations

import random

import pytest

from shmwin import ManualClock, Window

S = 1_000_000_000


def _ages_ns(events: list[int], now_ns: int) -> list[int]:
    return [now_ns - t for t in events]


@pytest.mark.parametrize("seed", range(3))
def test_a_read_over_any_last_counts_nothing_older_and_misses_at_most_a_bucket(make_name, seed):
    rng = random.Random(seed)
    clock = ManualClock(1_000 * S + rng.randrange(S))
    bucket_ns = S
    with Window(make_name("w"), span=10, buckets=10, clock=clock, keyed=True) as w:
        events: list[int] = []
        for _ in range(300):
            clock.advance(ns=rng.randrange(1, S // 3))
            if rng.random() < 0.6:
                w.add(1, key="k")
                events.append(clock())
            now = clock()
            events = [t for t in events if now - t < 10 * S]
            ages = _ages_ns(events, now)
            for last_s in (0.3, 0.5, 1, 1.5, 2.3, 4, 7.75, 9.9):
                last_ns = int(last_s * S)
                total = w.total(last=last_s)
                assert total <= sum(1 for a in ages if a <= last_ns), (last_s, total, ages)
                assert total >= sum(1 for a in ages if a < last_ns - bucket_ns), (last_s, total, ages)
                assert w.total(last=last_s, key="k") == total
                assert dict(w.top(1, last=last_s)).get("k", 0) == total
                assert sum(w.series(last=last_s)) == total
        w.unlink()


def test_a_coarser_resolution_read_counts_nothing_older_than_asked(make_name):
    clock = ManualClock(3_600 * S)  # a minute boundary
    with Window(make_name("w"), resolutions=("1m/1s", "1h/1m"), clock=clock) as w:
        w.add(1)
        clock.advance(119)  # 119 s old: the 1h/1m ring reads 90 s as 2 one-minute buckets
        assert w.total(last="90s") == 0
        assert w.total(last="120s") == 1 and w.total(last="3m") == 1
        assert w.rate(last="90s") == 0.0
        w.unlink()
