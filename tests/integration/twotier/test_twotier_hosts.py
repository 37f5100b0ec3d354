"""Three hosts on one machine, one redis-server: the two-tier backend's strictness across hosts.

Each "host" is a mount namespace with its own tmpfs on /dev/shm (tests/support/rootenv.py), running
tests/apps/twotier_host.py: 2 worker processes hammering one global limit of 1,000/minute.
Time is a ManualClock in a file that every process reads, the Redis scripts' time included;
the test moves it through 2 minutes in 20 ms ticks (about 15 s of real time), never while a
call is in flight (a file lock), and each worker makes up to 20 hits a tick: demand is far
above the limit throughout. Every admitted hit's time is recorded, and then:

* in any 60 s interval, the hits admitted across hosts never exceed 1,000;
* while demand exceeds the limit, at least 900 are admitted in each minute;
* with one host SIGKILLed mid-run, and with redis-server stopped and restarted mid-run
  (it keeps its data: appendonly), the first holds throughout; while Redis is down
  ``on_error="deny"`` applies once the hosts' leases are spent.
"""

from __future__ import annotations

import pytest
from support.hosts import (
    HOSTS,
    LIMIT,
    PERIOD,
    SECOND_BURST_S,
    T0,
    TICK_NS,
    WORKERS,
    count_in,
    most_in_any_period,
    persistent_redis_fixture,  # noqa: F401  (the persistent_redis fixture)
    run_hosts,
    tick_at,
)
from support.rootenv import needs_namespace

pytestmark = [pytest.mark.integration, needs_namespace]
redis = pytest.importorskip("redis")
S = 1_000_000_000


def test_three_hosts_never_admit_more_than_the_limit_and_nearly_all_of_it(persistent_redis, name, tmp_path):
    times = run_hosts(persistent_redis, name, tmp_path, {})
    assert most_in_any_period(times) <= LIMIT
    per_minute = [count_in(times, T0 + m * PERIOD, T0 + (m + 1) * PERIOD) for m in range(2)]
    assert min(per_minute) >= 900, f"admitted per minute: {per_minute}"


def test_a_host_killed_mid_run_strands_at_most_its_leases(persistent_redis, name, tmp_path):
    """Killed during the second minute's first burst, while the hosts hold leases."""
    times = run_hosts(persistent_redis, name, tmp_path, {tick_at(SECOND_BURST_S) + 3: "kill"})
    assert most_in_any_period(times) <= LIMIT
    per_minute = [count_in(times, T0 + m * PERIOD, T0 + (m + 1) * PERIOD) for m in range(2)]
    # the dead host's leases (two workers' races: at most 2 x 1000 // 8) stay counted until d + P
    assert per_minute[0] >= 900 and per_minute[1] >= 900 - 2 * LIMIT // 8, per_minute


def test_redis_stopped_and_restarted_mid_run_stays_strict(persistent_redis, name, tmp_path):
    """Stopped during the second minute's first burst (the hosts hold leases), back at 75 s."""
    stop = tick_at(SECOND_BURST_S) + 3
    times = run_hosts(persistent_redis, name, tmp_path, {stop: "stop", tick_at(75): "start"})
    assert most_in_any_period(times) <= LIMIT
    # while Redis is away, only what the hosts held is spent, then on_error="deny"
    down = count_in(times, T0 + (stop + 1) * TICK_NS, T0 + 75 * S)
    assert down <= HOSTS * WORKERS * (LIMIT // 8), f"{down} admitted while redis was down"
    assert count_in(times, T0 + 75 * S, T0 + 120 * S) > 0, "nothing admitted after redis came back"
