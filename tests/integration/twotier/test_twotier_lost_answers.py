"""Leases whose round trip failed after lease.lua ran: the answer lost (a timeout), or the answer
come back without the replicas' acknowledgement (a sentinel URL's WAIT, a failover under way).
The host never installed such a lease, so nothing of it was spent: it must go back, or Redis
counts it in full until its period ends and the key starves (the sentinel failover test, loaded:
3,000 hits counted of 352 admitted, and nothing admitted after the failover). One host, two
workers (two handles), a real redis-server; time a ManualClock; the loss made by hand at the
client's EVALSHA, after the script ran.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.lease_host import two_workers

from shmwin import Limiter, ManualClock
from shmwin.backends import twotier
from shmwin.backends.redis.client import UnacknowledgedWriteError
from shmwin.errors import BackendUnavailableError

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration
S = 1_000_000_000
RATE = "24/minute"  # leases of 1, 2, then 24 // 8 = 3 hits; D = 1 s


@pytest.fixture
def host(name, redis_url, monkeypatch):
    """Two workers of one host, one ManualClock; the real-time pause after a failed round trip
    (DOWN_BACKOFF_S) out of the way, so that the next hit asks at once."""
    monkeypatch.setattr(twotier, "DOWN_BACKOFF_S", 0.0)
    clock = ManualClock(1_000 * S)
    with two_workers(name, RATE, redis_url, clock) as (a, b):
        yield a, b, clock


def _fail_next_round_trip(lim: Limiter, fail: Any, run: bool = True) -> None:
    """The next EVALSHA of ``lim`` runs on the server (or, ``run`` False, never gets there), then
    ``fail(answer)`` raises instead of answering; later calls are the client's own again."""
    client = lim._backend._server._redis
    real = client.evalsha

    def failed(*args: Any) -> Any:
        client.evalsha = real
        fail(real(*args) if run else None)

    client.evalsha = failed


def _timed_out(answer: Any) -> None:
    raise redis.TimeoutError("Timeout reading from socket")


def _unacknowledged(answer: Any) -> None:
    raise UnacknowledgedWriteError("0 of 1 replicas acknowledged the write", answer)


@pytest.mark.parametrize("fail", [_timed_out, _unacknowledged], ids=["timed-out", "unacknowledged"])
def test_a_lease_never_installed_goes_back_though_the_host_cached_a_refusal_for_it(host, fail):
    """a's round trip takes Redis's last 3 hits and loses its answer; b, asking next, is refused
    (Redis counts them) and caches that refusal for the whole host. a's next hit gives the 3 back
    -- a timed-out one by its lease id alone: its grant time never came back -- and the host
    admits them."""
    a, b, _ = host
    assert sum(a.hit("k") for _ in range(21)) == 21  # leases 1, 2, 3 x 6, all spent
    _fail_next_round_trip(a, fail)
    with pytest.raises(BackendUnavailableError):
        a.hit("k")
    assert a.stats("k").used == 24  # the lease the host never installed, counted in Redis
    assert not b.hit("k")  # refused by Redis: cached for the host
    assert sum(w.hit("k") for _ in range(5) for w in (a, b)) == 3, "the lost lease's hits stayed counted"
    assert a.stats("k").used == 24 and not a._backend._owed


def test_a_round_trip_that_never_ran_gives_its_give_back_again(host):
    """An expired lease's round trip (its 2 unused hits given back, a new lease asked) fails
    before the script ran -- the caller cannot tell: the give-back goes again with the next one
    (give-backs are idempotent), or those 2 hits stay counted and the key refuses them."""
    a, b, clock = host
    assert sum(a.hit("k") for _ in range(22)) == 22  # the last lease of 3: 1 spent, 2 unused
    clock.advance(2)  # past its deadline (D = 1 s): sealed at the next hit, its 2 given back
    _fail_next_round_trip(a, _timed_out, run=False)
    with pytest.raises(BackendUnavailableError):
        a.hit("k")
    assert a.stats("k").used == 24  # the give-back never landed
    admitted = sum(w.hit("k") for _ in range(5) for w in (a, b))
    assert admitted == 2, "the expired lease's unused hits were stranded"
    assert a.stats("k").used == 24 and not a._backend._owed


def test_a_give_back_by_lease_id_alone_touches_its_own_lease_only(host):
    """A give-back whose grant time is unknown (-1) finds its lease by the id; another id, or a
    malformed one, changes nothing; a later give-back of the same lease is a no-op."""
    a, _, _ = host
    assert a.hit("k") and a.hit("k")  # leases of 1, then 2 (1 spent)
    server, words = a._backend._server, a._backend.leases()["k"]
    lease_id = words[0]
    used = a.stats("k").used
    assert used == 3
    for other in ([lease_id + 1, -1, 0, 0], [lease_id, -2, 0, 0], [-lease_id, -1, 0, 0]):
        server.lease("k", 0, 0, 1, other)
        assert a.stats("k").used == used, other
    server.lease("k", 0, 0, 1, [lease_id, -1, 5, 0])  # whole: its host never spent it
    assert a.stats("k").used == 1
    server.lease("k", 0, 0, 1, [lease_id, -1, 0, 0])
    assert a.stats("k").used == 1
