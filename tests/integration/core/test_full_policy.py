"""A full /dev/shm is a policy, never an error a request meets, and never for good.

Each test runs in a private tmpfs (a mount namespace, tests/support/rootenv.py) filled with live keys
until the table meets a full /dev/shm. Then:

- the policy answers (``on_full``: "allow" by default for a Limiter and for ``shm://``,
  "deny" or "raise" when asked), and every live key goes on counting exactly;
- ``full_count`` (``shmwin ls``, ``show``, the Prometheus export) counts each request that
  met the full table;
- once time (a manual clock) has made every key idle, new keys are admitted *and counted*
  again -- the idle keys' rows were reclaimed -- from the same process and from a fresh one.

Nothing here sleeps: the clocks are files every process of the namespace shares.
"""

from __future__ import annotations

import json

import pytest
from support.rootenv import describe, namespace_skip_reason, python_argv, run_in_namespace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(namespace_skip_reason() is not None, reason=str(namespace_skip_reason())),
]

NATIVE = r"""
import json, subprocess, sys
import shmwin
from shmwin import Limiter, ManualClock
S = 10**9
on_full = sys.argv[1]
clock = ManualClock(1000 * S, path=sys.argv[2])
kw = {} if on_full == "default" else {"on_full": on_full}
lim = Limiter("full", "5/minute", clock=clock, **kw)
n = 0
while lim.full_count() == 0:  # live keys until a new one meets a full /dev/shm
    answer = lim.hit(f"c{n}")
    n += 1
    assert answer or lim.full_count(), n
    assert n < 10**6, "a small tmpfs held a million keys"
met = f"c{n - 1}"  # the key that met it: answered by the policy, not counted
answered = {"default": True, "allow": True, "deny": False}[on_full]
assert lim.stats(met).used == 0, lim.stats(met)
for i in range(20):  # more new keys: each answered by the policy, each counted in full_count
    assert lim.hit(f"late{i}") is answered
assert lim.full_count() == 21, lim.full_count()
assert lim.stats("c0").used == 1 and lim.hit("c0") and lim.stats("c0").used == 2  # live keys count
for _ in range(4):
    assert lim.hit("c1")
assert not lim.hit("c1") and lim.stats("c1").used == 5  # ... and are limited exactly
clock.advance(120)  # every key idle: its windows hold nothing (a span is 63 s: 21 buckets of 3 s)
third = n // 3  # as many new keys as a third of the table, here, then from a fresh process
for i in range(third):  # new keys are counted again: the idle keys' rows were reclaimed
    assert lim.hit(f"new{i}") and lim.stats(f"new{i}").used == 1, i
assert lim.full_count() == 21, lim.full_count()
fresh = subprocess.run([sys.executable, "-c", '''
from shmwin import Limiter, ManualClock
import sys
lim = Limiter.attach("full", clock=ManualClock(path=sys.argv[1]))
for i in range(int(sys.argv[2])):
    assert lim.hit(f"fresh{i}") and lim.stats(f"fresh{i}").used == 1, i
assert lim.stats("new7").used == 1 and lim.full_count() == 21
print("fresh ok")
''', sys.argv[2], str(third)], capture_output=True, text=True)
assert fresh.returncode == 0, fresh.stderr
ls = subprocess.run([sys.executable, "-m", "shmwin", "ls", "--json"], capture_output=True, text=True)
assert ls.returncode == 0, ls.stderr
print(json.dumps({"keys": n, "fresh": fresh.stdout.strip(), "ls": json.loads(ls.stdout)}))
"""


@pytest.mark.parametrize("on_full", ["default", "allow", "deny"])
def test_a_full_table_answers_by_policy_then_recovers_when_keys_go_idle(on_full, tmp_path):
    argv = python_argv(NATIVE, on_full, str(tmp_path / "clock"))
    proc = run_in_namespace(argv, shm_size="2m", hidepid=None, timeout=240)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(proc.stdout)
    assert out["keys"] > 1000 and out["fresh"] == "fresh ok", out
    (row,) = [r for r in out["ls"]["windows"] if r["name"] == "full"]
    assert row["full"] == 21, row


NATIVE_RAISE = r"""
import shmwin
from shmwin import Limiter, ManualClock
clock = ManualClock(1000 * 10**9)
lim = Limiter("full", "5/minute", clock=clock, on_full="raise")
n = 0
try:
    while True:
        assert lim.hit(f"c{n}")
        n += 1
except shmwin.OutOfSpaceError as exc:
    assert exc.errno == 28 and "no room" in str(exc), exc
assert lim.full_count() == 1 and lim.stats("c0").used == 1
clock.advance(120)
assert lim.hit("after") and lim.stats("after").used == 1  # idle rows reclaimed
print("ok", n)
"""


def test_on_full_raise_is_an_out_of_space_error_until_keys_go_idle():
    proc = run_in_namespace(python_argv(NATIVE_RAISE), shm_size="2m", hidepid=None, timeout=240)
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.startswith("ok "), describe(proc)


LIMITS = r"""
import json, subprocess, sys, time
now = [1_800_000_000.0]
time.time = lambda: now[0]  # limits and shm:// read the wall clock through time.time
import shmwin.integrations.limits
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES
from shmwin import Window
strategy = sys.argv[1]
limiter = STRATEGIES[strategy](storage_from_string("shm://full"))
item = parse("5/minute")
segment = {"moving-window": "full.moving.5.1m", "sliding-window-counter": "full.sliding.1m",
           "fixed-window": "full.fixed.1m"}[strategy]
n = 0
def full():
    with Window.attach(segment, clock=time.time_ns) as w:
        return w.full_count()
while True:
    assert limiter.hit(item, f"10.{n >> 16}.{(n >> 8) & 255}.{n & 255}"), n
    n += 1
    assert n < 10**6
    if n % 256 == 0 and full():
        break
for i in range(20):
    assert limiter.hit(item, f"late{i}")  # allowed, uncounted: never an error
for _ in range(4):
    assert limiter.hit(item, "10.0.0.1")
assert not limiter.hit(item, "10.0.0.1")  # a live key is still limited exactly
now[0] += 3 * 60  # every key idle
for i in range(2000):
    assert limiter.hit(item, f"new{i}")
    assert limiter.get_window_stats(item, f"new{i}").remaining == 4, i  # counted again
print(json.dumps({"keys": n}))
"""


@pytest.mark.parametrize("strategy", ["moving-window", "sliding-window-counter", "fixed-window"])
def test_shm_storage_never_errs_on_a_full_dev_shm_and_recovers(strategy):
    proc = run_in_namespace(python_argv(LIMITS, strategy), shm_size="2m", hidepid=None, timeout=240)
    assert proc.returncode == 0, describe(proc)
    assert json.loads(proc.stdout)["keys"] > 500, describe(proc)
