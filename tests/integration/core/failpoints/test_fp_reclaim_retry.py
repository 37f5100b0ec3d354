"""When a full /dev/shm makes room from idle keys ("reclaim", core/index.c), and when it may
not run again (issue #33, item 1, "Also").

A scan of the key table drops every key idle at its instant, so a second scan at the same
instant of the caller's clock finds nothing: none is run (``may_rebuild``) until a second
of that clock has passed (or the idle time, if shorter) -- the bound that keeps a table full
of live keys from being rescanned at every refused insert. A key that turns idle after a
scan waits at most that long for its row to be taken.

That holds only for a scan that finished. At 4ed36b0 the scan's time was stored before it
started: a reclaim killed after its first drop left the other idle keys in place, and every
new key from then on, at the same instant of a frozen clock (or for a second of a running
one), met ``on_full`` -- admitted uncounted -- although idle keys held rows. Now the time is
stored when the scan has finished, so the next insert reclaims at once.

Fail points exist only in the core's test build: run by scripts/checks.d/10-failpoints.sh.
Every process here is a ``python -c`` child: the victim (armed through SHMWIN_FAILPOINT) and
the survivor both run as on a full /dev/shm (the test build's ``nospace``), at the same
instant of a ManualClock kept in a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from support.helpers import ROOT

import shmwin

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]

S = 10**9
T0 = 1_000 * S
DROP_STORES = 9  # drop_key's stores: intent, generation, place, entry, ident, last, generation, free, keys

# fmt: off
OPEN = r"""
import json, sys
from shmwin import Limiter, ManualClock, Window, _core
kind, name, clock_path = sys.argv[1], sys.argv[2], sys.argv[3]
clock = ManualClock(path=clock_path)
if kind == "limiter":
    lim = Limiter(name, "10/minute", clock=clock, on_full="allow", lock_timeout=5)
    win = lim.window
    write = lim.hit
    units = lambda k: lim.stats(k).used
else:
    lim = None
    win = Window(name, span=60, buckets=60, keyed=True, clock=clock, on_full="allow", lock_timeout=5)
    write = lambda k: win.add(1, key=k)
    units = lambda k: int(win.total(key=k))
"""

VICTIM = OPEN + r"""
_core.nospace(True)  # no memory for a new row: only idle keys' rows
write("victim")
print(json.dumps({"fired": _core.failpoint_fired()}))
"""

SURVIVOR = OPEN + r"""
_core.nospace(True)
keys = sys.argv[4].split(",")
before = win.full_count()
for k in keys:
    write(k)
print(json.dumps({"counted": [k for k in keys if units(k) == 1], "met_full": win.full_count() - before,
                  "keys": sorted(map(str, win.keys()))}))
"""

SETUP = OPEN + r"""
idle_s = win._backend._core.layout["idle_ns"] // 10**9  # a key's newest write older than that: idle
for i in range(8):  # the 8 rows a table reserves first: the next key needs more memory
    write(f"old{i}")
clock.advance(10)
write("old6")  # live until 10 s + idle
clock.advance(idle_s - 6)
write("old7")  # live; old0..old5 are idle now (idle + 4 s)
print(json.dumps({"idle_s": idle_s}))
"""
# fmt: on


def run(code: str, *args: str, failpoint: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.environ.get("PYTHONPATH", str(ROOT)), SHMWIN_FAILPOINT=failpoint)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=60
    )


def ok(proc: subprocess.CompletedProcess[str]) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("store", range(1, DROP_STORES + 2))
def test_a_reclaim_killed_midway_is_retried_by_the_next_insert(make_name, tmp_path, kind, store):
    """The victim's reclaim is killed after the store-th store of its first drop; a survivor at
    the same instant needs a row for each of 6 new keys: the 6 idle keys' rows (the torn drop's
    freed by the repair, the others by the survivor's own reclaim). Past the last store the
    reclaim completes and the victim's new key takes one of them: the survivor's sixth key
    then meets on_full -- at that instant no key is idle, so none is scanned for."""
    name, clock = make_name("r"), str(tmp_path / "clock")
    from shmwin import ManualClock

    ManualClock(T0, path=clock)
    try:
        ok(run(SETUP, kind, name, clock))
        victim = run(VICTIM, kind, name, clock, failpoint=f"reclaim:{store}:{int(signal.SIGKILL)}")
        killed = victim.returncode == -signal.SIGKILL
        assert killed or ok(victim) == {"fired": False}, victim.stderr
        assert killed == (store <= DROP_STORES), f"store {store}: killed={killed}"
        new = [f"new{i}" for i in range(6)]
        got = ok(run(SURVIVOR, kind, name, clock, ",".join(new)))
        if killed:
            assert got["counted"] == new and got["met_full"] == 0, f"idle keys kept their rows: {got}"
        else:
            assert got["counted"] == new[:5] and got["met_full"] == 1, got
        assert {"old6", "old7"} <= set(got["keys"]), "a live key was reclaimed"
    finally:
        shmwin.unlink(name)


@pytest.mark.parametrize("kind", ["limiter", "window"])
def test_after_a_finished_reclaim_a_key_turning_idle_gives_its_row_within_a_second(make_name, tmp_path, kind):
    """The decision, tested: at the instant of a finished reclaim no key it left is idle, so a
    7th new key then meets on_full; so does one 0.5 s before old6 turns idle (a reclaim that
    finds nothing), and one 0.4 s after it although old6 is idle (0.9 s after that reclaim);
    one a second after that reclaim takes old6's row. Live old7 is never taken."""
    name, clock = make_name("d"), str(tmp_path / "clock")
    from shmwin import ManualClock

    c = ManualClock(T0, path=clock)
    try:
        idle_s = ok(run(SETUP, kind, name, clock))["idle_s"]
        got = ok(run(SURVIVOR, kind, name, clock, ",".join(f"a{i}" for i in range(7))))  # a reclaim
        assert len(got["counted"]) == 6 and got["met_full"] == 1, got  # old0..old5's rows, then none
        c.set(T0 + (10 + idle_s) * S - S // 2)
        got = ok(run(SURVIVOR, kind, name, clock, "b0"))  # a reclaim: old6 is still live
        assert got["counted"] == [] and got["met_full"] == 1, got
        c.set(T0 + (10 + idle_s) * S + 4 * S // 10)  # old6 idle, 0.9 s after that reclaim
        got = ok(run(SURVIVOR, kind, name, clock, "b1"))
        assert got["counted"] == [] and got["met_full"] == 1, got
        c.set(T0 + (10 + idle_s) * S + S // 2)  # a second after it
        got = ok(run(SURVIVOR, kind, name, clock, "b2"))
        assert got["counted"] == ["b2"] and got["met_full"] == 0, got
        assert "old7" in got["keys"], got
    finally:
        shmwin.unlink(name)
