"""Redis's clock may step back (or forward); the limits and counts must not go back with it.

Time is injected through the scripts' time source (``clock=``, ARGV[1]): a server clock that
runs with a "real" monotonic time the test drives, plus steps. Nothing here sleeps.
"""

from __future__ import annotations

import pytest
from support.servers import redis_client

import shmwin
from shmwin import Limiter, Window
from shmwin.backends.redis.testing import ServerTime

redis = pytest.importorskip("redis")
S = 1_000_000_000
START = 10**15  # a server clock in the far future of 0, as TIME is


class ServerClock:
    """What the scripts read as now: real (monotonic, driven by the test) plus steps."""

    def __init__(self) -> None:
        self.real = START
        self.offset = 0
        self.sleeps: list[float] = []

    def __call__(self) -> int:
        return self.real + self.offset

    def advance(self, seconds: float) -> None:
        self.real += round(seconds * S)

    def step(self, seconds: float) -> None:
        """The server's clock is set: back (negative) or forward; real time does not move."""
        self.offset += round(seconds * S)

    def sleep(self, seconds: float) -> None:  # what acquire() calls
        self.sleeps.append(seconds)
        self.advance(seconds)


def _most_in_any_minute(admitted: list[int]) -> int:
    """The most admitted hits in any 60 s interval of ``admitted`` (times in ns)."""
    return max((sum(1 for b in admitted if a <= b < a + 60 * S) for a in admitted), default=0)


def _drive(lim: Limiter, clock: ServerClock, steps: dict[int, float], tries: int = 200) -> tuple[list, list]:
    """One try every 1.5 s of real time; before try i, the server clock steps by steps[i] s.

    Returns the admitted hits' real times, and their times as the limiter must count them:
    real time plus every step *forward* so far (a forward step ages hits by itself; a step back
    gives nothing back)."""
    real, counted, ahead = [], [], 0
    for i in range(tries):
        if i in steps:
            clock.step(steps[i])
            ahead += max(round(steps[i] * S), 0)
        if lim.hit("k"):
            real.append(clock.real)
            counted.append(clock.real + ahead)
        clock.advance(1.5)
    return real, counted


def _clock_key(name: str) -> str:
    return f"shmwin:{{{name}}}:clock"


@pytest.mark.parametrize("back", [21, 180], ids=["21s", "3min"])
@pytest.mark.parametrize("spec", ["10/minute", "10/minute;1000/hour"], ids=["lean", "multi"])
def test_steps_back_never_admit_more_than_the_limit_in_real_time(redis_url, name, spec, back):
    clock = ServerClock()
    with Limiter(name, spec, backend=redis_url, clock=ServerTime(clock)) as lim:
        real, _ = _drive(lim, clock, {9: -back, 60: -back, 130: -7})
        assert _most_in_any_minute(real) == 10
        assert len(real) >= 45  # and it still admits at the limit's pace: 300 s, 10 a minute
        lim.unlink()


@pytest.mark.parametrize("back", [21, 180], ids=["21s", "3min"])
@pytest.mark.parametrize("spec", ["10/minute", "10/minute;1000/hour"], ids=["lean", "multi"])
def test_a_step_back_then_forward_ages_hits_by_the_forward_step_only(redis_url, name, spec, back):
    clock = ServerClock()
    with Limiter(name, spec, backend=redis_url, clock=ServerTime(clock)) as lim:
        real, counted = _drive(lim, clock, {20: -back, 60: +back, 100: -back, 140: +back / 2})
        assert _most_in_any_minute(counted) == 10
        before_forward = [t for t in real if t < START + 60 * 1.5 * S]
        assert _most_in_any_minute(before_forward) == 10
        assert len(real) >= 45
        lim.unlink()


def test_the_measured_case_a_step_back_21s_after_9_hits(redis_url, name):
    """9 admitted, the clock steps back 21 s: before, 19 were admitted within one minute."""
    clock = ServerClock()
    with Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        first, _ = _drive(lim, clock, {}, tries=9)
        clock.step(-21)
        then, _ = _drive(lim, clock, {}, tries=100)
        assert len(first) == 9 and _most_in_any_minute(first + then) == 10
        lim.unlink()


def test_reported_times_stay_true_after_a_step_back(redis_url, name):
    clock = ServerClock()
    with Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        for _ in range(10):
            assert lim.hit("k")
            clock.advance(1)
        clock.step(-21)
        stats = lim.stats("k")
        assert stats.used == 10 and 0 <= stats.reset_after <= 63
        clock.step(-180)
        assert 0 <= lim.stats("k").reset_after <= 63
        # the promised wait is kept in real time: acquire sleeps once, then is admitted
        before = clock.real
        assert lim.acquire("k")
        assert len(clock.sleeps) == 1
        assert 0 < clock.real - before <= 63 * S
        # ... and not earlier than the first hit leaves, 60 s (and a bucket at most) after it
        assert clock.real - START >= 60 * S
        lim.unlink()


def test_ttls_set_after_a_step_back_outlive_the_counts(redis_url, name):
    """TTLs are relative to the write and the name's time runs at the clock's pace after a
    step back, so a key set to expire then still outlives its counts."""
    r = redis_client(redis_url)
    clock = ServerClock()
    with (
        Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim,
        Window(name + "w", span=60, capacity=10, backend=redis_url, clock=ServerTime(clock)) as w,
    ):
        lim.hit("k"), w.add(1, key="a")
        clock.advance(50)
        lim.stats("k")  # seen at 50 s (a step between two calls only shows as their net move)
        clock.step(-180)
        assert lim.hit("k")
        w.add(1, key="a")
        stats = lim.stats("k")
        assert stats.used == 2 and 0 <= stats.reset_after <= 13  # the first hit, 50 s old
        assert r.pttl(f"shmwin:{{{name}}}:k:k") >= 60_000  # the newest hit counts for 60 s more
        assert r.pttl(f"shmwin:{{{name}w}}:k:a") >= 60_000
        assert r.pttl(f"shmwin:{{{name}w}}:keys") >= 60_000
        lim.unlink(), w.unlink()
    r.close()


def test_a_step_forward_beyond_the_period_frees_the_limit(redis_url, name):
    clock = ServerClock()
    with Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        assert all(lim.hit("k") for _ in range(10))
        assert not lim.hit("k")
        clock.step(-21)
        assert not lim.hit("k")
        clock.step(+21)  # the clock is where it was; the limiter's time 21 s on, no more
        assert not lim.hit("k") and lim.stats("k").used == 10
        clock.advance(30)  # 51 s
        assert not lim.hit("k")
        clock.step(+64)  # more than the period (and its partial bucket): every hit has aged out
        assert lim.stats("k").used == 0
        assert all(lim.hit("k") for _ in range(10))
        assert not lim.hit("k")
        lim.unlink()


def test_a_small_step_forward_ages_hits_by_the_step_only(redis_url, name):
    clock = ServerClock()
    with Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        assert all(lim.hit("k") for _ in range(10))
        clock.step(-21)
        assert lim.stats("k").used == 10  # the step back is seen: it gives no time back
        clock.advance(10)
        clock.step(+30)  # 40 s of time have passed for the limiter: not yet a minute
        assert lim.stats("k").used == 10
        clock.advance(24)  # now 64 s: the hits (and their partial bucket) are gone
        assert lim.stats("k").used == 0
        lim.unlink()


@pytest.mark.parametrize("back", [21, 180], ids=["21s", "3min"])
def test_a_windows_counts_never_go_down_because_of_a_step_back(redis_url, name, back):
    clock = ServerClock()
    with Window(name, span=60, buckets=60, capacity=100, backend=redis_url, clock=ServerTime(clock)) as w:
        for i in range(30):
            w.add(1, key=f"k{i % 3}")
            clock.advance(1)
        before = {k: w.total(key=k) for k in ("k0", "k1", "k2")}
        assert before == {"k0": 10, "k1": 10, "k2": 10} and w.total() == 30
        clock.step(-back)
        assert {k: w.total(key=k) for k in before} == before
        assert w.total() == 30
        assert sorted(w.keys()) == ["k0", "k1", "k2"]
        assert [k for k, _ in w.top(3)] and dict(w.top(3)) == before
        w.add(5, key="k0")  # counted now, not in a bucket of the past
        assert w.total(key="k0") == 15 and w.add_and_total(1, key="k1") == 11
        clock.advance(35)  # real time: the first adds (at 0 s, 1 s, ...) leave once 60 s have passed
        assert w.total(key="k2") < 10 and w.total(key="k0") < 15
        clock.advance(61)
        assert w.total() == 0 and w.keys() == []
        w.unlink()


def test_a_step_forward_ages_a_windows_counts_as_far(redis_url, name):
    clock = ServerClock()
    with Window(name, span=60, buckets=60, capacity=100, backend=redis_url, clock=ServerTime(clock)) as w:
        w.add(7, key="a")
        clock.step(-180)
        clock.step(+30)  # net -150 s on the server, 0 s for the window
        assert w.total(key="a") == 7
        clock.step(+61)
        assert w.total(key="a") == 0 and w.keys() == []
        w.unlink()


def test_an_exact_limiter_stays_refused_on_redis(redis_url, name):
    """exact=True keeps hit times only in shared memory; on redis it is refused, not approximated."""
    with pytest.raises(shmwin.NotSupportedError, match="exact"):
        Limiter(name, "10/minute", exact=True, backend=redis_url)


def test_the_clock_key_shares_the_hash_tag_and_goes_with_the_name(redis_url, name):
    r = redis_client(redis_url)
    clock = ServerClock()
    with Limiter(name, "10/minute", backend=redis_url, clock=ServerTime(clock)) as lim:
        lim.hit("k")
        assert r.exists(_clock_key(name))
        assert f"{{{name}}}" in _clock_key(name)
        assert r.pttl(_clock_key(name)) == -1  # it outlives every key whose counts it dates
        lim.clear("k")
        assert r.exists(_clock_key(name))  # one key forgotten: the others still need the time
        lim.unlink()
    assert r.keys(f"shmwin:{{{name}}}:*") == []
    with Window(name, span=60, capacity=10, backend=redis_url, clock=ServerTime(clock)) as w:
        w.add(1, key="a")
        assert r.exists(_clock_key(name))
        w.reset()
        assert not r.exists(_clock_key(name))
        w.add(1, key="a")
        w.unlink()
    assert r.keys(f"shmwin:{{{name}}}:*") == []
    r.close()


def test_every_script_with_a_time_touches_only_its_names_slot(redis_server, name, monkeypatch):
    """Every multi-key script names only keys under {NAME}: one Redis Cluster slot."""
    sent: list[tuple] = []
    real = redis.Redis.evalsha

    def spy(self, sha, numkeys, *rest):
        sent.append(tuple(rest[:numkeys]))
        return real(self, sha, numkeys, *rest)

    monkeypatch.setattr(redis.Redis, "evalsha", spy)
    with (
        Limiter(name, "10/minute", backend=redis_server.url) as lean,
        Limiter(name + "m", "10/minute;99/hour", backend=redis_server.url) as multi,
        Window(name + "w", span=60, capacity=10, backend=redis_server.url) as w,
    ):
        lean.hit("k"), lean.stats("k"), multi.hit("k"), multi.stats("k")
        w.add(1, key="a"), w.total(key="a"), w.total(), w.keys(), w.top(1), w.clear("a")
        assert len(sent) >= 10
        for keys in sent:
            tags = {k.split("}", 1)[0] + "}" for k in keys}
            assert len(tags) == 1 and all(k.startswith("shmwin:{") for k in keys), keys
        lean.unlink(), multi.unlink(), w.unlink()
