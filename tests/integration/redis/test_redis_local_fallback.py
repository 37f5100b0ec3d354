"""on_error="local": while the server is away (SIGSTOPped: it keeps its data and answers
nothing), each host enforces a share of the limit in its shared memory, exactly, across its
processes; when the server answers again, the hits admitted locally are counted on the global
key before anything else, so the switch back makes no burst over the global limit."""

from __future__ import annotations

import multiprocessing as mp
import re
import threading
import time

import pytest
from support.fallback import BACKENDS, S, frozen, until_back, url_of

from shmwin import Limiter, ManualClock
from shmwin import local_share as local_share_module
from shmwin.backends.redis.testing import ServerTime
from shmwin.local_share import HOSTS_HORIZON_NS, fallback_since


@pytest.fixture
def probe_every_call(monkeypatch):
    """Ask the server again at every call while it is away (normally every PROBE_S of real time),
    so that a test sees the switch back at its next call, with no waiting."""
    monkeypatch.setattr(local_share_module, "PROBE_S", 0.0)


def _open(name, server, kind, clock, **kw):
    return Limiter(name, "10/minute", backend=url_of(server, kind), on_error="local", clock=ServerTime(clock),
                   timeout=0.2, **kw)  # fmt: skip


def _hits_in_child(name, server, kind, clock_ns, n, out) -> None:  # type: ignore[no-untyped-def]
    lim = _open(name, server, kind, ManualClock(clock_ns), fallback="3/minute")
    out.put(sum(lim.hit("k") for _ in range(n)))
    lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_while_away_the_host_enforces_its_fallback_across_processes(own_redis, name, kind):
    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, kind, clock, fallback="3/minute")
    try:
        assert lim.hit("other")  # the server answers: the global limit
        assert fallback_since(lim) is None
        with frozen(own_redis):
            ctx = mp.get_context("fork")
            out = ctx.Queue()
            child = ctx.Process(target=_hits_in_child, args=(name, own_redis, kind, clock(), 4, out))
            child.start()
            child_admitted = out.get(timeout=60)
            child.join(30)
            mine = sum(lim.hit("k") for _ in range(4))
            assert child_admitted + mine == 3  # one share for the host, not one per process
            assert fallback_since(lim) is not None
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_switch_back_counts_the_local_hits_first(own_redis, name, kind, probe_every_call):
    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, kind, clock, fallback="5/minute")
    try:
        before = sum(lim.hit("k") for _ in range(4))
        with frozen(own_redis):
            during = sum(lim.hit("k") for _ in range(8))
        until_back(lim)
        after = sum(lim.hit("k") for _ in range(20))
        assert before == 4
        assert during >= 5  # the local share (and, on shm+redis, what its lease still held)
        assert after <= max(0, 10 - before - during)  # no burst over the limit at the switch
        if kind == "redis":  # every local hit counted on the global key (at least: the calls that
            # timed out against the frozen server ran when it resumed, and count too)
            assert during == 5 and lim.stats("k").used >= before + during
        assert fallback_since(lim) is None
        clock.advance(70)  # a period and its last bucket
        assert lim.hit("k")  # and forgotten with the period, as any hit
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_default_share_is_the_limit_over_the_hosts_seen(own_redis, name, kind):
    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, kind, clock)
    try:
        for other in ("host-b:1", "host-c:1"):  # two other hosts said they were alive
            lim._backend.hosts_seen(other, HOSTS_HORIZON_NS)
        assert lim.hit("other")  # this host counts the hosts: 3
        with frozen(own_redis):
            assert sum(lim.hit("k") for _ in range(6)) == 10 // 3
    finally:
        lim.unlink()
        lim.close()


def test_while_away_a_hit_makes_no_round_trip(own_redis, name):
    """Only one call in PROBE_S asks the server: the others are shared memory's."""
    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, "redis", clock, fallback="100/minute")
    asked = []
    real_hit = lim._backend.hit
    lim._backend.hit = lambda key, cost=1: asked.append(key) or real_hit(key, cost)
    try:
        with frozen(own_redis):
            assert sum(lim.hit("k") for _ in range(50)) == 50
        assert len(asked) == 1
    finally:
        lim.unlink()
        lim.close()


def test_bad_fallback_settings_are_clear_errors(redis_server, name):
    with pytest.raises(ValueError, match="fallback="):
        Limiter(name, "10/minute", backend=redis_server.url, on_error="deny", fallback="5/minute")
    with pytest.raises(ValueError, match="remote backend"):
        Limiter(name, "10/minute", on_error="local")
    with pytest.raises(ValueError, match=r"expected e\.g\."):
        Limiter(name, "10/minute", backend=redis_server.url, on_error="local", fallback="5 a minute")
    with pytest.raises(ValueError, match="on_error must be one of"):
        Limiter(name, "10/minute", backend=redis_server.url, on_error="locally")


def test_the_middlewares_decide_on_the_local_share_without_waiting(own_redis, name):
    """integrations.ratelimit.decide (every middleware's verdict): while away, the local share
    answers, with no wait, and the headers describe it: the quota in force then is the share."""
    from shmwin.integrations.ratelimit import decide

    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, "redis", clock, fallback="2/minute")
    asked = []
    real_check = lim._backend.check
    lim._backend.check = lambda *a: (a[1] == 0 and asked.append(a)) or real_check(*a)  # stats: cost 0
    try:
        with frozen(own_redis):
            verdicts = [decide(lim, "client") for _ in range(3)]
        assert [v.allowed for v in verdicts] == [True, True, False]
        assert not any(v.unavailable for v in verdicts)
        policies = {dict(v.headers)["RateLimit-Policy"] for v in verdicts}
        assert policies == {'"2-per-1m";q=2;w=60'}, policies
        shown = [re.fullmatch(r'"2-per-1m";r=(\d+);t=(\d+)', dict(v.headers)["RateLimit"]) for v in verdicts]
        assert [int(m[1]) for m in shown if m] == [1, 0, 0], verdicts
        refused = verdicts[2]  # a quota-exceeded refusal of the share, with its wait: the hits' reset
        assert refused.violated == ["2-per-1m"], refused
        assert 60 <= refused.retry_after_s <= 63, refused  # the period, and at most a bucket (3 s)
        assert dict(refused.headers)["Retry-After"] == shown[2][2] == str(refused.retry_after_s)  # type: ignore[index]
        assert asked == []  # stats never asked the frozen server
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_record_says_since_when_the_host_is_on_its_share(
    own_redis, name, kind, probe_every_call, monkeypatch
):
    """Each call that meets the server away adds to NAME.local.away: fallback_status reads
    there (with the writers' clock) that the fallback is active, since the first failure of
    the run, and how many calls met the server away."""
    monkeypatch.setattr(local_share_module, "CLOCK_EVERY", 1)  # every call may probe (PROBE_S 0)
    clock = ManualClock(1_000 * S)
    lim = _open(name, own_redis, kind, clock, fallback="3/minute")
    try:
        assert lim.hit("k")
        assert local_share_module.fallback_status(name, clock) is None  # never away: no record
        with frozen(own_redis):
            lim.hit("k")
            first = local_share_module.fallback_status(name, clock)
            clock.advance(30)
            lim.hit("k")
            later = local_share_module.fallback_status(name, clock)
        assert first is not None and later is not None
        assert first["active"] and later["active"]
        assert later["failures"] >= 2  # one per call that met it (probes at every call here)
        assert abs(later["since"] - (later["last"] - 30)) <= 1  # the run began 30 s (on the clock) earlier
    finally:
        lim.unlink()
        lim.close()
    assert local_share_module.fallback_status(name, clock) is None  # unlink removed the record


@pytest.mark.parametrize("kind", BACKENDS)
def test_show_and_the_prometheus_export_show_the_fallback(own_redis, name, kind, probe_every_call):
    """From another process: ``shmwin show NAME.local`` says the host's share is active and
    since when; the exporter has shmwin_fallback_active 1 and the time it began."""
    import json
    import subprocess
    import sys

    from support.helpers import ROOT

    from shmwin.integrations.prometheus import exposition

    lim = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local", fallback="3/minute",
                  timeout=0.2)  # fmt: skip
    calling = threading.Event()

    def keep_calling() -> None:  # the app goes on meeting the server away while the tools look
        while calling.is_set():
            lim.hit("k")
            time.sleep(0.01)

    try:
        with frozen(own_redis):
            assert lim.hit("k")  # on the local share
            calling.set()
            caller = threading.Thread(target=keep_calling)
            caller.start()
            env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
            show = [sys.executable, "-m", "shmwin", "show"]
            shown = subprocess.run(
                [*show, name + ".local"], env=env, capture_output=True, text=True, timeout=60
            )
            run = {"env": env, "capture_output": True, "text": True, "timeout": 60}
            as_json = subprocess.run([*show, "--json", name + ".local"], **run)  # type: ignore[call-overload]
            text = exposition([name + "*"])
        assert shown.returncode == 0, shown.stderr
        assert "fallback: ACTIVE since " + time.strftime("%Y-%m-%d") in shown.stdout, shown.stdout
        status = json.loads(as_json.stdout)["fallback"] if as_json.returncode == 0 else as_json.stderr
        assert status["active"] is True and abs(status["since"] - time.time()) < 60, status
        assert f'shmwin_fallback_active{{window="{name}"}} 1.0' in text, text
        since = [
            line
            for line in text.splitlines()
            if line.startswith(f'shmwin_fallback_since_seconds{{window="{name}"}}')
        ]
        assert since and abs(float(since[0].split()[-1]) - time.time()) < 60, since
    finally:
        if calling.is_set():
            calling.clear()
            caller.join()
        lim.unlink()
        lim.close()
