"""ShmwinBucket, pyrate-limiter's bucket on shared memory: exact across processes that open it by
name (spawned, and unrelated ``python -c``), every rate checked and counted together, pyrate's
retry-after, what it refuses. Time is driven by hand through the items' timestamps (pyrate's
own seam: a bucket counts an item at its timestamp)."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest
from support.helpers import run_python

pytest.importorskip("pyrate_limiter")

from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate, RateItem
from pyrate_limiter.abstracts.algorithm import GCRA, FixedWindow
from pyrate_workers import pyrate_acquire

from shmwin.integrations.pyrate import ShmwinBucket

pytestmark = pytest.mark.integration

T0_MS = 5_000_000  # a made-up time, far from the clock's: the items carry it


@pytest.fixture
def bucket(name):
    b = ShmwinBucket([Rate(3, 1000), Rate(5, 10_000)], name)
    yield b
    b.unlink()


CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
from pyrate_workers import pyrate_acquire
print(pyrate_acquire(sys.argv[1], int(sys.argv[2]), 600))
"""


def test_four_spawned_and_two_unrelated_processes_admit_exactly_the_limit(name):
    """1,000 an hour, 6 x 600 offered by 4 spawned processes and 2 ``python -c`` ones at once:
    exactly 1,000 admitted (pyrate's MultiprocessBucket shares only a parent's children)."""
    limit = 1000
    opener = ShmwinBucket([Rate(limit, Duration.HOUR)], name)
    try:
        here = __file__.rsplit("/", 1)[0]
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            spawned = pool.starmap_async(pyrate_acquire, [(name, limit, 600)] * 4)
            unrelated = [run_python(CHILD, name, str(limit), here) for _ in range(2)]
            admitted = sum(spawned.get(120)) + sum(int(p.stdout) for p in unrelated)
        assert admitted == limit
        assert opener.count() == limit
    finally:
        opener.unlink()


def test_every_rate_is_checked_and_counted_together(bucket):
    """A refusal by the longer rate counts nothing in the shorter one (one native section)."""
    at = [T0_MS + 10 * i for i in range(3)]
    assert all(bucket.put(RateItem("x", t)) for t in at)
    assert bucket.put(RateItem("x", T0_MS + 40)) is False  # 3 a second
    assert bucket.failing_rate is bucket.rates[0]
    assert bucket.put(RateItem("x", T0_MS + 1100, weight=2)) is True  # the first 3 left the second
    assert bucket.put(RateItem("x", T0_MS + 1200, weight=1)) is False  # 5 in 10 s
    assert bucket.failing_rate is bucket.rates[1]
    assert bucket.count() == 5
    assert bucket.put(RateItem("x", T0_MS + 10_001)) is True  # the first hit left the 10 s


@pytest.mark.parametrize("weight", [1, 2, 3])
def test_retry_after_is_pyrates_own(name, weight):
    """What put() records for a refusal is what pyrate's InMemoryBucket records, step by step."""
    rates = [Rate(3, 1000), Rate(5, 5000)]
    ours, theirs = ShmwinBucket(rates, name), InMemoryBucket(rates)
    try:
        for step in range(60):
            item = RateItem("x", T0_MS + step * 97, weight=weight)
            assert ours.put(item) is theirs.put(item), step
            assert ours.failing_rate == theirs.failing_rate, step
            assert ours.waiting(item) == theirs.waiting(item), step
    finally:
        ours.unlink()


def test_peek_count_and_leak(bucket):
    """peek: one per hit, newest first; count: the longest period's; leak: nothing left to do."""
    assert bucket.peek(0) is None and bucket.count() == 0
    bucket.put(RateItem("a", T0_MS))
    bucket.put(RateItem("b", T0_MS + 5, weight=2))
    assert [bucket.peek(i).timestamp for i in range(3)] == [T0_MS + 5, T0_MS + 5, T0_MS]
    assert bucket.peek(3) is None and bucket.peek(-1) is None
    assert bucket.peek(0).name == bucket.key
    assert bucket.count() == 3
    assert bucket.leak(T0_MS + 20_000) == 0
    bucket.flush()
    assert bucket.count() == 0 and bucket.failing_rate is None


def test_a_weight_over_the_limit_never_fits(bucket):
    item = RateItem("x", T0_MS, weight=4)
    assert bucket.put(item) is False
    assert bucket.waiting(item) == -1  # pyrate: give up
    assert bucket.count() == 0


def test_another_bucket_of_the_same_name_shares_it_and_pickles_by_name(bucket):
    """(Stamped by the clock, as pyrate's limiter stamps them: each instance reads at its now.)"""
    other = ShmwinBucket([Rate(3, 1000), Rate(5, 10_000)], bucket.name)
    try:
        assert other.put(RateItem("x", other.now())) is True
        copy = pickle.loads(pickle.dumps(bucket))
        assert copy.put(RateItem("x", copy.now())) is True
        assert bucket.count() == 2
        copy.close()
    finally:
        other.close()


def test_keys_are_separate_buckets_of_one_segment(name):
    a = ShmwinBucket([Rate(1, 1000)], name, key="alice")
    b = ShmwinBucket([Rate(1, 1000)], name, key="bob")
    try:
        assert a.put(RateItem("x", T0_MS)) and b.put(RateItem("x", T0_MS))
        assert not a.put(RateItem("x", T0_MS + 1))
    finally:
        b.close()
        a.unlink()


@pytest.mark.parametrize("algorithm", [FixedWindow(), GCRA()])
def test_other_algorithms_are_refused_clearly(name, algorithm):
    with pytest.raises(ValueError, match="sliding-window log only"):
        ShmwinBucket([Rate(3, 1000)], name, algorithm=algorithm)


def test_pyrate_limiter_blocks_on_it_until_a_hit_leaves(name):
    """pyrate's blocking acquire waits on the wait the bucket recorded (a real 1 s rate): the
    third acquire is admitted, no earlier than the first two left."""
    bucket = ShmwinBucket([Rate(2, 1000)], name)
    try:
        limiter = Limiter(bucket)
        assert limiter.try_acquire("x") and limiter.try_acquire("x")
        first_ms = bucket.peek(1).timestamp
        assert limiter.try_acquire("x")  # it waited
        assert bucket.peek(0).timestamp > first_ms + 1000
    finally:
        bucket.unlink()


def test_threads_sharing_one_bucket_and_a_reader_admit_exactly_the_limit(name):
    """8 threads acquire through one bucket while another reads it (count, peek: each sets what
    the limiter's clock reads, per thread): exactly 100 of 400 for 100/hour."""
    import threading

    bucket = ShmwinBucket([Rate(100, Duration.HOUR)], name)
    limiter, admitted, done = Limiter(bucket), [0] * 8, threading.Event()

    def acquire(i: int) -> None:
        admitted[i] = sum(bool(limiter.try_acquire("x", blocking=False)) for _ in range(50))

    def read() -> None:
        while not done.is_set():
            assert 0 <= bucket.count() <= 100
            bucket.peek(0)

    reader = threading.Thread(target=read)
    threads = [threading.Thread(target=acquire, args=(i,)) for i in range(8)]
    try:
        reader.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        reader.join()
        assert sum(admitted) == 100 and bucket.count() == 100
    finally:
        done.set()
        bucket.unlink()
