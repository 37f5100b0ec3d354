"""limits' moving window on ``shm://...?buckets=N`` (a Limiter's compact ring, core/rings.c)
under a wall clock that steps: the issue's attack (#33, item 2) and its variations. memory://
never admits a hit whose window still holds the limit's hits, whatever the clock did in
between; neither may shm:// (a hit is forgotten between P and P + P/buckets after it)."""

from __future__ import annotations

import pytest
from support.stepping import forward_then_back

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

RATES = [("5/second", 1), ("12/minute", 60), ("10/hour", 3600)]
BUCKETS = [1, 2, 4, 10, 20, 50]  # each divides one second into whole nanoseconds
JUMPS = [2, 3, 10]  # in periods; and 10**6 s below


@pytest.mark.parametrize("rate, period_s", RATES)
@pytest.mark.parametrize("buckets", BUCKETS)
@pytest.mark.parametrize("jump", [*JUMPS, "1e6s"])
def test_forward_then_back_answers_as_memory(name, monkeypatch, rate, period_s, buckets, jump):
    """The limit's hits at T; the clock jumps forward for one hit; back to T + 1 s (a second
    rate: T + P/2), the hits at T are in the window: memory:// admits nothing there, and
    neither does shm:// (it admitted up to L - 1: the later hit's head move forgot them)."""
    pytest.importorskip("limits")
    from limits import parse

    now = [1_800_000_000.0]
    monkeypatch.setattr("time.time", lambda: now[0])
    item = parse(rate)
    jump_s = 10**6 if jump == "1e6s" else int(jump) * period_s
    back_s = 1 if period_s > 1 else 0.5
    # the hit ahead counts too: shm:// has nothing left
    answers = forward_then_back(name, f"shm://{name}?buckets={buckets}", item, jump_s, back_s, now,
                                lambda left: left <= 0)  # fmt: skip
    assert answers["shm"] == answers["memory"] == (item.amount, True, 0)


def test_a_key_idle_at_the_newest_reading_is_forgotten_as_memory_forgets_it(name, monkeypatch):
    """The documented limit of the guarantee (docs/limits-storage.md): 5 hits at T, the
    clock 130 s ahead (past the key's idle time) while memory://'s expiry runs, or while new
    keys make shm://'s key table rebuild (dropping idle keys); back at T + 30 s the 5 hits
    are gone on both, and both admit 5 again. Kept this way: a key's idle test cannot know
    that a clock will come back, and keeping every key for any step back would keep them all."""
    pytest.importorskip("limits")
    from limits import parse
    from limits.storage import MemoryStorage, storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    import shmwin.integrations.limits  # registers shm://

    now = [1_800_000_000.0]
    monkeypatch.setattr("time.time", lambda: now[0])
    item = parse("5/minute")
    answers = {}
    try:
        for uri in (f"shm://{name}?buckets=20", "memory://"):
            now[0] = 1_800_000_000.0
            storage = storage_from_string(uri)
            limiter = MovingWindowRateLimiter(storage)
            assert all(limiter.hit(item, "victim") for _ in range(5))
            now[0] += 130
            if isinstance(storage, MemoryStorage):
                storage._MemoryStorage__expire_events()  # type: ignore[attr-defined]  # its timer's run
            else:
                for i in range(300):  # new keys: the table grows, its rebuild drops idle keys
                    limiter.hit(item, f"filler{i}")
            now[0] -= 100
            answers[uri.split(":")[0]] = sum(limiter.hit(item, "victim") for _ in range(5))
        assert answers == {"shm": 5, "memory": 5}
    finally:
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)
