"""The two-tier backend (``shm+redis://``): leases of hits from a real redis-server, and from a
Redis Cluster (``shm+redis+cluster://``), spent in shared memory. Time is a ManualClock (in a
file where several processes share it); nothing sleeps to a boundary. Every test here is one
host (its processes real ones); tests/integration/twotier/test_twotier_hosts.py runs three, each in a
namespace with its own /dev/shm.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal

import pytest
from support.servers import redis_client

from shmwin import BackendUnavailableError, Limiter, ManualClock
from shmwin.backends import twotier
from shmwin.backends.redis.testing import ServerTime
from shmwin.rate import parse_many

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration
S = 1_000_000_000
T0 = 1_000 * S
CTX = mp.get_context("fork")


def two_tier(url: str) -> str:
    return "shm+" + url


@pytest.fixture
def server_url(redis_url) -> str:
    """A plain redis-server's URL, then a Redis Cluster's (``redis+cluster://``)."""
    return redis_url


@pytest.fixture
def url(server_url) -> str:
    return two_tier(server_url)


def redis_keys(server_url: str, name: str) -> list[bytes]:
    client = redis_client(server_url)
    try:
        return sorted(client.scan_iter(match=f"shmwin:{{{name}}}:*"))
    finally:
        client.close()


def leased(server_url: str, name: str, key: str) -> dict[int, tuple[int, int]]:
    """Redis's lease log of ``key``: id -> (time µs, hits) (its fields are ``<id>:<grant time>``)."""
    client = redis_client(server_url)
    try:
        raw = client.hgetall(f"shmwin:{{{name}}}:L:{key}")
    finally:
        client.close()
    return {int(k.partition(b":")[0]): tuple(int(v) for v in val.split()) for k, val in raw.items()}  # type: ignore[misc]


@pytest.fixture
def limiter(name, url, server_url):
    made: list[Limiter] = []

    def make(rates: str = "100/minute", clock: ManualClock | None = None, **kw) -> Limiter:
        lim = Limiter(name, rates, backend=url, clock=None if clock is None else ServerTime(clock), **kw)
        made.append(lim)
        return lim

    yield make
    if made:
        made[0].unlink()
    for lim in made:
        lim.close()
    assert redis_keys(server_url, name) == [], "the test left redis keys behind"


def test_the_url_opens_a_two_tier_limiter(limiter):
    lim = limiter(clock=ManualClock(T0))
    assert isinstance(lim._backend, twotier.TwoTierLimiter)
    assert lim.url.startswith(("shm+redis://", "shm+redis+cluster://"))
    assert [str(r) for r in lim.rates] == [str(r) for r in parse_many("100/minute")]


def test_never_more_than_the_limit_and_leases_grow(limiter, server_url, name):
    clock = ManualClock(T0)
    lim = limiter("100/minute", clock=clock)
    assert sum(lim.hit("k") for _ in range(150)) == 100
    words = lim._backend.leases()["k"]
    served, leases = words[8], words[9]
    assert served == 100
    assert leases < 20, f"{leases} round trips for 100 hits: leases should grow"
    entries = leased(server_url, name, "k")
    assert sum(k for _, k in entries.values()) == 100
    clock.advance(59.9)
    assert not lim.hit("k")
    clock.advance(3.2)  # a minute and a bucket (3 s) after the spends (given back at their last spend)
    assert sum(lim.hit("k") for _ in range(150)) == 100


def test_a_lease_is_spent_only_until_its_deadline(limiter, server_url, name):
    clock = ManualClock(T0)
    lim = limiter("1000/minute", clock=clock)
    for _ in range(4):
        assert lim.hit("k")  # leases of 1, 2, then 4: one of it spent
    lease_id, granted, spent, deadline_ns = lim._backend.leases()["k"][:4]
    assert lease_id > 0 and spent < granted
    clock.set(deadline_ns + 1)  # past the deadline: sealed, given back, a new lease taken
    assert lim.hit("k")
    entries = leased(server_url, name, "k")
    assert entries[lease_id][1] == spent, "the expired lease's unused hits went back"
    assert lim._backend.leases()["k"][0] != lease_id


def test_close_gives_the_unused_part_back(limiter, server_url, name, url):
    clock = ManualClock(T0)
    lim = limiter("800/minute", clock=clock)
    for _ in range(40):
        assert lim.hit("k")
    _, granted, spent = lim._backend.leases()["k"][:3]
    assert granted > spent
    lim.close()
    entries = leased(server_url, name, "k")
    assert sum(k for _, k in entries.values()) == 40, "only what was spent still counts"
    again = limiter("800/minute", clock=clock)
    assert again.stats("k").used == 40
    assert sum(again.hit("k") for _ in range(800)) == 760


def test_refund_gives_hits_back_to_the_live_lease(limiter):
    clock = ManualClock(T0)
    lim = limiter("8/minute", clock=clock)  # leases of one hit (8 // 8)
    assert lim.hit("k", 1)
    assert lim.refund("k", 5) == 1
    assert lim.hit("k")
    assert sum(lim.hit("k") for _ in range(20)) == 7


def test_test_stats_and_acquire(limiter):
    clock = ManualClock(T0)
    lim = limiter("10/minute", clock=clock)
    assert lim.test("k")
    assert sum(lim.hit("k") for _ in range(10)) == 10
    assert not lim.test("k")
    st = lim.stats("k")
    assert st.used == 10 and st.remaining == 0 and 60 <= st.reset_after <= 63  # forgotten as a ring would
    assert not lim.acquire("k", timeout=0)
    assert lim.acquire("k", timeout=120)  # the ManualClock sleeps by moving on
    assert clock.sleeps and sum(clock.sleeps) <= 63


def test_attach_reads_the_rates_from_redis(limiter, name, url):
    lim = limiter("5/second;100/minute", clock=ManualClock(T0), capacity=64)
    assert lim.hit("k")
    other = Limiter.attach(name, backend=url, clock=ServerTime(ManualClock(T0)))  # this host's segment
    try:
        assert other.rates == lim.rates
        assert other._backend.lease_window.geometry == lim._backend.lease_window.geometry
    finally:
        other.close()


def test_a_cost_above_the_limit_is_refused_without_waiting(limiter):
    lim = limiter("10/minute", clock=ManualClock(T0))
    assert not lim.hit("k", 11)
    assert lim.hit("k", 10)


def _take_a_lease_and_die(name: str, url: str, clock_path: str, k: int) -> None:
    lim = Limiter(name, "100/minute", backend=url, clock=ServerTime(ManualClock(path=clock_path)))
    lim._backend._server.lease("k", k, 1, lim._backend._spend_us, [])  # taken in Redis, not recorded
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_kill_between_taking_a_lease_and_recording_it_strands_hits(limiter, url, name, tmp_path):
    """The lease counts in Redis until d + P; the host never saw it: refused, never admitted."""
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(T0, path=clock_path)
    lim = limiter("100/minute", clock=clock)
    p = CTX.Process(target=_take_a_lease_and_die, args=(name, url, clock_path, 12))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    assert sum(lim.hit("k") for _ in range(200)) == 88
    clock.advance(65)  # d + P and a bucket: the stranded lease left the window
    assert sum(lim.hit("k") for _ in range(200)) == 100


def _hammer(name: str, url: str, clock_path: str, n: int, out) -> None:  # type: ignore[no-untyped-def]
    lim = Limiter(name, "1000/minute", backend=url, clock=ServerTime(ManualClock(path=clock_path)))
    out.put(sum(lim.hit("k") for _ in range(n)))
    lim.close()


def test_the_workers_of_a_host_share_its_leases(limiter, url, name, tmp_path):
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(T0, path=clock_path)
    lim = limiter("1000/minute", clock=clock)
    out = CTX.Queue()
    procs = [CTX.Process(target=_hammer, args=(name, url, clock_path, 2000, out)) for _ in range(3)]
    for p in procs:
        p.start()
    admitted = sum(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert admitted == 1000
    words = lim._backend.leases()["k"]
    assert words[8] == 1000  # served locally
    assert words[9] + words[10] < 200, f"{words[9]} leases, {words[10]} refusals for 6000 hits"


@pytest.mark.parametrize("on_error", ["allow", "deny", "raise"])
def test_redis_away_spends_what_is_held_then_on_error_decides(own_redis, make_name, on_error):
    name = make_name("away")
    clock = ManualClock(T0)
    backend = two_tier(own_redis.url)
    lim = Limiter(name, "800/minute", backend=backend, clock=ServerTime(clock), on_error=on_error)
    try:
        for _ in range(8):
            assert lim.hit("k")
        _, granted, spent = lim._backend.leases()["k"][:3]
        held = granted - spent
        assert held > 0
        own_redis.stop()
        assert all(lim.hit("k") for _ in range(held)), "what the host holds is spent"
        if on_error == "raise":
            with pytest.raises(BackendUnavailableError):
                lim.hit("k")
        else:
            assert [lim.hit("k") for _ in range(5)] == [on_error == "allow"] * 5
        own_redis.start()
        lim._backend._down_until = 0.0  # the backoff is real time: not waited for here
        clock.advance(64)  # the restarted server forgot everything (no persistence here)
        assert lim.hit("k")
    finally:
        lim.unlink()
        lim.close()


def test_a_server_clock_stepped_back_or_forward_never_admits_more_than_the_limit(limiter):
    """Redis's time source (the scripts' ARGV[1]) steps back 21 s and forward 30 s while the
    host's clock runs on: in real time, never more than the limit in any minute."""
    host = ManualClock(T0)
    offset = [0]
    lim = limiter("10/minute", clock=host)
    lim._backend.server_clock = lambda: host() + offset[0]
    real = []
    for i in range(300):
        if i in (40, 150):
            offset[0] -= 21 * S
        if i == 220:
            offset[0] += 30 * S
        if lim.hit("k"):
            real.append(host())
        host.advance(1.5)
    most = max(sum(1 for b in real if a <= b < a + 60 * S) for a in real)
    assert most <= 10
    assert len(real) >= 50  # and it still admits, at about the limit's pace (450 s)


def test_show_and_the_prometheus_export_tell_leases_hits_served_and_round_trips(limiter, name):
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from support.cli_support import cli

    from shmwin.integrations.prometheus import ShmwinCollector

    lim = limiter("1000/minute")  # the host's clock: show reads it too
    for _ in range(300):
        assert lim.hit("alice")
    for _ in range(20):
        assert lim.hit("bob")
    words = lim._backend.leases()
    trips = sum(w[9] + w[10] for w in words.values())
    shown = cli("show", name, "--json")
    view = json.loads(shown.stdout)["lease"]
    assert view["served"] == 320 and view["keys"] == 2 and view["round_trips"] == trips
    assert view["leases"] == trips and view["refusals"] == 0
    text = cli("show", name).stdout
    assert "320 hits served locally" in text and f"{trips} round trips to redis" in text
    registry = CollectorRegistry()
    registry.register(ShmwinCollector([name]))
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(generate_latest(registry).decode())
        for s in f.samples
    }
    assert samples[("shmwin_lease_served", (("window", name),))] == 320
    assert samples[("shmwin_lease_round_trips", (("kind", "lease"), ("window", name)))] == trips


@pytest.mark.parametrize(
    "junk",
    [{"granted": 10**9}, {"deadline_ns": 2**61}, {"granted": -5, "spent": -9}, {"lease": -3},
     {"start_ns": -1}, {"served": -1, "leases": 2**63 - 1}],
    ids=["huge-grant", "far-deadline", "negative-counts", "negative-id", "negative-start", "tallies"],
)  # fmt: skip
def test_junk_in_a_lease_never_admits_a_hit_redis_did_not_grant(limiter, junk):
    from shmwin.backends.shm import format as words

    clock = ManualClock(T0)
    lim = limiter("100/minute", clock=clock)
    admitted = sum(lim.hit("k") for _ in range(20))
    b = lim._backend.lease_window
    row, _ = b._core.find("k")
    at = (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0]
    for word, value in junk.items():
        b._q[at + getattr(words, f"LEASE_STATE_{word.upper()}")] = value
    admitted += sum(lim.hit("k") for _ in range(300))
    assert 100 - 2 * (100 // 8) <= admitted <= 100, admitted  # junk strands a lease at most


def test_a_token_bucket_on_shm_redis_takes_its_tokens_from_redis(name, url, server_url):
    """No leases for a token bucket (strict only with a burst cut by D / T tokens): every take is
    redis://'s, so a bucket opened by redis:// under the same name sees the same tokens."""
    from shmwin import TokenBucket
    from shmwin.backends.redis import RedisTokenBucket

    clock = ManualClock(T0)
    bucket = TokenBucket(name, "10/second", burst=5, backend=url, clock=ServerTime(clock))
    direct = TokenBucket(name, "10/second", burst=5, backend=server_url, clock=ServerTime(clock))
    try:
        assert isinstance(bucket._backend, RedisTokenBucket)
        assert [bucket.hit("k") for _ in range(3)] == [True] * 3
        assert [direct.hit("k") for _ in range(3)] == [True, True, False]  # one bucket: 5 in all
        assert not bucket.hit("k") and bucket.stats("k").remaining == 0
        clock.advance(0.1)  # a token back, for either
        assert bucket.hit("k") and not direct.hit("k")
    finally:
        bucket.unlink()
        bucket.close()
        direct.close()
    assert redis_keys(server_url, name) == [], "the test left redis keys behind"
