"""A two-tier limiter's rates changed live (``shm+redis://``, docs/redis.md "Changing limits
live"): opening it with other rates, or ``set_rates``, changes them for every host at its next
round trip, as on redis://. Redis's lease log holds hits whatever the rates, so a carry keeps it
as it is (exact); a reset starts new rows. Real processes (support.redis_live.Worker), one host,
one hand-driven clock shared in a file.
"""

from __future__ import annotations

import pytest
from support.redis_live import Worker

import shmwin
from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration
T0 = 1_000 * 1_000_000_000


def test_other_rates_change_the_two_tier_limiter_for_every_process(redis_server, name, tmp_path):
    url, clock = "shm+" + redis_server.url, ManualClock(T0, path=tmp_path / "clock")
    old = Worker(name, url, "20/minute", "carry", tmp_path / "clock")
    try:
        assert old.ask("hit k 15") == "15"
        clock.advance(2)  # past every lease's deadline (D = 1 s): the host holds none of them
        new = Worker(name, url, "18/minute", "carry", tmp_path / "clock")  # the deploy: carried
        assert new.ask("hit k 10") == "3"  # the 15 leased under 20/minute count: 18 in all
        assert old.ask("hit k 10") == "0"  # refused on the host (the deny new's refusal left)
        assert old.ask("hit j 1") == "1"  # a round trip: the stale process reads the newest rates
        assert old.ask("rates") == new.ask("rates") == "18/minute"
        clock.advance(2)
        reset = Worker(name, url, "5/minute", "reset", tmp_path / "clock")
        # reset: the counts start again (j's hit under 18/minute is forgotten; k stays refused
        # on this host until Redis's answer of its refusal: refusals only, never a hit more)
        assert reset.ask("hit j 3") == "3"
        assert old.ask("hit j 10") == "2"
        for w in (old, new, reset):
            w.close()
    finally:
        Limiter.attach(name, backend=url).unlink()


def test_set_rates_and_raise_on_the_two_tier_backend(redis_server, name):
    url, clock = "shm+" + redis_server.url, ServerTime(ManualClock(T0))
    lim = Limiter(name, "10/minute", backend=url, clock=clock)
    try:
        assert sum(lim.hit("a") for _ in range(4)) == 4
        with pytest.raises(shmwin.GeometryMismatchError, match="on_change='carry'"):
            Limiter(name, "20/minute", backend=url, clock=clock, on_change="raise")
        lim.set_rates("5/minute")
        assert lim.rates == [shmwin.Rate(5, 60 * 10**9)]
        assert Limiter.attach(name, backend=url, clock=clock).rates == lim.rates
    finally:
        lim.unlink()
