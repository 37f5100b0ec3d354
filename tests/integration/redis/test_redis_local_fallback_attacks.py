"""on_error="local" attacked from outside, as an independent checker of issue #31 would: the
calls besides ``hit`` (``acquire``, ``stats``, shadow mode), a full /dev/shm while the server is
away, a share that must follow what changed since the last outage (the limiter's rates, the
hosts seen), the switch back (a restarted empty server, a carry racing another process's hit,
several rates), close(). The server is a real one, SIGSTOPped or killed (support/fallback.py);
what the tools say about it: test_redis_local_fallback_seen_attacks.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from support.fallback import BACKENDS, TIMEOUT_S, S, frozen, open_local, until_back, url_of

from shmwin import Limiter, ManualClock
from shmwin import local_share as local_share_module
from shmwin.local_share import HOSTS_HORIZON_NS, fallback_since


@pytest.fixture
def probe_every_call(monkeypatch):
    monkeypatch.setattr(local_share_module, "PROBE_S", 0.0)


@pytest.mark.parametrize("kind", BACKENDS)
def test_acquire_while_away_takes_from_the_share_without_waiting(own_redis, name, kind):
    """acquire() is a hit that may wait: while away it answers from the host's share, as hit()
    does (failed on main: every acquire refused, each after the socket timeout on redis://)."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, fallback="3/minute")
    try:
        assert lim.hit("other")
        with frozen(own_redis):
            started = time.monotonic()
            got = [lim.acquire("k", timeout=0) for _ in range(20)]
            took = time.monotonic() - started
            assert got == [True] * 3 + [False] * 17, got  # the share, once for hit and acquire
            assert not lim.hit("k")
            assert lim.acquire("j", timeout=0) and lim.hit("j")  # another key has its own share
            stats = lim.local_stats_all("k")
        assert stats is not None and stats[0].used == 3, stats
        assert took < 5 * TIMEOUT_S, f"20 acquires took {took:.2f} s: a socket timeout per call"
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_shadow_mode_while_away_answers_true_from_the_share_without_a_round_trip(own_redis, name, kind):
    """Shadow mode counts what enforcement would do and answers True: while away, enforcement
    is the share, with no round trip per hit (failed on main: each hit asked the frozen server,
    waiting its socket timeout, and the share counted nothing)."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, fallback="2/minute", shadow=True)
    asked: list[object] = []
    real_hit = lim._backend.hit
    lim._backend.hit = lambda key, cost=1: asked.append(key) or real_hit(key, cost)
    try:
        assert lim.hit("other")
        asked.clear()
        with frozen(own_redis):
            started = time.monotonic()
            answers = [lim.hit("k") for _ in range(30)]
            took = time.monotonic() - started
            stats = lim.local_stats_all("k")
        assert answers == [True] * 30
        assert len(asked) <= 2, f"{len(asked)} of 30 hits asked the server"
        assert took < 5 * TIMEOUT_S, f"30 hits took {took:.2f} s"
        assert stats is not None and stats[0].used == 2, stats  # what enforcement would have admitted
    finally:
        lim.unlink()
        lim.close()


def test_the_share_follows_the_limiters_rates_changed_live(own_redis, name, probe_every_call):
    """The default share is the limit in force over the hosts: a limit lowered live on redis://
    between two outages makes a smaller share in the second (failed on main: the share of the
    rates the process opened with, 10/minute, for ever)."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, "redis", clock)
    try:
        assert lim.hit("other")
        with frozen(own_redis):
            assert sum(lim.hit("a") for _ in range(12)) == 10  # one host seen: the whole limit
        until_back(lim)
        lim.set_rates("4/minute")
        assert lim.rates[0].limit == 4
        clock.advance(70)
        with frozen(own_redis):
            admitted = sum(lim.hit("b") for _ in range(12))
        assert admitted == 4, f"{admitted} admitted on a share of a 4/minute limit"
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_share_follows_the_hosts_seen_since_the_last_outage(own_redis, name, kind, probe_every_call,
                                                                monkeypatch):  # fmt: skip
    """One host, an outage (its share: the whole limit), then two more hosts come: the next
    outage's share is the limit over three (failed on main: NAME.local kept the first outage's
    rates, 10/minute, so the three hosts' shares added up to 10 + 2 x 3)."""
    monkeypatch.setattr(local_share_module, "BEAT_S", 0.0)  # count the hosts at every answered call
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock)
    try:
        assert lim.hit("other")
        with frozen(own_redis):
            assert sum(lim.hit("a") for _ in range(12)) == 10
        until_back(lim)
        for other in ("host-b:1", "host-c:1"):
            lim._backend.hosts_seen(other, HOSTS_HORIZON_NS)
        assert lim.hit("other")  # an answered call: this host counts three hosts now
        clock.advance(70)
        with frozen(own_redis):
            admitted = sum(lim.hit("b") for _ in range(12))
        assert admitted == 10 // 3, f"{admitted} admitted on a host of three, limit 10"
    finally:
        lim.unlink()
        lim.close()


# -- a full /dev/shm while away -----------------------------------------------------------------

_FULL_SHM = r"""
import json, os, signal, sys
from shmwin import Limiter
url, pid, on_full = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lim = Limiter("full", "10/minute", backend=url, on_error="local", fallback="3/minute", timeout=0.2,
              on_full=on_full)
out = {"before": lim.hit("k")}
try:
    with open("/dev/shm/filler", "ab") as f:
        while True:
            f.write(b"x" * 4096)
            f.flush()
except OSError:
    pass
os.kill(pid, signal.SIGSTOP)
try:
    answers = []
    for _ in range(5):
        try:
            answers.append(lim.hit("k"))
        except Exception as e:
            answers.append(type(e).__name__)
    out["hits"] = answers
    try:
        out["test"] = lim.test("k")
    except Exception as e:
        out["test"] = type(e).__name__
finally:
    os.kill(pid, signal.SIGCONT)
os.unlink("/dev/shm/filler")
lim.unlink()
lim.close()
print(json.dumps(out))
"""


def _root_unshare() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /dev/shm"]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(not _root_unshare(), reason="needs root and mount namespaces for a small /dev/shm")
@pytest.mark.parametrize("kind", BACKENDS)
@pytest.mark.parametrize("on_full", ["allow", "deny"])
def test_a_full_dev_shm_while_away_is_on_full_not_an_error(own_redis, kind, on_full):
    """The share cannot be made (a full /dev/shm, 256 KiB of its own): the hits are answered as
    on_full says of a key with no row (no HTTP 500); failed on main: OutOfSpaceError."""
    script = f'mount -t tmpfs -o size=256k tmpfs /dev/shm && exec "{sys.executable}" -c "$0" "$@"'
    cmd = ["unshare", "-m", "sh", "-c", script, _FULL_SHM, url_of(own_redis, kind), str(own_redis.proc.pid),
           on_full]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["before"] is True
    assert out["hits"] == [on_full == "allow"] * 5, out
    assert out["test"] == (on_full == "allow"), out


def _spawned_hits(url: str, name: str, n: int, out) -> None:  # type: ignore[no-untyped-def]
    lim = Limiter(name, "10/minute", backend=url, on_error="local", fallback="5/minute", timeout=TIMEOUT_S)
    out.put(sum(lim.hit("k") for _ in range(n)))
    lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_switch_back_to_a_restarted_empty_server_carries_the_hosts_hits(own_redis, name, kind,
                                                                            probe_every_call):  # fmt: skip
    """redis-server SIGKILLed (its counts gone with it), a spawned process and this one hit on
    the host's share, then a new empty server: the first call that gets through carries the
    share's hits there, so the limit counts them (on redis:// all, on shm+redis:// what fits)."""
    import multiprocessing as mp

    url = url_of(own_redis, kind)
    lim = Limiter(name, "10/minute", backend=url, on_error="local", fallback="5/minute", timeout=TIMEOUT_S)
    try:
        assert sum(lim.hit("k") for _ in range(3)) == 3
        own_redis.proc.kill()
        own_redis.proc.wait(20)
        ctx = mp.get_context("spawn")
        out = ctx.Queue()
        child = ctx.Process(target=_spawned_hits, args=(url, name, 4, out))
        child.start()
        theirs = out.get(timeout=120)
        child.join(60)
        mine = sum(lim.hit("k") for _ in range(4))
        assert theirs + mine == 5, (theirs, mine)  # one share for the host's processes
        own_redis.start()  # empty: no persistence
        until_back(lim)
        after = sum(lim.hit("k") for _ in range(10))
        assert after == 10 - 5, after  # the 5 share hits carried: the limit sees them
    finally:
        lim.unlink()
        lim.close()


def _away_then_carry(url, name, ready, go, hit_done, carry_go, out) -> None:  # type: ignore[no-untyped-def]
    """A process of the host on its share: a hit while the server is frozen, another while the
    parent carries, then its own switch back."""
    lim = Limiter(name, "10/minute", backend=url, on_error="local", fallback="5/minute", timeout=TIMEOUT_S)
    first = lim.hit("k")  # meets the frozen server: on the share
    ready.set()
    assert go.wait(60)
    second = lim.hit("k")  # still on its share (the lean path: no probe before CLOCK_EVERY hits)
    hit_done.set()
    assert carry_go.wait(60)
    time.sleep(0.05)
    lim.test("other")  # gets through: carries what the share holds
    out.put((first, second, fallback_since(lim) is None))
    lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_hit_on_the_share_during_anothers_carry_is_not_lost(own_redis, name, kind, probe_every_call):
    """Two processes of a host on its share; the first to get through carries the share's hits
    to the global key, while the other still admits one there. That hit must reach the global
    key too, at the other's switch back (failed on main: the carrier cleared the key after
    reading it, so the hit admitted in between was never carried: 7 more admitted of 10, not 6)."""
    import multiprocessing as mp

    url = url_of(own_redis, kind)
    lim = Limiter(name, "10/minute", backend=url, on_error="local", fallback="5/minute", timeout=TIMEOUT_S)
    ctx = mp.get_context("fork")
    ready, go, hit_done, carry_go, out = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event(), ctx.Queue()
    child = None
    try:
        assert lim.test("k")  # the name claimed while the server answers
        with frozen(own_redis):
            child = ctx.Process(target=_away_then_carry, args=(url, name, ready, go, hit_done, carry_go, out))
            child.start()
            assert ready.wait(60)
            assert sum(lim.hit("k") for _ in range(2)) == 2
        real = lim._backend.count_anyway

        def carrying(key, cost):  # type: ignore[no-untyped-def]
            real(key, cost)
            go.set()  # the other process hits on the share between this carry and the clear
            assert hit_done.wait(60)

        lim._backend.count_anyway = carrying
        until_back(lim)
        carry_go.set()
        first, second, back = out.get(timeout=60)
        child.join(60)
        assert (first, second, back) == (True, True, True)
        after = sum(lim.hit("k") for _ in range(10))
        assert after == 10 - 4, f"{after} admitted after 4 on the host's share"
    finally:
        go.set()
        carry_go.set()
        if child is not None:
            child.join(60)
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_stats_while_away_waits_the_timeout_once_per_probe_not_per_call(own_redis, name, kind, monkeypatch):
    """``stats`` raises at once while on the share, until the next probe is due; one that asks
    then and meets the server away must put the next probe off, as a hit does (failed on main:
    past PROBE_S, every stats call waited the socket timeout: 5 calls, 1 s)."""
    monkeypatch.setattr(local_share_module, "PROBE_S", 0.3)
    from shmwin.errors import BackendUnavailableError

    lim = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    try:
        assert lim.hit("k")
        with frozen(own_redis):
            assert lim.hit("k")  # on the share: the next probe in PROBE_S
            time.sleep(0.35)  # real time, not the limit's: the probe is due
            started = time.monotonic()
            for _ in range(5):
                with pytest.raises(BackendUnavailableError):
                    lim.stats("k")
            took = time.monotonic() - started
        assert took < 3 * TIMEOUT_S, f"5 stats calls took {took:.2f} s"
    finally:
        lim.unlink()
        lim.close()


_MIXED = r"""
import sys
from shmwin import Limiter
from shmwin.errors import BackendUnavailableError
url, name = sys.argv[1], sys.argv[2]
lim = Limiter(name, "100/minute", backend=url, on_error="local", fallback="7/minute", timeout=0.2)
admitted = 0
for i in range(12):
    if i % 3 == 0:
        admitted += lim.hit("k")
    elif i % 3 == 1:
        admitted += lim.acquire("k", timeout=0)
    else:
        lim.test("k")
        try:
            lim.stats("k")
        except BackendUnavailableError:
            pass
        admitted += lim.hit("k", 1)
print(admitted)
lim.close()
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_python_c_processes_mixing_calls_share_one_exact_share(own_redis, name, kind):
    """Four ``python -c`` processes started apart, each mixing hit, acquire, test and stats
    while the server hangs: together they admit exactly the host's share, 7 of the 36 hits
    asked for (the limit of 100 is Redis's: its share is not in reach)."""
    url = url_of(own_redis, kind)
    lim = Limiter(name, "100/minute", backend=url, on_error="local", fallback="7/minute", timeout=TIMEOUT_S)
    try:
        assert lim.test("k")  # the name claimed while the server answers
        with frozen(own_redis):
            procs = [subprocess.Popen([sys.executable, "-c", _MIXED, url, name], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for _ in range(4)]  # fmt: skip
            outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-500:] for o in outs]
        assert sum(int(o[0]) for o in outs) == 7, outs
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_switch_back_of_one_host_keeps_every_rate_of_several(own_redis, name, kind, probe_every_call):
    """``3/second;10/minute`` on one host, its default share the whole limit: 9 admitted on the
    share in 3 s, then the server answers. Every minute, across the switch back, holds at most
    10 (failed on main on shm+redis://: 17, since the carry went through ordinary leases, which
    the 3/second rate cut to 3 of the 9 hits, so the minute never saw the other 6)."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, rates="3/second;10/minute")
    admitted: list[int] = []
    try:
        assert lim.test("k")
        with frozen(own_redis):
            for _ in range(3):
                admitted += [clock() for _ in range(5) if lim.hit("k")]
                clock.advance(1.5)
        until_back(lim)
        for _ in range(60):
            admitted += [clock() for _ in range(5) if lim.hit("k")]
            clock.advance(1.5)
        most = max(sum(1 for t in admitted if a <= t < a + 60 * S) for a in admitted)
        assert most <= 10, f"{most} admitted in a minute of a 10/minute limit ({len(admitted)} in all)"
        assert len(admitted) > 10  # and the limit admits again once the minute has passed
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_calls_after_close_while_away_say_the_limiter_is_closed(own_redis, name, kind):
    """close() while on the share: every call after it raises WindowClosedError naming the
    limiter, at once, and the segments go with unlink (failed on main: the error named
    NAME.local, the share's segment, which the caller never opened)."""
    from shmwin.errors import WindowClosedError

    lim = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    try:
        assert lim.hit("k")
        with frozen(own_redis):
            assert lim.hit("k")  # on the share
            lim.close()
            for call in (lambda: lim.hit("k"), lambda: lim.test("k"), lambda: lim.acquire("k", timeout=0),
                         lambda: lim.stats("k")):  # fmt: skip
                started = time.monotonic()
                with pytest.raises(WindowClosedError) as closed:
                    call()
                assert time.monotonic() - started < TIMEOUT_S
                assert f"{name!r}" in str(closed.value), closed.value
    finally:
        again = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local")
        again.unlink()
        again.close()
    assert not [n for n in os.listdir("/dev/shm") if name in n]


@pytest.mark.parametrize("kind", BACKENDS)
def test_the_share_moved_under_a_process_on_it_goes_on_without_an_error(own_redis, name, kind):
    """An operator changes the share's periods during the outage (``shmwin set NAME.local``: a
    move to a new segment): a process on its lean path goes on, on the moved share, with no
    error (failed on main: its cached native hit of the retired segment raised
    WindowClosedError, an HTTP 500 in a web app)."""
    lim = Limiter(name, "10/minute", backend=url_of(own_redis, kind), on_error="local", fallback="3/minute",
                  timeout=TIMEOUT_S)  # fmt: skip
    try:
        assert lim.test("k")
        with frozen(own_redis):
            assert lim.hit("k")  # on the share: the lean path from now on
            done = subprocess.run([sys.executable, "-m", "shmwin", "set", name + ".local", "1/second;2/hour"],
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            assert done.returncode == 0, done.stderr
            answers = [lim.hit("k") for _ in range(4)]
            stats = lim.local_stats_all("k")
        # the move carried the key's 1 hit, counted at the change: the second's 1 is taken
        assert answers == [False] * 4, answers
        assert stats is not None and [(s.limit, s.used) for s in stats] == [(1, 1), (2, 1)], stats
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_share_below_one_hit_refuses_every_call_at_once(own_redis, name, kind):
    """A limit of 2 over 3 hosts seen: the share is below one hit, so hit, test and acquire all
    refuse while away, none waiting (acquire's answer is final: the cost never fits)."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, rates="2/minute")
    try:
        for other in ("host-b:1", "host-c:1"):
            lim._backend.hosts_seen(other, HOSTS_HORIZON_NS)
        assert lim.test("other")  # this host counts three hosts
        with frozen(own_redis):
            assert not lim.hit("k")  # meets the server away: on the share, which is none
            started = time.monotonic()
            answers = [lim.hit("k"), lim.test("k"), lim.acquire("k", timeout=5)]
            took = time.monotonic() - started
        assert answers == [False, False, False] and took < 2 * TIMEOUT_S, (answers, took)
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_fallback_of_one_rate_under_several_rates(own_redis, name, kind, probe_every_call):
    """``10/second;100/minute`` with ``fallback="5/minute"``: allowed; while away the share is
    that one rate, and its 5 hits are carried into every global rate at the switch back."""
    clock = ManualClock(1_000 * S)
    lim = open_local(name, own_redis, kind, clock, rates="10/second;100/minute", fallback="5/minute")
    try:
        assert lim.test("k")
        with frozen(own_redis):
            assert sum(lim.hit("k") for _ in range(20)) == 5
        until_back(lim)
        used = [s.used for s in lim.stats_all("k")]
        assert used[0] >= 5 and used[1] >= 5, used  # in both rates (shm+redis: at least, its leases)
        assert sum(lim.hit("k") for _ in range(20)) <= 10 - 5  # the second's rate holds the carry
    finally:
        lim.unlink()
        lim.close()
