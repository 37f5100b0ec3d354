"""A limiter's compact rings (layout.py, "Limiter rings"; core/rings.c): a header -- head, total,
zeroed, tail -- then one count per bucket without its epoch, 4 bytes when the rate's limit fits
an int32, else 8. Here: the row is as small as it says, the counts are as wide as the limit
needs, and the check-and-count (hit, test, stats: used, reset and wait) and the Python readers
(Window.totals over the limiter's rows) agree exactly with a pure-Python model of the bucket
ring as the head moves by one bucket, by a few, by a lap or more, and with a clock behind it.
Time is manual; two handles with two clocks make one clock lag the head another moved.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

import pytest

import shmwin
from shmwin import Limiter, ManualClock
from shmwin.backends.shm import layout

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000 * S


def _backend(lim: Limiter):  # type: ignore[no-untyped-def]
    return lim.window._backend


def _check(lim: Limiter, key: str, cost: int, commit: bool):  # type: ignore[no-untyped-def]
    """The core's check: (allowed, used per rate, reset_ns per rate, wait_ns or None)."""
    return _backend(lim)._core.check(key, cost, commit)


# -- the row ---------------------------------------------------------------------------------------


def test_the_default_limiters_row_is_three_cache_lines(name):
    """Limiter("100/minute"): 21 buckets of 4-byte counts after a 56-byte key header and a
    40-byte ring header: 180 bytes, rounded to 192 (rows of 128 bytes and more are whole lines)."""
    with Limiter(name, "100/minute", capacity=8) as lim:
        lay = _backend(lim)._lay
        assert lay.count_bytes == (4,)
        assert lay.row_bytes == 192
        assert lay.bucket_words[0] - lay.ring_words[0] == layout.LIMITER_RING_WORDS
        assert (lay.ring_words[0] + layout.LIMITER_RING_WORDS) * 8 + 21 * 4 == 180
    shmwin.unlink(name)


def test_a_limit_past_int32_gets_8_byte_counts_and_counts_past_2_to_the_31(name):
    big = 2**31 + 7  # 8-byte counts; the other rate keeps 4-byte ones
    clock = ManualClock(T0)
    with Limiter(name, [f"{big}/minute", f"{2**31 - 1}/hour"], capacity=8, clock=clock) as lim:
        lay = _backend(lim)._lay
        assert lay.count_bytes == (8, 4)
        assert lim.hit("k", 2**31 - 1), "the hour's limit is exactly an int32's largest"
        assert not lim.hit("k", 1), "the hour is full"
        _, used, _, _ = _check(lim, "k", 0, False)
        assert used == (2**31 - 1, 2**31 - 1)
    shmwin.unlink(name)
    with Limiter(name, f"{3 * 2**31}/minute", capacity=8, clock=clock) as lim:
        assert _backend(lim)._lay.count_bytes == (8,)
        assert lim.hit("k", 2**31 + 5)
        clock.advance(3)
        assert lim.hit("k", 2**31 + 5), "in the next bucket: 2**32 + 10 counted"
        assert not lim.hit("k", 2**31)
        _, used, _, _ = _check(lim, "k", 0, False)
        assert used == (2**32 + 10,)
        assert lim.window.totals(key="k")["hits"] == 2**32 + 10, "the Python reader agrees"
        first = _count_words(lim, "k")
        assert sorted(first)[-2:] == [2**31 + 5, 2**31 + 5], "each bucket holds its count past 2**31"
    shmwin.unlink(name)


def _count_words(lim: Limiter, key: str, ring: int = 0) -> list[int]:
    b = _backend(lim)
    found = b._core.find(key)
    assert found is not None
    lay, g = b._lay, b._g
    at = lay.rows_off + found[0] * lay.row_bytes + lay.bucket_words[ring] * 8
    width = lay.count_bytes[ring]
    n = g.rings[ring].n_buckets
    return list(struct.unpack_from(f"<{n}{'i' if width == 4 else 'q'}", b._buf, at))


def test_counts_carry_no_epoch_a_bucket_is_zeroed_when_its_slot_comes_round(name):
    """10/minute: 21 buckets of 3 s. Hits in buckets 0 and 2; 21 buckets later (one lap) the
    slot of bucket 0 is reused: zeroed, then counted, and bucket 0's hits are gone."""
    clock = ManualClock(T0 - T0 % (3 * S))
    with Limiter(name, "10/minute", capacity=8, clock=clock) as lim:
        assert lim.hit("k", 3)
        clock.advance(6)
        assert lim.hit("k", 2)
        counts = _count_words(lim, "k")
        assert sorted(counts) == [0] * 19 + [2, 3]
        clock.advance(3 * 19)  # the head moves 19 buckets: onto bucket 0's slot (21 after it)
        assert lim.hit("k", 1)
        counts = _count_words(lim, "k")
        assert sorted(counts) == [0] * 19 + [1, 2], "bucket 0's 3 hits left, its slot counts the new one"
        assert _check(lim, "k", 0, False)[1] == (3,)
    shmwin.unlink(name)


# -- the model -----------------------------------------------------------------------------------------


@dataclass
class RingModel:
    """One rate as the core keeps it: buckets of bucket_ns, the newest n counting, a head that
    never moves back (a clock behind it counts in the head's bucket). What a head move drops
    is kept as one ghost (its hits, capped at limit - the counts kept, at the newest dropped
    epoch), which a clock behind the head counts while that epoch is in its window."""

    limit: int
    bucket_ns: int
    n: int
    head: int | None = None
    counts: dict[int, int] = field(default_factory=dict)
    ghost_hits: int = 0
    ghost_epoch: int = 0

    def epoch(self, now: int) -> int:
        e = now // self.bucket_ns
        return e if self.head is None or e > self.head else self.head

    def move(self, now: int) -> None:
        """Bring the head to ``now``'s epoch (never back), keeping what leaves as the ghost."""
        e = self.epoch(now)
        if self.head is not None and e > self.head:
            edge, low = e - self.n, self.head - self.n
            dropped = [(x, c) for x, c in self.counts.items() if low < x <= min(edge, self.head) and c > 0]
            if dropped:
                kept = sum(c for x, c in self.counts.items() if max(edge, low) < x <= self.head)
                hits, newest = sum(c for _, c in dropped), max(x for x, _ in dropped)
                if self.ghost_hits:
                    hits, newest = hits + self.ghost_hits, max(newest, self.ghost_epoch)
                self.ghost_hits, self.ghost_epoch = max(0, min(hits, self.limit - kept)), newest
        self.head = e

    def ghost_seen(self, now: int) -> int:
        e_now = now // self.bucket_ns
        behind = self.head is not None and e_now < self.head
        return self.ghost_hits if behind and self.ghost_epoch > e_now - self.n else 0

    def used(self, now: int) -> int:
        if self.head is None:
            return 0
        ring = sum(c for e, c in self.counts.items() if self.head - self.n < e <= self.head)
        return ring + self.ghost_seen(now)

    def live(self, now: int) -> list[tuple[int, int]]:
        assert self.head is not None
        ghost = [(self.ghost_epoch, self.ghost_seen(now))] if self.ghost_seen(now) else []
        ring = sorted((e, c) for e, c in self.counts.items() if self.head - self.n < e <= self.head and c)
        return ghost + ring

    def leaves(self, e: int, now: int) -> int:
        return max(0, (e + self.n) * self.bucket_ns - now)

    def read(self, now: int) -> int:
        """What a lock-free reader at ``now`` sums: the last n buckets before now, of those kept."""
        if self.head is None:
            return 0
        e_now = now // self.bucket_ns
        kept = self.head - self.n
        return sum(c for e, c in self.counts.items() if e_now - self.n < e <= e_now and e > kept)


Verdict = tuple[bool, tuple[int, ...], tuple[int, ...], int | None]  # the core's check()


class LimiterModel:
    def __init__(self, lim: Limiter):
        self.rings = [RingModel(r.limit, r.bucket_ns, r.n_buckets) for r in lim.window.geometry.rings]
        self.known = False

    def check(self, now: int, cost: int, commit: bool) -> Verdict:
        if not self.known and not commit:  # a key never seen: nothing counted, nothing created
            allowed = cost <= min(r.limit for r in self.rings)
            return allowed, (0,) * len(self.rings), (0,) * len(self.rings), 0 if allowed else None
        self.known = True
        for r in self.rings:
            r.move(now)
        used = [r.used(now) for r in self.rings]
        allowed = all(cost <= r.limit and u <= r.limit - cost for u, r in zip(used, self.rings, strict=True))
        if allowed and commit:
            for r in self.rings:
                assert r.head is not None
                r.counts[r.head] = r.counts.get(r.head, 0) + cost
            used = [u + cost for u in used]
        resets, wait = [], 0
        for u, r in zip(used, self.rings, strict=True):
            live = r.live(now)
            resets.append(r.leaves(live[0][0], now) if live else 0)
            need = u - (r.limit - cost) if cost > r.limit - u else 0
            if allowed or need <= 0 or wait is None:
                continue
            if cost > r.limit:
                wait = None
                continue
            freed = 0
            for e, c in live:
                freed += c
                if freed >= need:
                    wait = max(wait, r.leaves(e, now))
                    break
        return allowed, tuple(used), tuple(resets), wait


RATES = {
    "one": (["9/second"], 4),  # 5 buckets of 250 ms
    "two": (["7/second", "20/5 seconds"], 4),  # 5 of 250 ms; 5 of 1.25 s
    "wide": (["40/2 seconds"], 20),  # 21 buckets of 100 ms
}


def _step_ns(rng: random.Random, bucket_ns: int, n: int) -> int:
    """How far a clock moves: within a bucket, one bucket, a few, a lap or more, or not at all."""
    pick = rng.random()
    if pick < 0.25:
        return 0
    if pick < 0.5:
        return rng.randrange(bucket_ns // 2)
    if pick < 0.7:
        return bucket_ns
    if pick < 0.92:
        return rng.randrange(1, n) * bucket_ns + rng.randrange(bucket_ns)
    return rng.randrange(n, 3 * n) * bucket_ns + rng.randrange(bucket_ns)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("rates", sorted(RATES))
def test_random_ops_agree_with_a_model_of_the_bucket_ring(name, rates, seed):
    """hit / test / check(detail) from two handles whose clocks move apart -- one lags the head
    the other moved -- against the model: every verdict, used, reset and wait exactly, and
    the lock-free reader's totals whenever its clock is not behind the head."""
    spec, buckets = RATES[rates]
    rng = random.Random(seed)
    clocks = [ManualClock(T0), ManualClock(T0)]
    handles = [Limiter(name, spec, capacity=8, buckets=buckets, clock=c) for c in clocks]
    try:
        model = LimiterModel(handles[0])
        finest = min(model.rings, key=lambda r: r.bucket_ns)
        coarsest = max(model.rings, key=lambda r: r.bucket_ns * r.n)
        for step in range(600):
            which = rng.randrange(2)
            ring = finest if rng.random() < 0.7 else coarsest
            clocks[which].set(clocks[which]() + _step_ns(rng, ring.bucket_ns, ring.n))
            now, lim = clocks[which](), handles[which]
            cost = rng.choice([0, 1, 1, 1, 2, 3, 5]) if rng.random() < 0.9 else rng.choice([8, 25, 50])
            op = rng.choice(["hit", "hit", "test", "check"])
            where = f"step {step}: {op}({cost}) by clock {which} at T0+{(now - T0) / S:.3f}s"
            if op == "hit" and cost >= 1:
                want = model.check(now, cost, True)
                assert lim.hit("k", cost) == want[0], where
            elif op == "test":
                want = model.check(now, max(cost, 0), False)
                assert lim.test("k", max(cost, 0)) == want[0], where
            else:
                want = model.check(now, cost, False)
                got = _check(lim, "k", cost, False)
                assert got == want, f"{where}: (allowed, used, reset_ns, wait_ns) {got}, the model {want}"
            if all(r.head is None or now // r.bucket_ns >= r.head for r in model.rings):
                for i, r in enumerate(model.rings):
                    total = lim.window.totals(key="k", resolution=i)["hits"]
                    assert total == r.read(now), f"{where}: the reader's ring {i} total"
    finally:
        for h in handles:
            h.close()
        shmwin.unlink(name)


def test_a_clock_behind_the_head_counts_in_the_heads_bucket(name):
    """A process whose clock lags counts in the newest bucket (later, never earlier): its hits
    are forgotten no sooner than the leading clock's."""
    ahead, behind = ManualClock(T0 + 10 * S), ManualClock(T0)
    a = Limiter(name, "5/minute", capacity=8, clock=ahead)
    b = Limiter(name, "5/minute", capacity=8, clock=behind)
    with a, b:
        assert a.hit("k")
        assert b.hit("k", 2), "counted in the head's bucket (T0 + 8 s .. 11 s), not T0's"
        assert _check(b, "k", 0, False)[1] == (3,)
        ahead.advance(60)  # T0 + 70 s: the head's bucket (T0 + 8 s .. 11 s) is the oldest of 21
        assert _check(a, "k", 0, False)[1] == (3,)
        ahead.advance(1)  # T0 + 71 s: it has left
        assert _check(a, "k", 0, False)[1] == (0,)
        assert a.hit("k", 5)
    shmwin.unlink(name)


def test_an_unkeyed_limiter_segments_rows_start_empty_as_the_core_empties_them(name):
    """A limiter geometry without keys shares the compact format: its rows are written at
    creation as the core's empty row (head, zeroed and tail EMPTY, counts 0), and read as 0."""
    from shmwin.backends.shm.window import ShmWindow
    from shmwin.geometry import Geometry, Ring

    g = Geometry((Ring(S, 21, 100), Ring(60 * S, 25, 2**40)), ("hits",), "int64", "locked", 0, 0, "limiter")
    w = ShmWindow.open_geometry(name, g)
    try:
        lay = w._lay
        assert lay.count_bytes == (4, 8)
        empty = layout.empty_rings(g, lay)
        assert w._core.layout["empty_row"] == empty
        for row in range(lay.n_rows):
            at = lay.rows_off + row * lay.row_bytes
            assert bytes(w._buf[at : at + lay.rings_bytes]) == empty
        for ring in range(2):
            assert w.read(None, ring, g.rings[ring].n_buckets, None, ordered=False).values.sum() == 0
    finally:
        w.close()
        shmwin.unlink(name)
