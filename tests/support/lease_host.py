"""One host of a two-tier (``shm+redis://``) limiter for the lease tests: two workers (two handles
on the host's lease segment) whose time is one ManualClock, the Redis scripts' time included
(ServerTime). Used by tests/integration/twotier/test_twotier_refusals.py and
test_twotier_lost_answers.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime


@contextmanager
def two_workers(
    name: str, rate: str, redis_url: str, clock: ManualClock
) -> Iterator[tuple[Limiter, Limiter]]:
    """The host's two workers on ``name`` (the first creates it at ``rate``); unlinked after."""
    url = "shm+" + redis_url
    a = Limiter(name, rate, backend=url, clock=ServerTime(clock))
    b = Limiter.attach(name, backend=url, clock=ServerTime(clock))
    try:
        yield a, b
    finally:
        a.unlink()
        b.close()
        a.close()
