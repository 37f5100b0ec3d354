"""A limiter's rates changed live on redis:// (docs/redis.md, "Changing limits live"): opening it
with other rates is not an error, the newest rates win in every process at its next call, and
the counts carry over by on_change, strictly in every interval across the change.

Real processes, one shared hand-driven clock (``ManualClock(path=)`` as the server's time), on a
plain server, a 3-master cluster and a cluster with the name's keys spread. The test process
drives the time in steps of one second; at each step every worker tries a few hits and reports
how many it was admitted, so each admitted hit's time is known exactly.
"""

from __future__ import annotations

import pytest
from support.redis_live import Worker

import shmwin
from shmwin import Limiter, ManualClock, TokenBucket
from shmwin.backends.redis.testing import ServerTime
from shmwin.inspector.snapshots import redis_keys
from shmwin.rate import parse_many

redis = pytest.importorskip("redis")
S = 1_000_000_000
T0 = 10**15  # a server time far from 0, as TIME is

@pytest.fixture(params=["server", "cluster", "spread"])
def live_url(request: pytest.FixtureRequest) -> str:
    if request.param == "server":
        return str(request.getfixturevalue("redis_server").url)
    url = str(request.getfixturevalue("redis_cluster").url)
    return url + "?spread=4" if request.param == "spread" else url


def _over(admitted: list[tuple[int, bool]], period_ns: int, limit: int, carry: bool) -> list[str]:
    """The intervals [a, a + period) that break the contract across the change. ``admitted``:
    (time, after the change) per admitted hit. An interval with a hit admitted after the change
    holds at most ``limit`` -- counting, with ``carry``, the hits admitted before the change in it
    (a lower limit does not undo those: an interval of them alone is not checked)."""
    bad = []
    for a in sorted({t for t, _ in admitted}):
        inside = [after for t, after in admitted if a <= t < a + period_ns]
        post = sum(inside)
        held = len(inside) if carry else post
        if post and held > limit:
            bad.append(f"[{(a - T0) / S:.0f} s +{period_ns / S:.0f} s): {held} > {limit}")
    return bad


CHANGES = {
    "in-place-lower": ("carry", "30/minute", "12/minute"),
    "in-place-higher": ("carry", "12/minute", "30/minute"),
    "other-periods": ("carry", "30/minute", "2/second;12/minute"),
    "other-buckets": ("carry", "30/minute", "20/30second"),
    "reset": ("reset", "30/minute", "12/minute"),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_a_change_across_processes_is_strict_and_stale_workers_follow(live_url, name, tmp_path, change):
    on_change, old_rates, new_rates = CHANGES[change]
    clock = ManualClock(T0, path=tmp_path / "clock")
    old = [Worker(name, live_url, old_rates, "carry", tmp_path / "clock") for _ in range(2)]
    admitted: list[tuple[int, bool]] = []

    def step(workers: list[Worker], after: bool, tries: int = 2) -> None:
        for w in workers:
            admitted.extend([(clock(), after)] * int(w.ask(f"hit k {tries}")))
        clock.advance(1)

    try:
        for _ in range(75):  # the old code alone: at its limit
            step(old, after=False)
        new = Worker(name, live_url, new_rates, on_change, tmp_path / "clock")  # the deploy: the change
        for _ in range(150):
            step([*old, new], after=True)
        want = ";".join(map(str, parse_many(new_rates)))
        assert [w.ask("rates") for w in old] == [want, want]  # the stale workers follow the newest rates
        for rate in parse_many(new_rates):
            assert _over(admitted, rate.period_ns, rate.limit, carry=on_change == "carry") == []
        assert sum(after for _, after in admitted) >= 2 * parse_many(new_rates)[-1].limit  # it admits
        for w in [*old, new]:
            w.close()
    finally:
        for w in old:
            w.proc.kill()
        Limiter.attach(name, backend=live_url).unlink()


def test_carry_in_place_keeps_the_counts_and_a_stale_handle_follows(live_url, name):
    clock = ServerTime(ManualClock(T0))
    old = Limiter(name, "5/minute", backend=live_url, clock=clock)
    try:
        assert sum(old.hit("k") for _ in range(3)) == 3
        new = Limiter(name, "4/minute", backend=live_url, clock=clock)
        assert new.stats("k").used == 3  # the counts kept as they are
        assert [old.hit("k") for _ in range(2)] == [True, False]  # the old handle: 4, not 5
        assert old.rates == new.rates == [shmwin.Rate(4, 60 * S)]
        new.set_rates("6/minute")
        assert sum(old.hit("k") for _ in range(5)) == 2
    finally:
        old.unlink()


def test_other_periods_carry_the_held_hits_and_reset_forgets_them(live_url, name):
    clock = ManualClock(T0)
    lim = Limiter(name, "10/minute", backend=live_url, clock=ServerTime(clock))
    try:
        assert sum(lim.hit("a") for _ in range(7)) == 7
        clock.advance(20)
        Limiter(name, "8/30second", backend=live_url, clock=ServerTime(clock))  # other period, other buckets
        assert sum(lim.hit("a") for _ in range(5)) == 1  # 7 carried: 8 - 7
        clock.advance(33)  # the carried hits leave with the new period (and its bucket, 1.5 s)
        assert sum(lim.hit("a") for _ in range(10)) == 8
        Limiter(name, "3/minute", backend=live_url, clock=ServerTime(clock), on_change="reset")
        assert sum(lim.hit("a") for _ in range(5)) == 3  # the counts start again
        with pytest.raises(shmwin.GeometryMismatchError, match="on_change='carry'"):
            Limiter(name, "4/minute", backend=live_url, clock=ServerTime(clock), on_change="raise")
        assert lim.rates == [shmwin.Rate(3, 60 * S)]
    finally:
        lim.unlink()


def test_after_the_old_rows_expire_a_one_rate_limiter_is_lean_again(redis_server, name):
    clock = ManualClock(T0)
    lim = Limiter(name, "5/minute", backend=redis_server.url, clock=ServerTime(clock))
    try:
        lim.hit("a")
        lim.set_rates("5/10second")  # another period: the old layout's rows are carried on first touch
        assert redis_keys(redis_server.url, name) == ["a"]  # shmwin show: the old layout's row
        assert lim.stats("a").used == 1
        assert redis_keys(redis_server.url, name) == ["a"]  # ... and the new one
        clock.advance(120)  # past the old layout's longest period: no row of it holds a live hit
        lim.hit("b")
        assert lim._backend._olds == ()  # the earlier layout is left out: the lean script again
        assert sum(lim.hit("b") for _ in range(9)) == 4
    finally:
        lim.unlink()


@pytest.mark.parametrize("scheme", ["", "shm+"], ids=["redis", "shm+redis"])
def test_a_token_bucket_carries_the_tokens_in_use_and_a_stale_handle_follows(redis_server, name, scheme):
    url, clock = scheme + redis_server.url, ManualClock(T0)
    old = TokenBucket(name, "10/minute", burst=5, backend=url, clock=ServerTime(clock))
    try:
        assert sum(old.hit("k") for _ in range(4)) == 4  # 4 of 5 in use
        new = TokenBucket(name, "10/minute", burst=3, backend=url, clock=ServerTime(clock))
        assert [old.hit("k"), new.hit("k")] == [False, False]  # 4 in use, past the new burst: none left
        assert old.burst == 3  # the stale handle follows at its next call
        clock.advance(6)  # one token back at 10/minute: 3 in use still, the whole burst
        assert sum(old.hit("k") for _ in range(3)) == 0  # a change never hands out a token
        clock.advance(6)
        assert sum(old.hit("k") for _ in range(3)) == 1
        taken = []  # from the change on, any interval of t takes at most burst + rate x t
        for second in range(120):
            taken += [second] * sum(new.hit("k") for _ in range(2))
            clock.advance(1)
        for start in range(120):
            for length in (1, 10, 60):
                assert sum(start <= s < start + length for s in taken) <= 3 + length * 10 // 60
        with pytest.raises(shmwin.GeometryMismatchError, match="on_change='carry'"):
            TokenBucket(name, "20/minute", burst=3, backend=url, clock=ServerTime(clock), on_change="raise")
        TokenBucket(name, "20/minute", burst=3, backend=url, clock=ServerTime(clock), on_change="reset")
        assert sum(old.hit("j") for _ in range(5)) == 3 and old.rate == shmwin.Rate(20, 60 * S)
    finally:
        old.unlink()
