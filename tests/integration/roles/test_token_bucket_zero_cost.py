"""``TokenBucket.test(k, 0)`` answers what ``hit(k, 0)`` does: taking nothing is always allowed
(x/time/rate), whatever the bucket holds and whichever clock reads it (#33).

At 4ed36b0 the core's ``token_hit`` answered a cost of 0 True at once, but ``token_check`` (behind
``test`` and ``acquire``) ran the GCRA test, which a process whose clock lags the one that
emptied the bucket fails: ``test(k, 0)`` was False and ``acquire(k, cost=0)`` waited, while
``hit(k, 0)`` was True. Checked over states -- a fresh key, an emptied bucket, the same bucket
read by a lagging clock, a table full with ``on_full="deny"`` -- and on Redis too.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from shmwin import ManualClock, TokenBucket

pytestmark = pytest.mark.integration

NOW = 10**13


def _zero(bucket: TokenBucket, key: str) -> tuple[bool, bool, bool, bool]:
    """(test, hit, acquire, test again) for a cost of 0: all True."""
    acquired = bucket.acquire(key, timeout=0, cost=0)
    return (bucket.test(key, 0), bucket.hit(key, 0), acquired, bucket.test(key, 0.0))


def test_a_cost_of_zero_is_always_allowed_on_shared_memory(name):
    ahead = ManualClock(NOW)
    with TokenBucket(name, "1/second", burst=3, capacity=2, on_full="deny", clock=ahead) as bucket:
        assert _zero(bucket, "fresh") == (True,) * 4
        assert [bucket.hit("k") for _ in range(4)] == [True, True, True, False]
        assert _zero(bucket, "k") == (True,) * 4  # empty: nothing is still there to take
        assert bucket.test("k", 1) is False
        bucket.hit("other")  # the table's two keys are live: a third finds it full
        assert bucket.hit("third") is False
        assert _zero(bucket, "third") == (True,) * 4
        for lag_s in (1, 3, 30):  # a reader whose clock lags the one that emptied the bucket
            with TokenBucket.attach(name, clock=ManualClock(NOW - lag_s * 10**9)) as behind:
                assert _zero(behind, "k") == (True,) * 4, lag_s
                assert behind.test("k", 1) is False  # a real cost is still refused: strict
        bucket.unlink()


LAGGING = r"""
import sys
from shmwin import ManualClock, TokenBucket
with TokenBucket.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2]))) as b:
    print(b.test("k", 0), b.hit("k", 0), b.acquire("k", timeout=0, cost=0), b.test("k", 1))
"""


def test_a_lagging_process_reads_a_zero_cost_as_hit_does(name):
    with TokenBucket(name, "10/minute", burst=5, clock=ManualClock(NOW)) as bucket:
        assert [bucket.hit("k") for _ in range(5)] == [True] * 5
        lagging = [sys.executable, "-c", LAGGING, name, str(NOW - 20 * 10**9)]
        out = subprocess.run(lagging, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["True", "True", "True", "False"]
        bucket.unlink()


def test_a_cost_of_zero_is_always_allowed_on_redis(redis_server, name):
    with TokenBucket(name, "1/second", burst=2, backend=redis_server.url) as bucket:
        assert _zero(bucket, "fresh") == (True,) * 4
        assert [bucket.hit("k") for _ in range(3)] == [True, True, False]
        assert _zero(bucket, "k") == (True,) * 4
        bucket.unlink()
