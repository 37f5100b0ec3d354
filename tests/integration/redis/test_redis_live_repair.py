"""A limiter's live state on redis when its keys are lost or rolled back (docs/redis.md, "What a
wipe or a rollback does"): the meta and the generation key must come back in step at the next
call of any process -- never an error forever -- and the newest rates any live process knows win.

Real processes (support.redis_live.Worker, the code each was started with) on one real server and
one hand-driven clock; the wipe is FLUSHDB (a restart without persistence), the rollback the
name's keys DUMPed before a change and RESTOREd after it (a restart from an older RDB snapshot).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.redis_live import Worker
from support.servers import redis_client

from shmwin import Limiter, ManualClock, Rate, TokenBucket
from shmwin.backends.redis.testing import ServerTime
from shmwin.rate import parse_many

redis = pytest.importorskip("redis")
T0 = 10**15


def _workers(name: str, url: str, tmp_path: Path, *rates: str) -> list[Worker]:
    ManualClock(T0, path=tmp_path / "clock")
    return [Worker(name, url, r, "carry", tmp_path / "clock") for r in rates]


def _meta_and_gen(url: str, name: str) -> tuple[bytes | None, bytes | None]:
    client = redis_client(url)
    return client.hget(f"shmwin:{{{name}}}:meta", "gen"), client.get(f"shmwin:{{{name}}}:gen")


def test_a_rollback_to_a_snapshot_before_a_change_converges_to_the_newest_rates(redis_server, name, tmp_path):
    url = redis_server.url
    client = redis_client(url)
    old, = _workers(name, url, tmp_path, "10/minute")
    try:
        assert old.ask("hit a 1") == "1"
        snapshot = {k: client.dump(k) for k in client.keys(f"shmwin:{{{name}}}:*")}
        new, = _workers(name, url, tmp_path, "20/minute")  # the change, after the snapshot
        assert new.ask("hit a 1") == "1"
        client.flushdb()  # the restart: the snapshot comes back, the change is gone from it
        for key, value in snapshot.items():
            client.restore(key, 0, value, replace=True)
        # the running new code re-claims its rates (the meta went back past them), counts carried
        assert new.ask("hit a 1") == "1"
        assert old.ask("hit a 20") == "18"  # the stale follows: 20/minute; 2 counted (the snapshot lost one)
        assert old.ask("rates") == new.ask("rates") == "20/minute"
        clock = ServerTime(ManualClock(path=tmp_path / "clock"))
        assert Limiter.attach(name, backend=url, clock=clock).stats("a").used == 20
        meta_gen, gen = _meta_and_gen(url, name)
        assert meta_gen is not None and meta_gen == gen  # the two agree again
        for w in (old, new):
            w.close()
    finally:
        Limiter.attach(name, backend=url).unlink()


def test_a_wipe_makes_a_fresh_name_and_the_newest_known_rates_win_again(redis_server, name, tmp_path):
    url = redis_server.url
    stale, newest = _workers(name, url, tmp_path, "100/minute", "3/minute")  # the deploy: 3/minute wins
    try:
        assert stale.ask("rates") == "100/minute"  # it has not called since: it knows 100/minute only
        redis_client(url).flushdb()
        assert stale.ask("hit k 10") == "10"  # the first claim after the wipe: its rates, a fresh name
        assert newest.ask("hit k 10") == "0"  # it knew newer rates: claimed again, the 10 carried
        assert stale.ask("hit k 10") == "0"
        assert stale.ask("rates") == newest.ask("rates") == "3/minute"
        redis_client(url).flushdb()
        assert newest.ask("hit j 2") == "2"  # now the newest code claims first ...
        assert stale.ask("hit j 10") == "1"  # ... and the other follows it, strict: 3 in all
        for w in (stale, newest):
            w.close()
    finally:
        Limiter.attach(name, backend=url).unlink()


@contextlib.contextmanager
def _running(name: str, url: str, tmp_path: Path, *rates: str) -> Iterator[list[Worker]]:
    """Workers for ``rates`` (a test may add more to the list): closed at the end, the name unlinked."""
    workers = _workers(name, url, tmp_path, *rates)
    try:
        yield workers
        for w in workers:
            w.close()
    finally:
        Limiter.attach(name, backend=url).unlink()


def test_the_meta_alone_evicted_the_newest_rates_win_again(redis_server, name, tmp_path):
    # red team F11 (maxmemory allkeys-lru evicts the meta, read only at opens): the stale process
    # re-claimed its rates above the surviving generation key, and the newest process adopted them
    url = redis_server.url
    with _running(name, url, tmp_path, "10/minute", "3/minute") as (stale, newest):
        assert newest.ask("hit k 1") == "1"
        redis_client(url).delete(f"shmwin:{{{name}}}:meta")
        assert stale.ask("hit k 10") == "9"  # it calls first: its rates (rows stayed) for now
        assert newest.ask("hit k 10") == "0"  # the newest re-claims 3/minute, the 10 carried
        assert newest.ask("hit j 10") == "3"
        assert stale.ask("hit j 10") == "0"
        assert stale.ask("rates") == newest.ask("rates") == "3/minute"


def test_a_rollback_past_two_changes_ends_on_the_newest_rates(redis_server, name, tmp_path):
    # red team F11b: the first caller after the rollback re-claimed with a generation past every
    # one known (the server's time), so the process that knew the newest rates adopted older ones
    url = redis_server.url
    client = redis_client(url)
    with _running(name, url, tmp_path, "100/minute") as workers:
        assert workers[0].ask("hit a 1") == "1"
        snapshot = {k: client.dump(k) for k in client.keys(f"shmwin:{{{name}}}:*")}
        workers += _workers(name, url, tmp_path, "50/minute")
        workers += _workers(name, url, tmp_path, "3/minute")
        first, middle, newest = workers
        assert middle.ask("rates") == "50/minute" and newest.ask("hit a 1") == "1"
        client.flushdb()
        for key, value in snapshot.items():
            client.restore(key, 0, value, replace=True)
        assert middle.ask("hit x 10") == "10"  # the middle calls first: 50/minute, for now
        assert newest.ask("hit y 10") == "3"  # the newest re-claims after it and wins
        assert middle.ask("hit y 10") == "0" and first.ask("hit y 10") == "0"
        assert {w.ask("rates") for w in workers} == {"3/minute"}


def test_an_unlinked_name_is_claimed_again_by_a_stale_handle_with_on_error_allow(redis_server, name):
    url = redis_server.url
    stale = Limiter(name, "100/minute", backend=url, on_error="allow")
    newest = Limiter(name, "3/minute", backend=url, on_error="allow")
    try:
        newest.unlink()
        assert newest.hit("j")
        assert [stale.hit("j") for _ in range(3)] == [True, True, False]  # no WindowNotFoundError
        assert stale.rates == newest.rates
    finally:
        stale.unlink()


def _unstrict(admitted: list[tuple[int, str]]) -> list[str]:
    """The admitted hits (time, rates in force) whose rates were over: each hit admitted under a
    rate counts every hit admitted before it (or with it) within that rate's period."""
    bad = []
    for i, (t, rates) in enumerate(admitted):
        for rate in parse_many(rates):
            inside = sum(t - rate.period_ns < u <= t for u, _ in admitted[: i + 1])
            if inside > rate.limit:
                bad.append(f"{(t - T0) / 1e9:.1f} s under {rate}: {inside}")
    return bad


def test_rates_flipping_back_and_forth_stay_strict_for_each_rate(redis_server, name, tmp_path):
    """A rolling deploy's ping-pong: old and new workers re-open with "10/minute" and "5/second"
    in turn; every layout still in a window is carried, so neither rate is ever over."""
    url, clock = redis_server.url, ManualClock(T0, path=tmp_path / "clock")
    admitted: list[tuple[int, str]] = []
    try:
        for _ in range(2):
            for rates in ("10/minute", "5/second"):
                worker = Worker(name, url, rates, "carry", tmp_path / "clock")  # opens: the change
                admitted += [(clock(), rates)] * int(worker.ask("hit k 20"))
                worker.close()
                clock.advance(1.1)
        assert _unstrict(admitted) == []
        assert sum(r == "10/minute" for _, r in admitted) == 10  # the first worker's, then none
    finally:
        Limiter.attach(name, backend=url).unlink()


def test_a_token_bucket_whose_burst_flips_hands_out_no_token(redis_server, name, tmp_path):
    """Burst 5 <-> 6 at one instant, across processes: the tokens in use carry as in use (past the
    new burst too), so all flips together hand out at most the larger burst."""
    url = redis_server.url
    ManualClock(T0, path=tmp_path / "clock")  # held still: no token comes back
    taken = 0
    try:
        for burst in (5, 6, 5, 6):
            worker = Worker(name, url, "1/minute", "carry", tmp_path / "clock", burst=burst)
            taken += int(worker.ask("hit k 10"))
            assert worker.ask("rates") == f"1/minute burst={burst}"
            worker.close()
        assert taken == 6
    finally:
        TokenBucket.attach(name, backend=url).unlink()


def test_changes_add_no_script_to_the_server_and_keep_a_short_history(redis_server, name):
    """The lean hit takes the limit and the generation as ARGV: one cached script per period and
    buckets, however many changes; and a storm of changes of period keeps 4 earlier layouts."""
    url, client = redis_server.url, redis_client(redis_server.url)
    lim = Limiter(name, "1000/minute", backend=url)
    try:
        lim.hit("k")
        cached = client.info("memory")["number_of_cached_scripts"]
        for limit in range(999, 979, -1):
            lim.set_rates(f"{limit}/minute")
            assert lim.hit("k")
        assert client.info("memory")["number_of_cached_scripts"] == cached
        for i in range(10):
            lim.set_rates("1000/minute" if i % 2 else "1000/61second")
            assert lim.hit("k")
        history = client.hget(f"shmwin:{{{name}}}:meta", "history").split(b";")
        assert len(history) == 4
    finally:
        lim.unlink()


class _Killed(BaseException):
    """The changer's death (SIGKILL) at one of its group-generation raises."""


@pytest.mark.parametrize("dies_at", [2, 6], ids=["before-its-change", "after-its-change"])
def test_a_dying_spread_changer_leaves_no_group_counting_stale_hits(
    redis_cluster, name, monkeypatch, dies_at
):
    """?spread=4: a change raises the 4 groups' generations, changes, raises them again. The
    changer dies at raise number ``dies_at``: before its change, the old rates stay everywhere
    (the stale hits in the groups it raised repair the name); after it, every group refuses the
    stale hits, which read the new rates."""
    from shmwin.backends.redis import scripts
    from shmwin.backends.redis.limiter import RedisLimiter

    url = redis_cluster.url + "?spread=4"
    stale = Limiter(name, "100/minute", backend=url)
    stale.hit("warm")
    real_eval, raises = RedisLimiter._eval, []

    def dying_eval(self, script, keys, args):
        if script is scripts.GEN:
            raises.append(keys)
            if len(raises) == dies_at:
                raise _Killed
        return real_eval(self, script, keys, args)

    monkeypatch.setattr(RedisLimiter, "_eval", dying_eval)
    with pytest.raises(_Killed):
        Limiter(name, "3/minute", backend=url)
    monkeypatch.setattr(RedisLimiter, "_eval", real_eval)
    try:
        admitted = [sum(stale.hit(f"user{i}") for _ in range(10)) for i in range(8)]
        limit = 10 if dies_at <= 4 else 3
        assert admitted == [limit] * 8
        assert stale.rates == [Rate(100 if dies_at <= 4 else 3, 60 * 10**9)]
    finally:
        stale.unlink()


def test_a_spread_change_after_the_server_clock_stepped_back_still_carries(redis_cluster, name):
    """?spread=4, TIME steps back 2 h: the name's own clock (moved by changes only) stands
    behind its groups' (moved by every hit); the old layout's end is dated on the newest, so its
    hits are carried by a change of period half an hour later."""
    url, now_ns = redis_cluster.url + "?spread=4", [10**18]
    lim = Limiter(name, "100/minute", backend=url, clock=ServerTime(lambda: now_ns[0]))
    try:
        lim.hit("other"), lim.hit("k")  # every group's clock read before the step back
        now_ns[0] -= 2 * 3600 * 10**9  # the server's clock steps back (a ManualClock cannot)
        for _ in range(30):
            lim.hit("other"), lim.hit("k")
            now_ns[0] += 60 * 10**9
        now_ns[0] += 61 * 10**9
        assert sum(lim.hit("k") for _ in range(150)) == 100
        lim.set_rates("100/61second")
        assert sum(lim.hit("k") for _ in range(150)) == 0  # the 100 carried
    finally:
        lim.unlink()


@pytest.mark.parametrize("scheme", ["", "shm+"], ids=["redis", "shm+redis"])
def test_shmwin_set_changes_a_limiter_and_a_token_bucket_on_redis_and_show_says_when(
    redis_server, name, scheme, capsys
):
    from shmwin.cli import main

    url = scheme + redis_server.url
    lim = Limiter(name, "10/minute", backend=url)
    bucket = TokenBucket(name + "-tb", "10/minute", burst=3, backend=redis_server.url)
    try:
        assert main(["set", name, "5/minute", "--backend", url]) == 0
        assert "10/minute -> 5/minute (counts carried" in capsys.readouterr().out
        lim.hit("a")
        assert lim.rates == [Rate(5, 60 * 10**9)]  # this process followed at its call
        assert main(["set", name + "-tb", "20/minute", "--burst", "4", "--backend", redis_server.url]) == 0
        assert bucket.hit("k") and bucket.burst == 4
        if not scheme:  # shmwin show on redis: when the rates last changed
            assert main(["show", name, "--backend", url]) == 0
            assert "rates: changed live once, last at" in capsys.readouterr().out
    finally:
        lim.unlink()
        bucket.unlink()


def test_after_a_change_of_period_the_hot_path_stays_the_lean_script_and_still_carries(redis_server, name):
    """The lean one-rate script serves a key with a row of the new layout; a key without one
    (its first hit since the change) is answered 'carry' and goes to hit.lua once."""
    lim = Limiter(name, "5/minute", backend=redis_server.url)  # the server's TIME: the plain path
    try:
        assert sum(lim.hit("a") for _ in range(3)) == 3
        lim.set_rates("5/50second")
        assert lim._backend._hit1_runner is not None  # the lean script, with earlier layouts live
        assert sum(lim.hit("a") for _ in range(5)) == 2  # 3 carried
        assert sum(lim.hit("b") for _ in range(6)) == 5
    finally:
        lim.unlink()


def test_a_claim_deferred_while_the_server_was_away_follows_the_rates_set_since(redis_server, name):
    """Opened with on_error="allow" while the server is away: the claim waits for the first call
    that gets through. Another open with newer rates came in between: the deferred claim, older
    than it, follows them instead of setting its own back."""
    url = redis_server.url
    redis_server.stop()
    stale = Limiter(name, "100/minute", backend=url, on_error="allow", timeout=0.2)
    redis_server.start()
    newest = Limiter(name, "3/minute", backend=url)
    try:
        assert sum(stale.hit("k") for _ in range(10)) == 3
        assert stale.rates == newest.rates == [Rate(3, 60 * 10**9)]
    finally:
        newest.unlink()
