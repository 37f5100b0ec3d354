"""redis+sentinel:// against a real master, a replica and 3 sentinels (Debian's redis-sentinel):
the limiter follows the master the sentinels name, a failover under load admits no hit beyond
a key's limit, and the calls that meet the failover get the limiter's on_error."""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time

import pytest

from shmwin import Limiter
from shmwin.backends.redis.client import UnacknowledgedWriteError
from shmwin.errors import BackendUnavailableError

LIMIT = 300  # per key, over an hour: nothing is forgotten while the test runs
KEYS = 10
WORKERS = 4
DRAINED = 500  # denials in a row, after the failover, that end a worker


def test_a_sentinel_url_finds_the_master_and_counts_there(sentinel_group, make_name):
    lim = Limiter(make_name("l"), "3/hour", backend=sentinel_group.url)
    try:
        assert [lim.hit("k") for _ in range(4)] == [True, True, True, False]
        assert lim.url == sentinel_group.url
    finally:
        lim.unlink()
        lim.close()


def test_shm_redis_sentinel_leases_from_the_master(sentinel_group, make_name):
    lim = Limiter(make_name("l"), "5/hour", backend="shm+" + sentinel_group.url)
    try:
        assert sum(lim.hit("k") for _ in range(9)) == 5
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.parametrize("scheme", ["redis+sentinel", "shm+redis+sentinel"])
def test_a_write_no_replica_acknowledges_is_answered_before_the_timeout(sentinel_group, make_name, scheme):
    """The replica stopped (SIGSTOP): the WAIT after each write times out. It takes half the
    limiter's timeout, so the answer -- unacknowledged, with what the script wrote -- reaches
    the caller before the socket's timeout: as long as it, the socket won the race under load,
    and a two-tier host could not tell which lease Redis had granted."""
    url = sentinel_group.url.replace("redis+sentinel", scheme, 1)
    lim = Limiter(make_name("l"), "5/hour", backend=url, timeout=0.5)
    replica = sentinel_group.procs[next(p for p in sentinel_group.data_ports if p != sentinel_group.master)]
    try:
        assert lim.hit("k")
        os.kill(replica.pid, signal.SIGSTOP)
        try:
            with pytest.raises(UnacknowledgedWriteError, match="0 of 1 replicas"):
                lim.hit("k2")
        finally:
            os.kill(replica.pid, signal.SIGCONT)
    finally:
        lim.unlink()
        lim.close()


def _hammer(url: str, name: str, on_error: str, admitted_so_far, after_failover, out) -> None:  # type: ignore[no-untyped-def]
    """One worker: hit random keys, until after the failover it met DRAINED denials in a row
    (every key spent); puts its admitted hits per key, before and after the failover, and how
    many calls raised (on_error="raise")."""
    admitted = [[0, 0] for _ in range(KEYS)]
    raised = denied_in_a_row = 0
    lim = Limiter(name, f"{LIMIT}/hour", backend=url, on_error=on_error, timeout=0.2)
    rng = random.Random()
    while denied_in_a_row < DRAINED:
        key = rng.randrange(KEYS)
        phase = int(after_failover.is_set())
        try:
            ok = lim.hit(str(key))
        except BackendUnavailableError:
            raised += 1
            time.sleep(0.005)  # paced too: unpaced, ~150,000 raises a worker loaded the failover
            continue  # not a denial: the failover's calls must not end the worker
        admitted[key][phase] += ok
        if ok:
            with admitted_so_far.get_lock():
                admitted_so_far.value += 1
        denied_in_a_row = 0 if ok or not phase else denied_in_a_row + 1
        time.sleep(0.005)  # pace: the keys must outlast the failover's start
    lim.close()
    out.put((admitted, raised))


@pytest.mark.parametrize("scheme", ["redis+sentinel", "shm+redis+sentinel"])
def test_a_failover_under_load_admits_no_hit_beyond_the_limit(sentinel_group, make_name, scheme):
    """The workers run with on_error="raise", so that the calls the failover meets are seen
    (and are no denials). Without the WAIT in each round trip (``?replicas=0``) redis+sentinel
    admits 542 of 300: the hits the old master took after the promotion are lost when it
    resyncs from the new one."""
    name = make_name("l")
    url = sentinel_group.url.replace("redis+sentinel", scheme, 1)
    ctx = mp.get_context("fork")
    admitted_so_far, after_failover, out = ctx.Value("q", 0), ctx.Event(), ctx.Queue()
    workers = [ctx.Process(target=_hammer, args=(url, name, "raise", admitted_so_far, after_failover, out))
               for _ in range(WORKERS)]  # fmt: skip
    for w in workers:
        w.start()
    try:
        _wait_until(lambda: admitted_so_far.value >= 100)
        sentinel_group.failover()  # the sentinels agree and the old master follows the new one
        after_failover.set()
        results = [out.get(timeout=120) for _ in workers]
    finally:
        for w in workers:
            w.join(30)
            if w.is_alive():
                w.kill()
        cleaner = Limiter(name, f"{LIMIT}/hour", backend=url, on_error="allow")
        cleaner.unlink()
        cleaner.close()
    per_key = [sum(r[0][k][0] + r[0][k][1] for r in results) for k in range(KEYS)]
    before = sum(r[0][k][0] for r in results for k in range(KEYS))
    after = sum(r[0][k][1] for r in results for k in range(KEYS))
    assert max(per_key) <= LIMIT, per_key  # strict across the failover
    assert before > 0, before
    # load on both masters: on shm+redis+sentinel too, where the leases the new master granted
    # while no replica could acknowledge them are given back at the key's next round trip (they
    # used to count in full until the hour was over, and the workers admitted nothing after the
    # failover)
    assert after > 0, (before, after)
    assert sum(r[1] for r in results) > 0  # the calls that met the failover raised: on_error


def _wait_until(cond, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
