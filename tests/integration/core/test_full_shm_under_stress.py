"""Red team: many processes fill a small private /dev/shm with new keys while live keys are hit,
a lock-free reader watches them, and half the hitting processes are SIGKILLed; time is a shared
manual clock, moved so that the first wave of keys goes idle while the live keys stay live.

Afterwards, from a fresh process: every live key counts exactly the hits its process was told
were admitted (at most one more for a killed process: its hit in flight), new keys were counted
again after reclaim, full_count is plausible, and ``shmwin ls`` reads the segment. (Held.)
"""

from __future__ import annotations

import json

import pytest
from support.rootenv import describe, namespace_skip_reason, python_argv, run_in_namespace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(namespace_skip_reason() is not None, reason=str(namespace_skip_reason())),
]

# fmt: off
CHECK = r"""
import sys, json, collections, os
from shmwin import Limiter, ManualClock
P, L, OUT, killed = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
lim = Limiter.attach("st", clock=ManualClock(path=sys.argv[1]))
errs = []
for c in range(P):
    admitted = collections.Counter()
    # a process killed before it opened its log made no hit (its hits come after the open)
    lines = open(f"{OUT}.{c}").readlines() if c >= killed or os.path.exists(f"{OUT}.{c}") else []
    for line in lines:
        k, ok = line.split(); admitted[k] += int(ok)
    for j in range(L):
        k = f"live-{c}-{j}"
        want = 3 + admitted[k]
        got = lim.stats(k).used
        slack = 1 if c < killed else 0
        if not (want <= got <= want + slack): errs.append((k, want, got))
t2 = sum(lim.stats(f"t2-{c}-{i}").used for c in range(P) for i in range(2000))
print(json.dumps({"errs": errs[:10], "nerr": len(errs), "t2_counted_sample": t2}))
"""

STRESS = r"""
import json, os, signal, subprocess, sys, time
from shmwin import Limiter, ManualClock
S = 10**9
CLK, OUT, CHECK = sys.argv[1], sys.argv[5], sys.argv[6]
P, L, K = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
clock = ManualClock(1000 * S, path=CLK)
lim = Limiter("st", "100/minute", clock=clock)
def child(fn, *a):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            fn(*a)
        except BaseException:
            import traceback; traceback.print_exc(); code = 1
        finally:
            os._exit(code)
    return pid
def wait_all(pids):
    bad = {}
    for p in pids:
        _, st = os.waitpid(p, 0)
        if st: bad[p] = st
    return bad
def fill(c, tag, n):  # throwaway keys until /dev/shm is full
    lim = Limiter.attach("st", clock=ManualClock(path=CLK))
    f0 = lim.full_count()
    i = 0
    while lim.full_count() < f0 + 50 and i < n:
        lim.hit(f"{tag}-{c}-{i}"); i += 1
def live(c, rounds, logpath):
    lim = Limiter.attach("st", clock=ManualClock(path=CLK))
    with open(logpath, "a", buffering=1) as log:
        for r in range(rounds):
            for j in range(L):
                k = f"live-{c}-{j}"
                ok = lim.hit(k)
                log.write(f"{k} {int(ok)}\n")
# phase 1 at 1000 s: live keys hit 3 times, then the tmpfs filled with throwaway keys
for c in range(P):
    for j in range(L):
        for _ in range(3): assert lim.hit(f"live-{c}-{j}")
assert not wait_all([child(fill, c, "t1", 10**6) for c in range(P)])
f1 = lim.full_count()
assert f1 > 0, "never full"
clock.set(1040 * S)
for c in range(P):
    for j in range(L):
        for _ in range(3): assert lim.hit(f"live-{c}-{j}"), (c, j)
clock.set(1080 * S)  # t1 keys and the 1000 s hits idle/expired; the 1040 s hits live
for c in range(P):
    for j in range(L):
        assert lim.stats(f"live-{c}-{j}").used == 3, (c, j, lim.stats(f"live-{c}-{j}"))
# phase 3: live hits, new throwaway keys (reclaim), a reader, and SIGKILLs
logs = [f"{OUT}.{c}" for c in range(P)]
def reader():
    lim = Limiter.attach("st", clock=ManualClock(path=CLK))
    for _ in range(200):
        for c in range(P):
            for j in range(L):
                u = lim.stats(f"live-{c}-{j}").used
                assert u >= 3, (c, j, u)
pids = [child(live, c, K, logs[c]) for c in range(P)]
fills = [child(fill, c, "t2", 20000) for c in range(P)]
rd = child(reader)
killed = []
for victim in pids[: P // 2]:
    time.sleep(0.05)
    os.kill(victim, signal.SIGKILL); killed.append(victim)
bad = wait_all(pids + fills + [rd])
assert all(p in killed for p in bad), bad
# verify from a fresh process
res = {"f1": f1, "full": lim.full_count(), "killed": len(killed)}
check = subprocess.run([sys.executable, "-c", CHECK, CLK, str(P), str(L), OUT, str(P // 2)],
                       capture_output=True, text=True)
assert check.returncode == 0, check.stderr
res.update(json.loads(check.stdout))
ls = subprocess.run([sys.executable, "-m", "shmwin", "ls", "--json"], capture_output=True, text=True)
assert ls.returncode == 0, ls.stderr
res["ls"] = [{k: w.get(k) for k in ("name", "keys", "full")} for w in json.loads(ls.stdout)["windows"]]
print(json.dumps(res))
"""
# fmt: on


@pytest.mark.parametrize(("procs", "live_keys", "rounds", "shm"), [(4, 20, 40, "2m"), (6, 30, 300, "1m")])
def test_live_keys_stay_exact_while_processes_fill_a_small_dev_shm(procs, live_keys, rounds, shm, tmp_path):
    args = (str(tmp_path / "clock"), str(procs), str(live_keys), str(rounds), str(tmp_path / "log"), CHECK)
    proc = run_in_namespace(python_argv(STRESS, *args), shm_size=shm, hidepid=None, timeout=600)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["nerr"] == 0, out
    assert out["f1"] > 0 and out["full"] >= out["f1"], out
    assert out["t2_counted_sample"] > 0, out
    assert [w["full"] for w in out["ls"] if w["name"] == "st"] == [out["full"]], out
