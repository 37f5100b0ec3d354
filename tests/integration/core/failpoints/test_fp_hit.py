"""Fail points: hit.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import (
    EMPTY,
    KILL,
    LIMITER_RING_HEAD,
    LIMITER_RING_ZEROED,
    LOCK_TIMEOUT,
    MAX_STORES,
    PROGRESS,
    SIGNALS,
    T0,
    S,
)

import shmwin
from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


def _hits(name: str, rates: list[str], clock_path: Path, key: str, count: int) -> list[bool]:
    lim = Limiter(name, rates, capacity=16, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT)
    got = [bool(fp.promptly(lim.hit, key)) for _ in range(count)]
    lim.close()
    return got


PRE_HITS = [T0, T0, T0 + 60 * S, T0 + 60 * S]  # the victim's hits that return
# 63 s = 21 buckets of "10/minute" (3 s each): the struck hit recycles the bucket of the first
# hits (still holding them), and advances every head: every store is made
STRUCK_AT = T0 + 63 * S
# and a head moved by 4 of 21 buckets (10/minute): 4 counts leave the total and are zeroed
SCATTERED = ([T0 + 3 * S * i for i in range(5)] + [T0 + 60 * S], T0 + 72 * S)
PRES = [pytest.param((PRE_HITS, STRUCK_AT), id="recycled"), pytest.param(SCATTERED, id="scattered")]
# survivors after the strike: (seconds to advance first, who hits, how many hits)
SCHEDULE = [(0, "here", 4), (0, "child", 4), (0.5, "here", 3), (2, "child", 3), (30, "here", 6),
            (31, "child", 12), (4, "here", 12), (64, "here", 12)]  # fmt: skip


@pytest.mark.parametrize("pre", PRES)
@pytest.mark.parametrize("rates", [["10/minute"], ["3/second", "10/minute"]], ids=["one-rate", "two-rates"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_hit(make_name, tmp_path, rates, sig, pre):
    """Limiter.hit struck at every store: the limit holds in every interval afterwards. The
    struck hit moves each compact ring's head: by a lap or more (every count zeroed), or by
    a few buckets (the counts that leave taken out of the total, then zeroed)."""
    pre_hits, struck_at = pre
    inflights: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"hit{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, rates, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            other, model = fp.Model(lim), fp.Model(lim)
            for _ in range(2):
                assert lim.hit("other")
                other.count(T0)

            def open_mine(mine_clock: ManualClock) -> Limiter:
                return Limiter(name, rates, capacity=16, clock=mine_clock, lock_timeout=5)

            before = fp.hits_then_strike(open_mine, clock_path, pre_hits, struck_at)
            hit, test = (lambda mine: mine.hit("k")), (lambda mine: mine.test("k"))
            with fp.strike("hit", n, sig, before, hit, test) as s:
                assert s.report[PROGRESS] == len(pre_hits)
                for at in pre_hits:
                    model.count(at)
                now = clock()
                used = [st.used for st in fp.promptly(lim.stats_all, "k")]  # the dead holder's lock
                fp.assert_repaired(lim, "k")
                inflight = tuple(u - p for u, p in zip(used, model.used(now), strict=True))
                assert set(inflight) <= {0, 1}, f"returned hits lost, or the one in flight twice: {inflight}"
                assert list(inflight) == sorted(inflight, reverse=True), "rates are counted in order"
                if s.completed:
                    assert inflight == (1,) * len(rates), "the hit completed: it is counted in every rate"
                inflights[n] = inflight
                model.count(now, [i for i, x in enumerate(inflight) if x])
                fp.assert_stats(lim, "k", model, now)
                admitted = [*pre_hits, *([now] if s.completed else [])]
                assert [st.used for st in lim.stats_all("other")] == other.used(now), "another key moved"
                for advance, who, count in SCHEDULE:
                    now = clock.advance(advance)
                    if who == "here":
                        got = [bool(fp.promptly(lim.hit, "k")) for _ in range(count)]
                    else:
                        got = fp.in_child(_hits, name, rates, clock_path, "k", count)
                    want = [model.hit(now) for _ in range(count)]
                    assert got == want, f"{who} at T0+{(now - T0) / S}s: admitted {got}, the rule says {want}"
                    admitted += [now] * sum(got)
                    fp.assert_stats(lim, "k", model, now)
                fp.assert_never_over(lim, admitted)
            return s.fired
        finally:
            fp.drop(lim, name)

    fp.every_store(strike_at, "hit", at_least=1 + 3 * len(rates))
    fp.assert_monotone(inflights, "the in-flight hit")


def stale_counts(lim: Limiter, key: str) -> int:
    """How many counts of ``key``'s row are stale and not 0: in a compact ring's slots of the
    epochs (zeroed, head], left by a hit torn before it zeroed them (the repair must)."""
    w = lim.window
    found = w._backend._core.find(key)
    assert found is not None
    g, lay, q = w._backend._g, w._backend._lay, w._backend._q
    row_bytes = lay.rows_off + found[0] * lay.row_bytes
    out = 0
    for i, ring in enumerate(g.rings):
        header, n, width = row_bytes // 8 + lay.ring_words[i], ring.n_buckets, lay.count_bytes[i]
        head, zeroed = int(q[header + LIMITER_RING_HEAD]), int(q[header + LIMITER_RING_ZEROED])
        if head == EMPTY:
            continue
        top = head - n if zeroed == EMPTY else max(min(zeroed, head), head - n)
        for e in range(max(top + 1, 0), head + 1):
            at = row_bytes + lay.bucket_words[i] * 8 + e % n * width
            out += struct.unpack_from("<i" if width == 4 else "<q", w._backend._buf, at)[0] != 0
    return out


# where the struck repair starts: a hit torn with every running total raised (its counts not
# yet written), or torn with a stale count still in a ring (its head moved, the count not zeroed)
TEARS = [pytest.param("totals", id="totals"), pytest.param("stale", id="stale")]


@pytest.mark.parametrize("tear_kind", TEARS)
@pytest.mark.parametrize("sig", SIGNALS)
def test_repair(make_name, tmp_path, sig, tear_kind):
    """The repair of a dead hit's row, itself struck at every store: a second death mid-repair
    is repaired by the next locker; totals come back to the buckets' sums, stale counts to 0."""
    rates = ["3/second", "10/minute"]

    def torn_as_wanted(lim: Limiter) -> bool:
        if tear_kind == "stale":
            return stale_counts(lim, "k") > 0
        return all(total > live for total, live in fp.ring_rows(lim, "k"))

    def victim_limiter(clock_path: Path, name: str) -> Limiter:
        return Limiter(name, rates, capacity=16, clock=ManualClock(path=clock_path), lock_timeout=5)

    def torn_hit(name: str, clock_path: Path, tear: int) -> bool:
        """Kill a hit at store ``tear``; is the row left as the test wants it?"""

        def before(report):
            mine = victim_limiter(clock_path, name)
            assert mine.hit("k") and mine.hit("k")
            ManualClock(path=clock_path).advance(3)
            return mine

        with Limiter.attach(name) as lim, fp.strike("hit", tear, KILL, before, lambda m: m.hit("k")) as s:
            assert s.died
            return torn_as_wanted(lim)

    # where a dead hit leaves every running total torn (raised, its bucket not yet written)
    probe_name, probe_clock = make_name("probe"), tmp_path / "probe"
    tear = 0
    for tear in range(1, MAX_STORES):
        Limiter(probe_name, rates, capacity=16, clock=ManualClock(T0, path=probe_clock)).close()
        wanted = torn_hit(probe_name, probe_clock, tear)
        shmwin.unlink(probe_name)
        probe_clock.unlink()
        if wanted:
            break
    else:
        raise AssertionError(f"no store of section 'hit' leaves the row torn as {tear_kind!r} wants")

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"repair{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, rates, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            assert torn_hit(name, clock_path, tear)
            with fp.strike(
                "repair", n, sig, lambda report: victim_limiter(clock_path, name), lambda m: m.test("k")
            ) as s:
                now = clock()
                model = fp.Model(lim)
                model.count(T0)
                model.count(T0)  # the torn hit never reached its buckets
                fp.assert_stats(lim, "k", model, now)
                assert stale_counts(lim, "k") == 0, "the repair left a stale count"
                got = [bool(fp.promptly(lim.hit, "k")) for _ in range(12)]
                assert got == [model.hit(now) for _ in range(12)]
                fp.assert_stats(lim, "k", model, now)
            return s.fired
        finally:
            fp.drop(lim, name)

    assert fp.every_store(strike_at) >= len(rates)
