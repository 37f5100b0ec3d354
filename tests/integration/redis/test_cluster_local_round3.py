"""on_error="local" on a Redis Cluster (issue 31, round 3): the whole cluster away, then back, on
``redis+cluster://`` (one hash tag), ``?spread=16`` and ``shm+redis+cluster://``; one master hung
while the others answer, with the name's keys spread. Real clusters (own_redis_cluster: 3 masters,
3 replicas, a 1 s node timeout), redis-server's and valkey-server's; a node is hung by SIGSTOP.

The limits are per hour, so that no period passes in a run: every admitted hit of a key counts
against one limit, wherever it was admitted (the share, then the global keys)."""

from __future__ import annotations

import json
import multiprocessing as mp
import subprocess
import sys
import time

import pytest
from support.fallback import until_back
from support.helpers import ROOT
from support.servers import ask_port

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime
from shmwin.integrations.prometheus import exposition
from shmwin.local_share import HOSTS_HORIZON_NS, fallback_since

pytest.importorskip("redis")

LIMIT = 10  # per hour
HOSTS = 3  # this host and two others that said they were alive: a default share of 10 // 3
SHARE = LIMIT // HOSTS


def _open(name: str, url: str) -> Limiter:
    return Limiter(name, f"{LIMIT}/hour", backend=url, on_error="local", timeout=0.2)


def _hits_in_child(name: str, url: str, n: int, out) -> None:  # type: ignore[no-untyped-def]
    lim = _open(name, url)
    out.put(sum(lim.hit("k") for _ in range(n)))
    lim.close()


def _show(name: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "shmwin", "show", "--json", name], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _whole_cluster_away(cluster, name: str, url: str) -> tuple[int, int]:
    """One name on ``url``: the hosts counted, every node frozen, a forked process and this one
    (two handles) hitting one key on the share, what the tools say, then every node thawed and
    both handles back. Returns (admitted on the share, admitted once back)."""
    lim, other = _open(name, url), _open(name, url)
    try:
        for host in ("host-b:1", "host-c:1"):  # two other hosts said they were alive
            lim._backend.hosts_seen(host, HOSTS_HORIZON_NS)
        assert lim.hit("warm") and other.hit("warm")  # each process counts 3 hosts as it answers
        for port in list(cluster.procs):
            cluster.freeze(port)
        try:
            away = lim.hit("k")  # makes the host's share (a process that never reached the cluster,
            # as the child, counts one host: it would make the share the whole limit)
            ctx = mp.get_context("fork")
            out = ctx.Queue()
            child = ctx.Process(target=_hits_in_child, args=(name, url, 4, out))
            child.start()
            away += out.get(timeout=60)
            child.join(30)
            away += sum(lim.hit("k") for _ in range(2)) + sum(other.hit("k") for _ in range(3))
            assert fallback_since(lim) is not None and fallback_since(other) is not None
            shown = _show(name)
            text = exposition([name + "*"])
        finally:
            for port in list(cluster.procs):
                cluster.thaw(port)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["fallback"]["active"] is True, shown.stdout
        assert f'shmwin_fallback_active{{window="{name}"}} 1.0' in text, text
        cluster.wait_ok(60)
        until_back(lim)
        until_back(other)  # its switch back finds the share's hits carried already: none twice
        back = sum(lim.hit("k") for _ in range(LIMIT)) + sum(other.hit("k") for _ in range(LIMIT))
        assert fallback_since(lim) is None and fallback_since(other) is None
        return away, back
    finally:
        lim.unlink()
        other.close()
        lim.close()


def test_the_whole_cluster_away_then_back(own_redis_cluster, make_name):
    """Every node SIGSTOPped: each key strict per host on the share (the default one, the limit
    over the 3 hosts seen), across processes; the tools say the fallback is active; thawed, the
    first handle back carries the share's hits once (the second finds them carried) and no key
    goes past the global limit. On one hash tag, ``?spread=16`` and ``shm+redis+cluster://``."""
    cluster = own_redis_cluster
    urls = {"tag": cluster.url, "spread": cluster.url + "?spread=16", "twotier": "shm+" + cluster.url}
    for kind, url in urls.items():
        away, back = _whole_cluster_away(cluster, make_name(kind), url)
        assert away == SHARE, (kind, away)  # one share for the host, not one per process or handle
        # once back: what the limit has left after the share's hits, carried once (at most that:
        # a call that timed out against a frozen node runs when it wakes, and counts; on
        # shm+redis a lease granted then is never received); the share's hits carried twice
        # would leave LIMIT - 2 * SHARE
        assert LIMIT - 2 * SHARE < back <= LIMIT - SHARE, (kind, back)


def test_one_master_hung_with_the_keys_spread(own_redis_cluster, name):
    """``?spread=16``, ``fallback="4/hour"``: the master of one key's group SIGSTOPped while the
    other masters answer, until its replica takes over. The key on the hung master goes on the
    share (never past it while the master is away), and once the replica answers it is counted
    globally again (not refused for good), never past the limit in all. A key on a live master,
    through a handle that never met the hung one, is decided globally all along; through the
    handle that met it, it is on the share until the switch back (the share is the limiter's,
    not a group's): at most the limit plus the share in the period of the outage's start, as
    docs/operating.md says, and the limit once back."""
    cluster, share = own_redis_cluster, 4
    url = cluster.url + "?spread=16"
    opened = {"backend": url, "on_error": "local", "timeout": 0.2, "fallback": f"{share}/hour"}
    lim, other = Limiter(name, f"{LIMIT}/hour", **opened), Limiter(name, f"{LIMIT}/hour", **opened)
    try:
        ring = lim._backend._keys_of
        dead = "dead"
        master = cluster.master_of(ring(dead)[0])
        live = next(k for k in (f"live{i}" for i in range(1000)) if cluster.master_of(ring(k)[0]) != master)
        admitted = {dead: int(lim.hit(dead)), live: int(lim.hit(live)) + int(other.hit(live))}
        cluster.freeze(master)
        try:
            on_share = sum(lim.hit(dead) for _ in range(2 * share))
            assert fallback_since(lim) is not None and fallback_since(other) is None
            admitted[dead] += on_share
            assert on_share <= share, on_share  # the share, never past it (1 went global before)
            mine = sum(lim.hit(live) for _ in range(LIMIT))  # this handle: on its share
            others = sum(other.hit(live) for _ in range(LIMIT))  # a handle that never met the hung master
            admitted[live] += mine + others
            assert fallback_since(other) is None, "a key on a live master sent its handle to the share"
            cluster.wait_ok(60)  # the replica took over the hung master's slots
        finally:
            cluster.thaw(master)
        cluster.wait_ok(60)
        until_back(lim)
        back = sum(lim.hit(dead) for _ in range(LIMIT)) + sum(other.hit(dead) for _ in range(LIMIT))
        admitted[dead] += back
        assert back > 0  # the key of the hung master is not refused for good
        assert admitted[dead] <= LIMIT, admitted
        assert admitted[live] <= LIMIT + share, admitted  # the outage's start: limit plus the share
        admitted[live] += sum(lim.hit(live) + other.hit(live) for _ in range(LIMIT))
        assert admitted[live] <= LIMIT + share, admitted
        print(f"on the share: {dead} {on_share}, {live} {mine} by the handle that met the hung master "
              f"({others} by the other, global); admitted {admitted}")  # fmt: skip
    finally:
        lim.unlink()
        other.close()
        lim.close()


def _replica_of(master: int) -> int:
    info = dict(line.strip().split(":", 1) for line in ask_port(master, "info", "replication").splitlines()
                if ":" in line)  # fmt: skip
    return int(dict(f.split("=", 1) for f in info["slave0"].split(","))["port"])


WHY = "the share is the limiter's, not a spread group's: a handle that met one hung master decides every key \
on its share, beside handles deciding them globally"


@pytest.mark.xfail(strict=True, reason=WHY)
def test_a_lasting_partial_outage_keeps_keys_of_live_masters_strict(own_redis_cluster, name):
    """``?spread=16``, one group's master and its replica hung (no failover), the other masters
    answering (``cluster-require-full-coverage no``, so they go on serving their slots; with the
    default, the same holds until the node timeout marks the master failed: 15 s by default,
    many periods of a per-second limit). A worker's mixed traffic meets the hung group now and
    then; another worker's never does. A key on a live master: the limit in every period that
    starts inside the outage, as docs/operating.md promises once the outage has begun.

    On main: the first worker's switch back is refused at each probe (its share holds hits of
    the hung group's key, whose carry fails), so it decides the live master's key on its share
    all along, while the second decides it globally: 14 of 10 in every period (limit + share),
    the share's hits never carried meanwhile."""
    cluster, share, periods = own_redis_cluster, 4, 3
    url = cluster.url + "?spread=16"
    for port in cluster.procs:
        ask_port(port, "config", "set", "cluster-require-full-coverage", "no")
    clock = ManualClock(10**17)
    opened = {"backend": url, "on_error": "local", "timeout": 0.2, "fallback": f"{share}/minute",
              "clock": ServerTime(clock)}  # fmt: skip
    mixed, plain = Limiter(name, f"{LIMIT}/minute", **opened), Limiter(name, f"{LIMIT}/minute", **opened)
    hung = []
    try:
        ring = mixed._backend._keys_of
        master = cluster.master_of(ring("dead")[0])
        live = next(k for k in (f"live{i}" for i in range(1000)) if cluster.master_of(ring(k)[0]) != master)
        assert mixed.hit(live) and plain.hit(live)
        hung = [master, _replica_of(master)]
        for port in hung:
            cluster.freeze(port)
        per_period = []
        for _ in range(periods):
            clock.advance(70)  # a new period (and its last bucket) for every key
            mixed.hit("dead")  # the mixed traffic meets the hung group (on the share)
            time.sleep(0.6)  # past PROBE_S: the next calls probe
            admitted = 0
            for _ in range(LIMIT):
                admitted += mixed.hit(live) + plain.hit(live)
                mixed.hit("dead")
            per_period.append(admitted)
        print(f"{live} admitted per period, on a live master: {per_period} (limit {LIMIT})")
        assert per_period == [LIMIT] * periods, per_period
    finally:
        for port in hung:
            cluster.thaw(port)
        mixed.unlink()
        plain.close()
        mixed.close()


def test_the_names_own_master_hung_leaves_spread_keys_global(own_redis_cluster, name):
    """``?spread=16``: the hosts seen are counted in the name's own hash tag (``{NAME}``), on one
    master, while the keys are in their groups'. That master hung, a key whose group answers:
    its hit is decided globally, and the count of the hosts failing (due every BEAT_S) must not
    send the process to its share, where the next hits of every key were decided locally
    (before the fix: 20 of 20 on the share, 2 counted globally, and stats() raised at once)."""
    cluster = own_redis_cluster
    url = cluster.url + "?spread=16"
    lim = Limiter(name, f"{LIMIT * 10}/hour", backend=url, on_error="local", timeout=0.2)
    frozen = None
    try:
        master = cluster.master_of(f"shmwin:{{{name}}}:hosts")
        ring = lim._backend._keys_of
        live = next(k for k in (f"live{i}" for i in range(1000)) if cluster.master_of(ring(k)[0]) != master)
        assert lim.hit(live)
        frozen = master
        cluster.freeze(master)
        lim._local._next_beat = 0.0  # the hosts are due to be counted again (every BEAT_S)
        assert lim.hit(live)  # answered by the key's own master
        assert fallback_since(lim) is None, "a key whose master answers sent the process to its share"
        assert sum(lim.hit(live) for _ in range(20)) == 20
        assert lim.stats(live).used == 22  # every hit counted globally
    finally:
        if frozen is not None:
            cluster.thaw(frozen)
        lim.unlink()
        lim.close()


def test_a_probe_does_not_queue_behind_another_processs_carry(own_redis_cluster, name):
    """One process of the host carries the share's hits at a time (an exclusive flock of
    ``NAME.local.away``'s file). On a hung cluster each carry holds it while the client waits
    for its timeout four times (0.8 s at timeout=0.2), so the probes of a host's workers queued
    behind each other: 4 forked workers hitting for 5 s spent 70-93 % of it blocked, the slowest
    call 5.6 s (CARRY_WAIT_S, then a carry of its own). Here the flock is held as another
    prober's would be: a probe that does not get it soon stays on the share until its next
    probe, answering at once, and counts nothing twice (before the fix: 5.8 s for that hit)."""
    import fcntl
    import os

    from shmwin.backends.shm.segment import path_of

    cluster, share = own_redis_cluster, 5
    lim = Limiter(name, f"{LIMIT}/hour", backend=cluster.url, on_error="local", timeout=0.2,
                  fallback=f"{share}/hour")  # fmt: skip
    fd = -1
    try:
        assert lim.hit("warm")
        for port in list(cluster.procs):
            cluster.freeze(port)
        try:
            admitted = int(lim.hit("k"))  # meets the cluster away: on the share
            fd = os.open(path_of(name + ".local.away"), os.O_RDONLY)
            fcntl.flock(fd, fcntl.LOCK_EX)  # another process's carry, waiting on a hung node
            time.sleep(0.6)  # past PROBE_S: one of the next calls probes
            slowest = 0.0
            for _ in range(10):
                started = time.monotonic()
                admitted += lim.hit("k")
                slowest = max(slowest, time.monotonic() - started)
            assert slowest < 2.0, f"a hit waited {slowest:.2f}s behind another process's carry"
            assert admitted == share and fallback_since(lim) is not None
            os.close(fd)  # the other carrier is done
            fd = -1
        finally:
            for port in list(cluster.procs):
                cluster.thaw(port)
        cluster.wait_ok(60)
        until_back(lim)
        back = sum(lim.hit("k") for _ in range(LIMIT))
        assert LIMIT - 2 * share < back <= LIMIT - share, back  # the share's hits carried once
    finally:
        if fd >= 0:
            os.close(fd)
        lim.unlink()
        lim.close()
