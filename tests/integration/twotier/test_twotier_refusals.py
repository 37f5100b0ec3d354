"""A host's cached refusal (``lease_deny``: Redis said wait, so the host refuses without asking)
against the hits the same host gives back to Redis. One host, its workers interleaved by hand
at the points where they race; a real redis-server; time a ManualClock.

A refusal is true when Redis answers it. Hits the host gives back afterwards -- the unused part of
a lease that expired, of a lease sealed at a worker's close(), of a lease that came back too late
to be spent -- make it false: the host must ask again, or those hits are refused until d + P
though Redis counts them nowhere (the contract test's 489 of 500 on the loaded CI machine).
"""

from __future__ import annotations

from typing import Any

import pytest
from support.lease_host import two_workers

from shmwin import Limiter, ManualClock

redis = pytest.importorskip("redis")
pytestmark = pytest.mark.integration
S = 1_000_000_000
T0 = 1_000 * S
RATE, LIMIT = "24/minute", 24  # leases of 1, 2, then 24 // 8 = 3 hits; D = 1 s


@pytest.fixture
def host(name, redis_url):
    """Two workers of one host (two handles on its lease segment), one ManualClock."""
    clock = ManualClock(T0)
    with two_workers(name, RATE, redis_url, clock) as (a, b):
        yield a, b, clock


def _fill(a: Limiter) -> None:
    """22 hits: leases 1, 2, 3 x 6 (21 hits), then one of 3 with 1 spent: Redis counts 24 (full),
    the host's live lease holds 2 unused."""
    assert sum(a.hit("k") for _ in range(22)) == 22
    lease_id, granted, spent = a._backend.leases()["k"][:3]
    assert lease_id > 0 and (granted, spent) == (3, 1)


def _refused_by_redis(b: Limiter) -> int:
    """Worker b's round trip when its spend found no lease to use: Redis's refusal (the wait
    until its hit fits, ns), as TwoTierLimiter._take gets it."""
    tier = b._backend
    granted, _, _, _, wait_us = tier._server.lease("k", 1, 1, tier._spend_us, [])[:5]
    assert granted == 0 and wait_us > 0
    return int(wait_us) * 1000


def _admitted_after(a: Limiter, b: Limiter) -> int:
    return sum(w.hit("k") for _ in range(10) for w in (a, b))


def test_an_expired_lease_goes_back_at_the_next_hit_even_while_a_refusal_is_cached(host):
    """b was refused while a's lease was live (Redis counted it); a's lease expires unspent."""
    a, b, clock = host
    _fill(a)
    b._backend._lease.deny("k", clock() + _refused_by_redis(b))  # b's _take, its refusal cached
    clock.advance(2)  # past the lease's deadline: its 2 unused hits go back at the next hit
    assert _admitted_after(a, b) == 2, "the expired lease's unused hits were stranded"


def test_a_workers_close_forgets_a_refusal_cached_before_its_give_back_landed(host):
    """a closes (its live lease sealed, its unused part given back); b, refused by Redis between
    the seal and the give-back, cached that refusal."""
    a, b, _ = host
    _fill(a)
    server = a._backend._server
    real = server.lease

    def give_back_after_b_was_refused(key: Any, want: int, *rest: Any) -> list[int]:
        if want == 0:  # a's give-back at close(), still on its way: b hits meanwhile
            assert not b.hit("k")  # the host holds no lease; Redis still counts a's: refused
        return real(key, want, *rest)

    server.lease = give_back_after_b_was_refused  # type: ignore[method-assign]
    a._backend.hand_back()
    server.lease = real  # type: ignore[method-assign]
    assert _admitted_after(a, b) == 2, "the hits a gave back were refused on its own host"


def test_a_lease_that_came_too_late_forgets_the_refusal_it_caused(host):
    """a's round trip takes Redis's last 3 hits, then a stalls past the lease's deadline (D): it
    gives them all back; b, refused meanwhile because of them, cached that refusal."""
    a, b, clock = host
    assert sum(a.hit("k") for _ in range(21)) == 21  # leases 1, 2, 3 x 6, all spent
    server = a._backend._server
    real = server.lease

    def granted_then_stalled(key: Any, want: int, *rest: Any) -> list[int]:
        out = real(key, want, *rest)
        if want > 0:
            assert out[0] == 3  # the last 3 hits Redis had
            assert not b.hit("k")  # b: no lease on the host, Redis full: refused, cached
            clock.advance(2)  # a stalled past D: its lease cannot be spent any more
        return out

    server.lease = granted_then_stalled  # type: ignore[method-assign]
    assert not a.hit("k")  # too late: given back whole
    server.lease = real  # type: ignore[method-assign]
    assert _admitted_after(a, b) == 3, "the late lease's hits were refused on its own host"
