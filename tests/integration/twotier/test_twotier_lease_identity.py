"""A give-back on ``shm+redis://`` touches only the lease it took, even after Redis lost its state.

Redis may lose what it held: a restart without persistence, a rollback to an RDB snapshot, a
failover of a Redis Cluster slot to a replica that lagged. Leases granted afterwards must never
be shrunk or deleted by a give-back of a lease granted before (which a host still holds in its
shared memory and gives back when it finds it expired, or on close()). With ids handed out by a
counter in Redis, the lost counter handed the same ids out again, and an old give-back ate
another host's live lease: 90 hits admitted against 80 per 4 s.

Two "hosts" are two SHMWIN_NAMESPACEs in this process (each its own lease segment); time is a
ManualClock that drives both hosts and the server (ServerTime); nothing sleeps to a boundary.
Every hit counted here lands after every hit from before the loss has left the window, so "the
window restarts empty" (docs/several-hosts.md) does not excuse any of it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator

import pytest
from support.servers import redis_client

import shmwin
from shmwin import BackendUnavailableError, Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000 * S
LIMIT, RATE = 80, "80/4 seconds"
FIRST_HITS = 20  # host A's leases of 1, 2, 4, 8 and 10 (80 // 8): five lease ids taken


class Hosts:
    """Host A and host B: one limiter each, in their own namespace, sharing one ManualClock."""

    def __init__(self, name: str, url: str, ns: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name, self.url, self.ns, self.mp = name, url, ns, monkeypatch
        self.clock = ManualClock(T0)
        self.a = self.open("hA")
        self.b = self.open("hB")

    def enter(self, host: str) -> None:
        self.mp.setenv("SHMWIN_NAMESPACE", f"{self.ns}-{host}")

    def open(self, host: str) -> Limiter:
        self.enter(host)
        return Limiter(self.name, RATE, backend=self.url, clock=ServerTime(self.clock))

    def lease_id(self, lim: Limiter) -> int:
        words = lim._backend.leases().get("k")
        return int(words[0]) if words else 0

    def close(self) -> None:
        for host, lim in (("hB", self.b), ("hA", self.a)):  # B is never closed by a test
            self.enter(host)
            if not lim.closed:
                lim.unlink()  # the name in Redis (the first time), and this host's segment
                lim.close()
            shmwin.unlink_prefix(self.name)  # whatever this host still has


@pytest.fixture
def hosts(name, name_prefix, monkeypatch) -> Iterator[Callable[[str], Hosts]]:
    made: list[Hosts] = []

    def make(url: str) -> Hosts:
        made.append(Hosts(name, url, name_prefix, monkeypatch))
        return made[-1]

    yield make
    for h in made:
        h.close()


def attack(h: Hosts, lose_state: Callable[[], None], close_a: bool = False, wait_s: float = 4.5) -> int:
    """Host A takes leases; Redis loses its state; ``wait_s`` later (past A's lease's deadline,
    0.4 s) host B takes leases (until it holds one with A's id, if ids repeat); A gives its old
    lease back (a hit, or close()); then both hit for 1.5 s. The hits admitted after the loss
    (each counted in Redis's new state, so at most the limit)."""
    a, b, clock = h.a, h.b, h.clock
    assert sum(a.hit("k") for _ in range(FIRST_HITS)) == FIRST_HITS
    lose_state()
    held = h.lease_id(a)  # the lease A holds in its shared memory, granted before the loss
    assert held > 0
    clock.advance(wait_s)  # 4.5 s: every hit so far has left the window (4 s, exact)
    got = 0
    for _ in range(3 * LIMIT):
        if h.lease_id(b) == held:
            break
        got += b.hit("k")
    if close_a:
        h.enter("hA")  # as host A's own process would be
        a.close()  # its give-back through close()
        hosts_now = [b]
    else:
        got += a.hit("k")  # A finds its lease expired: seals it and gives it back
        hosts_now = [a, b]
    for _ in range(300):
        got += sum(lim.hit("k") for lim in hosts_now)
        clock.advance(0.005)
    return got


def kill_and_restart(server) -> None:
    """SIGKILL redis-server (nothing saved) and start it again, with whatever its dir holds."""
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait(20)
    server.proc = None
    server.start()


@pytest.mark.parametrize("close_a", [False, True], ids=["hit", "close"])
def test_a_restart_without_persistence_never_lets_an_old_give_back_eat_a_new_lease(own_redis, hosts, close_a):
    h = hosts("shm+" + own_redis.url)
    # close() gives back the leases of the keys live on the host (touched within a period): 0.5 s
    got = attack(h, lambda: kill_and_restart(own_redis), close_a=close_a, wait_s=0.5 if close_a else 4.5)
    print(f"restart without persistence ({'close' if close_a else 'hit'}): {got} admitted of {LIMIT}")
    assert got <= LIMIT
    assert got >= LIMIT - 8  # and nearly all of it: nothing stranded but B's last lease's rest


def test_a_rollback_to_an_rdb_snapshot_never_lets_an_old_give_back_eat_a_new_lease(own_redis, hosts):
    h = hosts("shm+" + own_redis.url)
    assert sum(h.a.hit("k") for _ in range(3)) == 3  # leases 1 and 2 (the snapshot's)
    client = redis_client(own_redis.url)
    try:
        client.save()  # the RDB snapshot the server will come back from
    finally:
        client.close()
    got = attack(h, lambda: kill_and_restart(own_redis))
    print(f"rollback to an RDB snapshot: {got} admitted of {LIMIT}")
    assert got <= LIMIT


def test_new_leases_ids_are_random_and_a_give_back_needs_its_grant_time(own_redis, hosts):
    """Each give-back names its lease by id AND grant time: the right id with another grant
    time (a give-back that Redis never saw granted) changes nothing."""
    h = hosts("shm+" + own_redis.url)
    assert h.a.hit("k") and h.b.hit("k")
    ida, idb = h.lease_id(h.a), h.lease_id(h.b)
    assert ida != idb and min(ida, idb) > 1 << 20  # drawn from 62 bits, not counted from 1
    backend = h.b._backend
    row = backend._server.lease_row("k")
    client = redis_client(own_redis.url)
    try:
        before = client.hgetall(row)
        words = backend.leases()["k"]
        grant_us = words[5]
        backend._server.lease("k", 0, 0, 1, [idb, grant_us + 1, 0, grant_us + 1])  # wrong grant time
        assert client.hgetall(row) == before
        backend._server.lease("k", 0, 0, 1, [idb, grant_us, 0, grant_us])  # its own: nothing spent, gone
        assert len(client.hgetall(row)) == len(before) - 1
    finally:
        client.close()


def _replica_of(cluster, master: int) -> int:
    out = cli(cluster, master, "info", "replication")
    for line in out.splitlines():
        if line.startswith("slave0:"):
            fields = dict(f.split("=", 1) for f in line.split(":", 1)[1].split(","))
            return int(fields["port"])
    raise AssertionError(f"master {master} has no replica:\n{out}")


def cli(cluster, port: int, *args: str) -> str:
    return subprocess.run([cluster.cli, "-p", str(port), *args], capture_output=True, text=True, timeout=10,
                          check=True).stdout  # fmt: skip


def _served(lim: Limiter, timeout: float = 60) -> None:
    """Wait (real time, for the cluster's failover, not for a clock) until ``lim`` is served."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lim.test("probe")
            return
        except BackendUnavailableError:
            assert time.monotonic() < deadline, "the cluster did not serve the name again"
            time.sleep(0.05)


def test_a_failover_to_a_lagging_replica_never_lets_an_old_give_back_eat_a_new_lease(
    own_redis_cluster, hosts
):
    """The master of the name's slot is SIGKILLed; its replica, which lagged (cut off before
    host A's last leases, so its data -- and a lease counter -- are older), takes the slot over."""
    cluster = own_redis_cluster
    h = hosts("shm+" + cluster.url)
    ring = f"shmwin:{{{h.name}}}:L:k"

    def fail_over_to_a_lagging_replica() -> None:
        master = cluster.master_of(ring)
        replica = _replica_of(cluster, master)
        # the replica has everything so far (A's first leases); then it is cut off
        assert cli(cluster, master, "wait", "1", "5000").strip() == "1"
        cluster.freeze(replica)
        cli(cluster, master, "client", "kill", "type", "replica")
        more = sum(h.a.hit("k") for _ in range(LIMIT // 2))  # A's next leases: on the master only
        assert more == LIMIT // 2
        cli(cluster, master, "set", f"{{{h.name}}}lagged", "1")
        cluster.kill(master)
        cluster.thaw(replica)
        cli(cluster, replica, "cluster", "failover", "takeover")
        cluster.wait_ok(60)
        assert cluster.master_of(ring) == replica
        assert cli(cluster, replica, "exists", f"{{{h.name}}}lagged").strip() == "0", "it lagged"
        _served(h.a)
        _served(h.b)

    got = attack(h, fail_over_to_a_lagging_replica)
    print(f"failover to a lagging replica: {got} admitted of {LIMIT}")
    assert got <= LIMIT
