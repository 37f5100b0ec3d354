"""Round 2 of issue #31's attacks: live limits x the local share (on_error="local"), with
real processes and a real server SIGSTOPped (support/fallback.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from support.fallback import BACKENDS, TIMEOUT_S, frozen, until_back, url_of
from support.helpers import ROOT

from shmwin import Limiter, ManualClock, TokenBucket
from shmwin import local_share as local_share_module
from shmwin.backends.redis.testing import ServerTime
from shmwin.integrations.ratelimit import PROBLEM_TYPE, RateLimitMiddleware

_STALE = r"""
import sys
from shmwin import Limiter
url, name = sys.argv[1], sys.argv[2]
lim = Limiter(name, "100/minute", backend=url, on_error="local", timeout=0.2)
assert lim.hit("warm")                       # reached the server: counted the hosts (one)
print("ready", flush=True)
sys.stdin.readline()                         # meanwhile: the limit lowered live, the server frozen
print(sum(lim.hit("k") for _ in range(30)), lim.rates[0].limit, flush=True)
lim.close()
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_worker_that_missed_a_live_change_does_not_set_the_share_back(own_redis, name, kind, monkeypatch):
    """A worker that made no call since the limit was lowered live (100 -> 10/minute) meets the
    outage after a worker that knows it: the host's share must stay the lowered one, not go
    back to the old limit's (the last outage-goer wins otherwise: 100 a minute on the host)."""
    monkeypatch.setattr(local_share_module, "PROBE_S", 0.0)
    url = url_of(own_redis, kind)
    stale = subprocess.Popen([sys.executable, "-c", _STALE, url, name], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    # both on the host's clock (the other process has no other): the run takes well under a minute
    lim = Limiter(name, "100/minute", backend=url, on_error="local", timeout=TIMEOUT_S)
    try:
        assert stale.stdout is not None and stale.stdin is not None
        assert stale.stdout.readline().strip() == "ready"
        lim.set_rates("10/minute")
        assert lim.hit("warm")  # this worker knows the new limit and the hosts
        with frozen(own_redis):
            mine = sum(lim.hit("k") for _ in range(30))
            stale.stdin.write("go\n")
            stale.stdin.flush()
            theirs, seen = (int(x) for x in stale.stdout.readline().split())
            assert stale.wait(30) == 0
            mine += sum(lim.hit("k") for _ in range(30))
        assert seen == 100  # the other worker never learned of the change: Redis was away
        assert mine + theirs <= 10, f"{mine} + {theirs} admitted on a host whose limit is 10/minute"
    finally:
        if stale.poll() is None:
            stale.kill()
            stale.wait()
        until_back(lim)
        lim.unlink()
        lim.close()


_OPENED_AWAY = r"""
import sys
from shmwin import Limiter
url, name = sys.argv[1], sys.argv[2]
lim = Limiter(name, "100/minute", backend=url, on_error="local", timeout=0.2)  # the server frozen
print("opened", flush=True)
sys.stdin.readline()                         # meanwhile: the server back, a deploy of 3/minute
print(sum(lim.hit("k") for _ in range(6)), flush=True)
lim.close()
"""


def _old_worker_then_deploy(
    server: Any, url: str, name: str, script: str, deploy: Any
) -> tuple[int, int, Any]:
    """An old worker (``script``, ``python -c``) opens while ``server`` is frozen (its claim
    deferred); once the server is back ``deploy()`` opens; then the old worker's 6 hits and the
    deploy's 6: (theirs, mine, the deploy's rates after them, and its burst if a token bucket)."""
    old = None
    try:
        with frozen(server):
            old = subprocess.Popen([sys.executable, "-c", script, url, name], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)  # fmt: skip
            assert old.stdout is not None and old.stdin is not None
            assert old.stdout.readline().strip() == "opened"
        new = deploy()
        try:
            old.stdin.write("go\n")
            old.stdin.flush()
            theirs = int(old.stdout.readline())
            assert old.wait(30) == 0
            mine = sum(new.hit("k2") for _ in range(6))
            return theirs, mine, (new.rates[0].limit, getattr(new, "burst", None))
        finally:
            new.close()
    finally:
        if old is not None and old.poll() is None:
            old.kill()
            old.wait()


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_old_worker_opened_while_away_does_not_set_its_rates_back_over_a_deploy(own_redis, name, kind):
    """A worker of the old code (100/minute) opens while the server is away (its claim deferred);
    the server comes back and a deploy opens with 3/minute; the old worker's first call must
    follow the deploy's rates, not claim its own back for every host (red team t3, fixed on
    redis:// on 2026-11-28; failed on main on shm+redis://: 6 of 6 admitted by it, 6 by the
    deploy, the rates 100/minute again)."""
    url = url_of(own_redis, kind)
    first = Limiter(name, "100/minute", backend=url, on_error="local", timeout=TIMEOUT_S)
    try:
        assert first.hit("warm")
        deploy = lambda: Limiter(name, "3/minute", backend=url, on_error="local", timeout=TIMEOUT_S)  # noqa: E731
        theirs, mine, (limit, _) = _old_worker_then_deploy(own_redis, url, name, _OPENED_AWAY, deploy)
        assert (theirs, mine) == (3, 3), f"old worker {theirs}, deploy {mine} of 3/minute"
        assert limit == 3 and first.hit("x") and first.rates[0].limit == 3
    finally:
        first.unlink()
        first.close()


_BUCKET_OPENED_AWAY = r"""
import sys
from shmwin import TokenBucket
url, name = sys.argv[1], sys.argv[2]
tb = TokenBucket(name, "100/minute", burst=100, backend=url, on_error="allow", timeout=0.2)  # frozen
print("opened", flush=True)
sys.stdin.readline()                         # meanwhile: the server back, a deploy of burst 3
print(sum(tb.hit("k") for _ in range(6)), flush=True)
tb.close()
"""


def test_an_old_token_bucket_opened_while_away_does_not_set_its_rate_back_over_a_deploy(own_redis, name):
    """The same for a TokenBucket on redis:// (its open's claim deferred with on_error="allow"):
    failed on main: the old worker's first call set 100/minute, burst 100 back for everyone
    (6 of 6 admitted by it, 6 by the deploy of 1/minute, burst 3)."""
    url = own_redis.url
    first = TokenBucket(name, "100/minute", burst=100, backend=url, timeout=TIMEOUT_S)
    try:
        assert first.hit("warm")
        deploy = lambda: TokenBucket(name, "1/minute", burst=3, backend=url, timeout=TIMEOUT_S)  # noqa: E731
        theirs, mine, (_, burst) = _old_worker_then_deploy(own_redis, url, name, _BUCKET_OPENED_AWAY, deploy)
        assert (theirs, mine) == (3, 3), f"old worker {theirs}, deploy {mine} of a burst of 3"
        assert burst == 3 and first.hit("x") and first.burst == 3
    finally:
        first.unlink()
        first.close()


async def _serve(app, n: int) -> list[tuple[int, dict[str, str], bytes]]:  # type: ignore[no-untyped-def]
    """``n`` concurrent GETs through the ASGI ``app``: (status, headers, body) each."""

    async def one(i: int) -> tuple[int, dict[str, str], bytes]:
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await app({"type": "http", "method": "GET", "path": "/", "headers": []}, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return start["status"], {k.decode(): v.decode() for k, v in start.get("headers", [])}, body

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _ok_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize("kind", BACKENDS)
def test_asgi_on_the_share_with_its_periods_moved_while_serving(own_redis, name, kind, tmp_path):
    """ASGI, 150 concurrent requests of one client while the server is frozen, the limiter of two
    rates on a one-rate fallback of 7/minute; between two waves 'shmwin set NAME.local' gives
    the share another period (a move of its segment, the counts carried): exactly 7 served,
    every refusal a quota-exceeded 429 with Retry-After, every response describing the share in
    force (one rate, then two), no exception out of the middleware."""
    url = url_of(own_redis, kind)
    lim = Limiter(name, "100/minute;1000/hour", backend=url, on_error="local", fallback="7/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    app = RateLimitMiddleware(_ok_app, lim, key=lambda scope: "client")
    try:
        assert lim.hit("warm")
        with frozen(own_redis):
            first = asyncio.run(_serve(app, 150))
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            done = subprocess.run([sys.executable, "-m", "shmwin", "set", name + ".local", "7/minute;9/hour"],
                                  capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
            assert done.returncode == 0, done.stderr
            second = asyncio.run(_serve(app, 150))
        assert sum(s == 200 for s, _, _ in first + second) == 7
        one, two = '"7-per-1m";q=7;w=60', '"7-per-1m";q=7;w=60, "9-per-1h";q=9;w=3600'
        for answers, policy in ((first, one), (second, two)):
            for status, headers, body in answers:
                assert headers["ratelimit-policy"] == policy, headers
                if status == 429:
                    assert int(headers["retry-after"]) >= 1 and json.loads(body)["type"] == PROBLEM_TYPE
                else:
                    assert status == 200 and body == b"ok"
    finally:
        until_back(lim)
        lim.unlink()
        lim.close()


_REDIS_HITTER = r"""
import sys
from shmwin import Limiter, TokenBucket
url, name, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def opened():
    if kind == "limiter":
        return Limiter(name, "10/hour", backend=url, on_change="reset")
    return TokenBucket(name, "1/hour", burst=10, backend=url, on_change="reset")
lim, admitted = opened(), 0
for i in range(n):
    if i % 25 == 24:  # a worker of the deploy opening: same rates, on_change="reset"
        lim.close()
        lim = opened()
    admitted += lim.hit("k")
print(admitted)
lim.close()
"""


@pytest.mark.parametrize("kind", ["limiter", "token-bucket"])
@pytest.mark.parametrize("resets", [0, 4])
def test_same_rate_resets_on_redis_raced_by_hitters_and_reset_openers(redis_server, name, kind, resets):
    """change.lua's 'renew' under fire: three python -c processes hit one key (10/hour, or a
    burst of 10 at 1/hour) reopening every 25 hits with the same rates and on_change="reset"
    (no reset), while this process resets ``resets`` times once the key is used up: 10 admitted
    without resets, at most 10 a span between resets, nothing hung (the server's time: the run
    takes seconds of an hour)."""
    if kind == "limiter":
        lim: Any = Limiter(name, "10/hour", backend=redis_server.url)
        used_up = lambda: lim.stats("k").used == 10  # noqa: E731
        reset = lambda: lim.set_rates("10/hour", on_change="reset")  # noqa: E731
    else:
        lim = TokenBucket(name, "1/hour", burst=10, backend=redis_server.url)
        used_up = lambda: lim.stats("k").remaining == 0  # noqa: E731
        reset = lambda: lim.set_rate("1/hour", burst=10, on_change="reset")  # noqa: E731
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", _REDIS_HITTER, redis_server.url, name, kind, "600"],
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(3)]  # fmt: skip
    try:
        done = 0
        deadline = time.monotonic() + 60
        while done < resets and time.monotonic() < deadline:
            if used_up():
                reset()
                done += 1
        total = 0
        for p in procs:
            out, _ = p.communicate(timeout=120)
            assert p.returncode == 0
            total += int(out)
        assert done == resets
        assert total == 10 * (resets + 1) if resets == 0 else total <= 10 * (resets + 1), total
        assert used_up() and not lim.hit("k")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        lim.unlink()
        lim.close()


_CARRIER = r"""
import sys
from shmwin import Limiter
from shmwin import local_share as m
url, name = sys.argv[1], sys.argv[2]
lim = Limiter(name, "100/minute", backend=url, on_error="local", fallback="10/minute", timeout=0.2)
assert lim.hit("warm")
print("ready", flush=True)
sys.stdin.readline()                          # the server frozen
m.PROBE_S = 600.0                             # no probe while this process hits its share
lim.test("x")                                 # meets the server away (test() counts nothing)
print(sum(lim.hit("k") for _ in range(4)), flush=True)
sys.stdin.readline()                          # the server back: every process switches at once
lim._local._next_probe = 0.0
lim.test("y")
print("back" if lim._local.away_since_ns is None else "away", flush=True)
lim.close()
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_processes_switching_back_at_once_carry_the_shares_hits_once(own_redis, name, kind):
    """Four python -c processes of one host admit the share's 10 hits while the server is
    frozen, then switch back at the same moment: the global key counts the 10 once (failed on
    main: 40 -- each process read the share's 10, counted them, then gave back what was left)."""
    url = url_of(own_redis, kind)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", _CARRIER, url, name], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)]  # fmt: skip
    lim = None
    try:
        pipes = [(p.stdin, p.stdout) for p in procs if p.stdin is not None and p.stdout is not None]
        assert [out.readline().strip() for _, out in pipes] == ["ready"] * 4
        with frozen(own_redis):
            for inp, _ in pipes:
                inp.write("go\n")
                inp.flush()
            admitted = sum(int(out.readline()) for _, out in pipes)
        for inp, _ in pipes:
            inp.write("go\n")
        for inp, _ in pipes:
            inp.flush()
        assert [out.readline().strip() for _, out in pipes] == ["back"] * 4
        assert all(p.wait(30) == 0 for p in procs)
        lim = Limiter(name, "100/minute", backend=url, on_error="local", timeout=TIMEOUT_S)
        assert admitted == 10
        assert lim.stats("k").used == 10, f"{lim.stats('k').used} counted for the share's 10 hits"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if lim is None:
            lim = Limiter(name, "100/minute", backend=url, on_error="local", timeout=TIMEOUT_S)
        lim.unlink()
        lim.close()


_CHANGER = r"""
import sys
from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime
url, name, path, rates, on_change = sys.argv[1:6]
lim = Limiter.attach(name, backend=url, clock=ServerTime(ManualClock(path=path)))
lim.set_rates(rates, on_change=on_change)
lim.close()
"""


_CHANGES = [("20/hour", "carry", 10), ("10/hour", "reset", 10)]


@pytest.mark.parametrize(("rates", "on_change", "after"), _CHANGES)
@pytest.mark.parametrize("who", ["this process", "another process"])
def test_shm_redis_a_refused_key_follows_a_live_change_within_a_lease_time(
    own_redis, name, tmp_path, rates, on_change, after, who
):
    """shm+redis://, a key used up (10/hour: its host caches Redis's refusal), then the limit
    raised or reset live, by this process or another of the host (python -c): the host asks
    Redis again at once (failed on main: the refusal stayed cached until Redis's wait, most of
    the hour: 0 admitted). Another host's cache is not reached: see the round-2 report."""
    path = str(tmp_path / "clock")
    clock = ManualClock(10**17, path=path)
    url = "shm+" + own_redis.url
    lim = Limiter(name, "10/hour", backend=url, clock=ServerTime(clock))
    try:
        assert sum(lim.hit("k") for _ in range(12)) == 10
        clock.advance(1)  # every lease's deadline passed: the refusal is the host's cache only
        assert not lim.hit("k")
        if who == "this process":
            lim.set_rates(rates, on_change=on_change)
        else:
            env = dict(os.environ, PYTHONPATH=str(ROOT))
            done = subprocess.run([sys.executable, "-c", _CHANGER, url, name, path, rates, on_change],
                                  capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
            assert done.returncode == 0, done.stderr
        assert sum(lim.hit("k") for _ in range(after + 2)) == after
    finally:
        lim.unlink()
        lim.close()
