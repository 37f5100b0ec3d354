"""What a process that has not seen a change of rates on redis does at its next call (docs/redis.md,
"Changing limits live"): it follows the change first, whatever the call -- a clear of a key, a
token bucket's cost checked against the burst in force. Real processes (support.redis_live.Worker,
the code each was started with) on one real server and one hand-driven clock."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.redis_live import Worker

from shmwin import Limiter, ManualClock, TokenBucket

redis = pytest.importorskip("redis")
T0 = 10**15


def _clock(tmp_path: Path) -> Path:
    ManualClock(T0, path=tmp_path / "clock")
    return tmp_path / "clock"


def test_a_stale_process_clear_follows_the_change_of_layout(redis_server, name, tmp_path):
    # red team F4: the stale clear deleted its own layout's row only; the new layout's first hit
    # then carried the old hits back from the rows it did not know: the clear was lost
    url, clock = redis_server.url, _clock(tmp_path)
    stale = Worker(name, url, "10/minute", "carry", clock)
    try:
        assert stale.ask("hit k 12") == "10"
        newest = Worker(name, url, "5/second;10/minute", "carry", clock)
        assert newest.ask("hit k 1") == "0"  # carried: the 10 still count
        assert stale.ask("clear k") == "cleared"
        assert newest.ask("hit k 1") == "1"
        assert stale.ask("hit k 10") == "4"  # it follows: 5/second, one taken by the newest
        assert stale.ask("rates") == newest.ask("rates") == "5/second;10/minute"
        for w in (stale, newest):
            w.close()
    finally:
        Limiter.attach(name, backend=url).unlink()


@pytest.mark.parametrize(
    ("stale_burst", "new_burst", "cost", "want"), [(5, 10, 8, "1"), (10, 5, 8, "ValueError")]
)
def test_a_stale_token_bucket_checks_a_cost_against_the_burst_in_force(
    redis_server, name, tmp_path, stale_burst, new_burst, cost, want
):
    # red team F5: the cost was checked against the burst the process knew, before any round
    # trip: above it, a ValueError naming a burst the name no longer has, forever; below it but
    # past the new one, False where a fresh handle raises
    url, clock = redis_server.url, _clock(tmp_path)
    stale = Worker(name, url, "1/minute", "carry", clock, burst=stale_burst)
    try:
        newest = Worker(name, url, "1/minute", "carry", clock, burst=new_burst)
        assert stale.ask(f"cost a {cost}") == want
        assert stale.ask("rates") == newest.ask("rates") == f"1/minute burst={new_burst}"
        for w in (stale, newest):
            w.close()
    finally:
        TokenBucket.attach(name, backend=url).unlink()


@pytest.mark.parametrize("rates", ["10/minute", "2/second;10/minute"])
def test_a_hit_that_meets_a_change_at_every_read_still_answers(redis_server, name, rates):
    # red team F1: under a storm of changes a hit raised GeometryMismatchError after 8 reads;
    # here another process's change lands after each of the hitter's reads, every time
    url = redis_server.url
    hitter = Limiter(name, rates, backend=url, on_change="carry")
    flips = iter(["2/second;20/minute", "20/minute"] * 20)  # each one a change
    real_sync = hitter._backend._sync
    changing = subprocess.Popen([*_CHANGER, name, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
    assert changing.stdin is not None and changing.stdout is not None

    def sync_then_changed(key: str) -> None:
        real_sync(key)
        changing.stdin.write(next(flips) + "\n")
        changing.stdin.flush()
        assert changing.stdout.readline() == "changed\n"  # "": the changer failed (its stderr is shown)

    hitter._backend._sync = sync_then_changed
    changer = Limiter.attach(name, backend=url)
    try:
        changer.set_rates("20/minute")
        assert hitter.hit("k") is True  # answered with the rates read last
        assert changer.stats("k").used == 1  # counted there, and carried by the change after it
        assert hitter.stats("k").remaining >= 0  # a read answers too
    finally:
        changing.stdin.close()
        assert changing.wait(60) == 0
        changer.unlink()


# One process makes every change, each through a handle attached for it, as a process started
# per change did: the same change from another process, without an interpreter's start (0.2
# CPU-s, importing shmwin and redis) per change: 4.4 CPU-s a case before.
_CHANGER = [
    sys.executable, "-c",
    "import sys; from shmwin import Limiter\n"
    "for rates in sys.stdin:\n"
    "    lim = Limiter.attach(sys.argv[1], backend=sys.argv[2]); lim.set_rates(rates.strip()); lim.close()\n"
    "    print('changed', flush=True)",
]  # fmt: skip
