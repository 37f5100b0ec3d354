"""A full ``/dev/shm`` keeps its capacity through waves of new clients (issue #33, item 1).

The README: "A full /dev/shm is a policy, not an error. Idle keys give their rows back first."
In a private tmpfs of 3 MiB, waves of new keys -- each more than the tmpfs holds -- fill it,
and between waves time moves on until every key is idle. Every wave must count about as many
new keys as the first (within 3 %): the idle keys' rows, and the index that names them, are
there for the next wave.

At 4ed36b0 a rebuild while most keys were idle sized the new index for the live keys only,
and growing it back needed memory the full tmpfs refused (the freed rows keep theirs): from
the third or fourth wave on, 16,384 keys a wave fitted (or 256, 1,024, 4,096), in every role
but one -- e.g. the limiter counted 13,948, then 4,096, 13,948, 4,096, ...; the moving window
29,175, 35,088, then 1,024 and 16,384 for good. The rest were admitted uncounted (unlimited).

Each role runs in one process (and, in the second test, its waves in two forked processes at
once) inside a mount namespace (tests/rootenv.py): nothing reaches the host's /dev/shm. Time
is a ManualClock, and ``time.time`` held still for limits' strategies on ``shm://``.
"""

from __future__ import annotations

import json

import pytest
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

pytestmark = [pytest.mark.integration, needs_namespace]

ROLES = ("limiter", "window", "token-bucket", "concurrency", "fixed-window", "sliding-window-counter",
         "moving-window")  # fmt: skip
LIMITS_ROLES = ("fixed-window", "sliding-window-counter", "moving-window")  # limits' strategies, shm://
# A wave's new keys, per role: about 1.3 to 1.4 times the most that 3 MiB holds of the role (in
# brackets, what a wave fitted at 45,000 keys for every role, one process), so every wave fills
# the tmpfs and its last quarter meets a full table. The keys past the full point only add
# refusals, each a failed fallocate (~11 us): at 45,000 for every role, 2/3 of the limiter's keys
# were refused, 4.2 of the window's 4.8 CPU-s a run. The waves fit the same counts at either size.
KEYS_A_WAVE = {
    "limiter": 20_000,  # [13,948, then 14,383]
    "window": 20_000,  # [14,383]
    "concurrency": 20_000,  # [13,948, then 14,383]
    "sliding-window-counter": 33_000,  # [21,450, then 25,016]
    "fixed-window": 37_000,  # [23,523, then 28,291]
    "token-bucket": 40_000,  # [25,797, then 31,026]
    "moving-window": 40_000,  # [25,797, then 31,026]
}

# fmt: off
WAVES = r"""
import json, os, sys, time
import shmwin
from shmwin import Concurrency, Limiter, ManualClock, TokenBucket, Window

role, waves, size, anchors, procs, clock_path = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                                 int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
S = 10**9
clock = ManualClock(10**6 * S, path=clock_path)

class HeldTime:  # time.time for limits' strategies: moved only by advance()
    now = 1_700_000_000.0
    def __call__(self): return self.now

refused = [0]  # a role with no on_full (concurrency): a new key that met a full table raises
if role == "limiter":
    lim = Limiter("cap", "5/minute", clock=clock)
    hit = lim.hit
elif role == "window":
    win = Window("cap", "1m", 6, keyed=True, clock=clock, on_full="allow")
    hit = lambda k: win.add(1, key=k)
elif role == "token-bucket":
    tb = TokenBucket("cap", "5/minute", burst=5, clock=clock)
    hit = tb.hit
elif role == "concurrency":
    conc = Concurrency("cap", 2, idle="1s", clock=clock)
    def hit(k):
        try:
            if conc.acquire(k):
                conc.release(k)
        except (shmwin.OutOfSpaceError, shmwin.KeyTableFullError):
            refused[0] += 1
else:
    import shmwin.integrations.limits
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES
    held = time.time = HeldTime()
    item, strategy = parse("5/minute"), STRATEGIES[role](storage_from_string("shm://cap"))
    hit = lambda k: strategy.hit(item, k)

def met_full():  # new keys that met a full table so far, in every segment of the role
    if role == "concurrency":
        return refused[0]
    total = 0
    for name in shmwin.names():
        w = Window.attach(name)
        total += w.full_count()
        w.close()
    return total

def advance(seconds):
    clock.advance(seconds)
    if role in ("fixed-window", "sliding-window-counter", "moving-window"):
        time.time.now += seconds

def run_wave(wave):  # this process's share of the wave's new keys; the rest, forked children's
    keys = [f"w{wave}-{i}" for i in range(size)]
    children = []
    for c in range(1, procs):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for k in keys[c::procs]:
                    hit(k)
                code = 0
            finally:
                os._exit(code)
        children.append(pid)
    for k in keys[0::procs]:
        hit(k)
    for pid in children:
        assert os.waitpid(pid, 0)[1] == 0, "a child failed"

counted = []
for wave in range(waves):
    for a in range(anchors):  # keys kept live across every wave: their rows are never reclaimed
        hit(f"anchor-{a}")
    before = met_full() if role != "concurrency" else 0
    refused[0] = 0
    run_wave(wave)
    met = met_full() - before
    if role == "concurrency" and procs > 1:
        raise SystemExit("the concurrency role counts refusals per process: one process only")
    counted.append(size - met)
    advance(550)  # the anchors are hit again 50 s before the next wave: live then, while ...
    for a in range(anchors):
        hit(f"anchor-{a}")
    advance(50)  # ... the wave's keys are idle: 600 s old, every window 1 minute
print(json.dumps({"counted": counted}))
"""
# fmt: on


def waves(role: str, tmp_path, *, waves: int = 8, anchors: int = 0, procs: int = 1,
          shm: str = "3m") -> list[int]:  # fmt: skip
    size = KEYS_A_WAVE[role]
    args = (role, str(waves), str(size), str(anchors), str(procs), str(tmp_path / "clock"))
    proc = run_in_namespace(python_argv(WAVES, *args), shm_size=shm, hidepid=None, timeout=600)
    assert proc.returncode == 0, describe(proc)
    counted: list[int] = json.loads(proc.stdout.strip().splitlines()[-1])["counted"]
    print(role, counted)
    return counted


def assert_capacity_kept(counted: list[int], size: int, anchors: int = 0) -> None:
    first = counted[0] + anchors  # the keys that fitted in the first wave, anchors included
    assert counted[0] < size, f"the first wave never filled the tmpfs: {counted}"
    for wave, n in enumerate(counted[1:], 1):
        fitted = n + anchors
        assert fitted >= 0.97 * first, f"wave {wave} fitted {fitted} keys, the first {first}: {counted}"


@pytest.mark.parametrize("role", ROLES)
def test_every_wave_of_new_keys_fits_as_many_as_the_first(role, tmp_path):
    counted = waves(role, tmp_path)
    assert_capacity_kept(counted, KEYS_A_WAVE[role])


@pytest.mark.parametrize("role", [r for r in ROLES if r != "concurrency"])
def test_waves_from_two_processes_with_live_keys_keep_the_capacity(role, tmp_path):
    """Waves of new keys from two processes at once, while 500 keys stay live throughout."""
    counted = waves(role, tmp_path, anchors=500, procs=2)
    assert_capacity_kept(counted, KEYS_A_WAVE[role], anchors=500)
