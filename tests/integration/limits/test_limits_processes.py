"""The shm:// storage in a process that never used the limit: it answers from shared memory.

A fresh worker (gunicorn after max-requests or HUP, a uvicorn spawn, a cron job) must
see what the others counted, for every strategy: test(), the window stats (the
X-RateLimit-* headers) and clear()/reset(). Every child here is an unrelated
``python -c`` process; time is one ManualClock file that every process reads through
``time.time()``, as limits does.
"""

from __future__ import annotations

import json

import pytest
from support.helpers import run_python

pytest.importorskip("limits")

from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

import shmwin
import shmwin.integrations.limits  # registers shm://
from shmwin import ManualClock

pytestmark = pytest.mark.integration

S = 1_000_000_000
START_S = 1_800_000_000
STRATEGY_NAMES = list(STRATEGIES)

CHILD = """
import json, sys, time
from shmwin import ManualClock
clock = ManualClock(path=sys.argv[1])
time.time = lambda: clock() / 10**9  # what limits and the storage read
import shmwin.integrations.limits
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

storage = storage_from_string(sys.argv[2])
item, out = parse("3/minute"), {}
for strategy, limiter in ((s, STRATEGIES[s](storage)) for s in STRATEGIES):
    stats = limiter.get_window_stats(item, "k")
    out[strategy] = {"test": limiter.test(item, "k"), "remaining": stats.remaining, "reset": stats.reset_time,
                     "other": limiter.get_window_stats(item, "other").remaining}
    for command in sys.argv[3:]:
        if command == "hit-other":
            limiter.hit(item, "other")
        elif command == "clear":
            limiter.clear(item, "k")
if "reset" in sys.argv[3:]:
    out["reset"] = storage.reset()
print(json.dumps(out))
"""


@pytest.fixture
def shared_clock(tmp_path, monkeypatch):
    path = tmp_path / "clock"
    clock = ManualClock(START_S * S, path=path)
    monkeypatch.setattr("time.time", lambda: clock() / S)
    return clock, str(path)


def _answers(storage, item) -> dict[str, dict[str, object]]:
    out = {}
    for strategy in STRATEGY_NAMES:
        limiter = STRATEGIES[strategy](storage)
        stats = limiter.get_window_stats(item, "k")
        other = limiter.get_window_stats(item, "other").remaining
        out[strategy] = {"test": limiter.test(item, "k"), "remaining": stats.remaining,
                         "reset": stats.reset_time, "other": other}  # fmt: skip
    return out


def _fresh(clock_path: str, uri: str, *commands: str) -> dict[str, dict[str, object]]:
    return json.loads(run_python(CHILD, clock_path, uri, *commands).stdout)


def _unlink(name: str) -> None:
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)


def test_a_fresh_process_answers_what_the_others_counted(name, shared_clock):
    clock, clock_path = shared_clock
    uri, item = f"shm://{name}", parse("3/minute")
    try:
        untouched = _fresh(clock_path, uri)  # no process has used the limits yet
        assert all(a["test"] and a["remaining"] == 3 == a["other"] for a in untouched.values())
        assert not [n for n in shmwin.names() if n.startswith(name)]  # reading created nothing

        storage = storage_from_string(uri)
        for strategy in STRATEGY_NAMES:
            limiter = STRATEGIES[strategy](storage)
            clock.advance(7)
            assert [limiter.hit(item, "k") for _ in range(4)] == [True, True, True, False]
        clock.advance(1)
        here = _answers(storage, item)
        assert all(a["test"] is False and a["remaining"] == 0 for a in here.values())
        assert _fresh(clock_path, uri) == here  # exactly the same answers, reset times included
    finally:
        _unlink(name)


def test_a_fresh_process_counts_clears_and_resets_for_everyone(name, shared_clock):
    _, clock_path = shared_clock
    uri, item = f"shm://{name}", parse("3/minute")
    storage = storage_from_string(uri)
    try:
        for strategy in STRATEGY_NAMES:
            assert all(STRATEGIES[strategy](storage).hit(item, "k") for _ in range(3))
        _fresh(clock_path, uri, "hit-other", "clear")
        for strategy, answer in _answers(storage, item).items():
            assert answer["test"] is True and answer["remaining"] == 3, strategy  # cleared over there
            assert answer["other"] == 2, strategy  # counted over there
        assert _fresh(clock_path, uri, "reset")["reset"] == 3  # "other" in each strategy
        assert all(a["other"] == 3 for a in _answers(storage, item).values())
    finally:
        _unlink(name)


RACER = """
import sys, time
from shmwin import ManualClock
clock, lag_ns = ManualClock(path=sys.argv[1]), int(sys.argv[3])
time.time = lambda: (clock() - lag_ns) / 10**9  # this process reads the clock a little late
import shmwin.integrations.limits
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES

limiter = STRATEGIES["fixed-window"](storage_from_string(sys.argv[2]))
item = parse("50/minute")
go = sys.argv[4]
while not __import__("os").path.exists(go):
    pass
print(sum(limiter.hit(item, "k") for _ in range(40)))
"""


def test_processes_whose_clock_reads_straddle_a_slot_agree_on_one_fixed_window(name, tmp_path, shared_clock):
    """Half the processes read the clock 1 us before a slot boundary, half at it: a window
    started on either side is the only one, so exactly the limit passes in all."""
    import subprocess
    import sys

    from support.helpers import ROOT

    clock, clock_path = shared_clock
    clock.set(START_S * S + 180 * S)  # a slot boundary of the 1-minute period
    go = tmp_path / "go"
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    racers = [
        subprocess.Popen([sys.executable, "-c", RACER, clock_path, f"shm://{name}", str(lag), str(go)],
                         stdout=subprocess.PIPE, text=True, env=env)
        for lag in (1_000, 0, 1_000, 0, 1_000, 0)
    ]  # fmt: skip
    try:
        __import__("time").sleep(1.0)  # let them import; they spin on the go file
        go.touch()
        admitted = [int(r.communicate(timeout=120)[0]) for r in racers]
        assert sum(admitted) == 50, admitted
    finally:
        for r in racers:
            r.kill()
        _unlink(name)
