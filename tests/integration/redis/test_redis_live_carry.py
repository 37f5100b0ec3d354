"""The carry of a change of layout on redis (hit.lua, docs/redis.md "Changing limits live"): each
hit counted once however often the layout switches back and forth, and a count that cannot grow
past what BITFIELD takes. One real server, the server's time driven by hand (ServerTime)."""

from __future__ import annotations

import struct

import pytest
from support.servers import redis_client

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime

redis = pytest.importorskip("redis")
T0 = 10**15


@pytest.mark.parametrize("other", ["100/61second", "100/minute;100000/hour"])
def test_switching_layouts_back_and_forth_counts_each_hit_once(redis_server, name, other):
    # red team F14: every switch re-carried rows that already held the earlier carries, dated in
    # other buckets: 2 real hits grew to 8 by the 49th switch, then 2^k until BITFIELD refused
    clock = ServerTime(ManualClock(T0))
    hitter = Limiter(name, "100/minute", backend=redis_server.url, clock=clock, on_error="allow")
    changer = Limiter.attach(name, backend=redis_server.url, clock=clock)
    try:
        assert [hitter.hit("k") for _ in range(2)] == [True, True]
        for switch in range(64):
            changer.set_rates(other if switch % 2 == 0 else "100/minute")
            clock.clock.advance(0.01)
            assert hitter.stats("k").used == 2, f"after switch {switch + 1}"
        assert hitter.hit("k")
        assert changer.stats("k").used == 3
    finally:
        changer.unlink()


def test_a_carried_count_past_what_bitfield_takes_is_clamped_not_an_error(redis_server, name):
    # a row holding a count near int64's end (written by an older version's runaway carry): its
    # carry into a new layout answers, refused, instead of a raw ResponseError on every hit
    clock = ServerTime(ManualClock(T0))
    hitter = Limiter(name, "100/minute", backend=redis_server.url, clock=clock, on_error="allow")
    try:
        assert hitter.hit("k")
        row, client = f"shmwin:{{{name}}}:k:k", redis_client(redis_server.url)
        raw = client.get(row)  # i64 words: head, total, then (epoch, hits) per bucket
        words = struct.unpack(f">{len(raw) // 8}q", raw)
        hits_word = next(w + 1 for w in range(2, len(words), 2) if words[w] > 0)
        client.bitfield(row).set("i64", "#1", 2**62).set("i64", f"#{hits_word}", 2**62).execute()
        hitter.set_rates("100/61second")
        assert hitter.hit("k") is False
        assert hitter.stats("k").used == 2**53
    finally:
        hitter.unlink()
