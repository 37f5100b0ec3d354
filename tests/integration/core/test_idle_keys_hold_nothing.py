"""Red team: a key is idle only when its windows hold nothing.

A hit whose clock was read before a wait (or a process whose clock lags) wrote its key's
last_ns unconditionally, moving it *back*. The key then looked idle while its windows still
held the later hits, a rebuild (or reclaim) dropped it, and the limit admitted again: here
4 hits held in the window, then 5 more admitted within one span of "5/minute".
"""

from __future__ import annotations

import pytest
from support.helpers import run_python

from shmwin import Limiter, ManualClock, Window

pytestmark = pytest.mark.integration

S = 10**9

LAGGING_HIT = """
import sys
from shmwin import Limiter, ManualClock
lim = Limiter.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
assert lim.hit("victim")
"""

LAGGING_ADD = """
import sys
from shmwin import ManualClock, Window
w = Window.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
w.add(1, key="victim")
w.close()
"""


def test_a_lagging_hit_never_makes_a_live_key_idle(name):
    clock = ManualClock(1000 * S)
    lim = Limiter(name, "5/minute", clock=clock)
    try:
        for _ in range(3):
            assert lim.hit("victim")
        run_python(LAGGING_HIT, name, str(970 * S))  # another process, its clock 30 s behind
        assert lim.stats("victim").used == 4
        clock.advance(34)  # 1034 s: the hits of 1000 s stay in the window until about 1062 s
        assert lim.stats("victim").used == 4
        for i in range(300):  # new keys: the index grows, and its rebuild drops idle keys
            lim.hit(f"filler{i}")
        admitted = sum(lim.hit("victim") for _ in range(10))
        assert admitted == 1 and lim.stats("victim").used == 5, admitted
    finally:
        lim.unlink()
        lim.close()


def test_a_lagging_add_never_loses_a_keyed_windows_counts(name):
    clock = ManualClock(1000 * S)
    w = Window(name, "60s", 20, keyed=True, clock=clock)
    try:
        w.add(3, key="victim")
        run_python(LAGGING_ADD, name, str(970 * S))
        clock.advance(34)
        assert w.total(key="victim") == 3  # the add of 970 s has left the window, those of 1000 s not
        for i in range(300):
            w.add(1, key=f"filler{i}")
        assert w.total(key="victim") == 3
    finally:
        w.unlink()
        w.close()
