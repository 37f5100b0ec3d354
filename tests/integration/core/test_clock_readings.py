"""Clock readings: only what can be stored and read back is taken.

A reading within a couple of periods of int64's end used to be stored, and the key's own
epoch then read as corrupt on every later call. Readings stop at 2**62 ns (146 years of
uptime, the wall clock's year 2116): past it every writer and reader raises ValueError
before anything is written, and the key goes on working with sane readings.
"""

from __future__ import annotations

import pytest

from shmwin import Limiter, ManualClock, Window
from shmwin.clock import MAX_NOW_NS, checked_clock
from shmwin.geometry import Geometry, Ring

pytestmark = pytest.mark.integration

NEAR_END = [2**63 - 1, 2**63 - 10**9, MAX_NOW_NS, float(2**63 - 2**10), float("inf")]


class SettableClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("reading", NEAR_END)
@pytest.mark.parametrize("exact", [False, True])
def test_a_limiter_refuses_a_reading_it_could_not_read_back(name, reading, exact):
    clock = SettableClock(10**12)
    with Limiter(name, "5/minute", exact=exact, clock=clock) as lim:
        assert lim.hit("k")
        clock.now = reading
        for call in (lambda: lim.hit("k"), lambda: lim.test("k"), lambda: lim.stats("k"),
                     lambda: lim.hit("new")):  # fmt: skip
            with pytest.raises(ValueError, match="clock returned"):
                call()
        clock.now = 10**12 + 1  # nothing was written: the key is as it was
        assert lim.stats("k").used == 1
        assert sum(lim.hit("k") for _ in range(10)) == 4
        assert lim.hit("new")
        lim.unlink()


@pytest.mark.parametrize("reading", NEAR_END)
def test_a_window_refuses_it_for_writes_and_reads(name, reading):
    clock = SettableClock(10**12)
    with Window(name, span=60, buckets=6, keyed=True, clock=clock) as w:
        w.add(2, key="a")
        clock.now = reading
        for call in (lambda: w.add(1, key="a"), lambda: w.total(key="a"), lambda: w.total(),
                     lambda: w.series(), lambda: w.keys()):  # fmt: skip
            with pytest.raises(ValueError, match="clock returned"):
                call()
        clock.now = 10**12
        assert w.total(key="a") == 2 and w.keys() == ["a"]
        w.unlink()


def test_the_last_reading_taken_is_just_under_two_to_the_62(name):
    clock = ManualClock(MAX_NOW_NS - 10**9)
    with Limiter(name, "2/minute", clock=clock) as lim:
        assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
        clock.advance(0.5)
        assert lim.stats("k").used == 2
        lim.unlink()
    assert checked_clock(lambda: MAX_NOW_NS - 1)() == MAX_NOW_NS - 1
    with pytest.raises(ValueError):
        checked_clock(lambda: -1)()


def test_a_ring_spans_at_most_two_to_the_60():
    with pytest.raises(ValueError, match="2\\*\\*60"):
        Geometry((Ring(2**50, 2**10),), ("a",))
    Geometry((Ring(2**40, 2**10),), ("a",))  # 35 years of 1024 buckets: fine
