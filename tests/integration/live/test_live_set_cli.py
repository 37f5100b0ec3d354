"""``shmwin set`` beside limiters: a token bucket's rate and burst, a concurrency's limit,
changed from the shell while stale processes (forked, spawned, ``python -c``, opened with the
old values) use them; ``shmwin show`` says when they last changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.conc_live import KEY, holders
from support.helpers import ROOT
from support.live import stale_workers

from shmwin import Concurrency, ManualClock, TokenBucket

pytestmark = pytest.mark.integration

S = 1_000_000_000


def shmwin_cli(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """``shmwin ARGS`` as an operator types it (the environment kept: a sanitized core's preloads)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip
    assert (done.returncode == 0) == ok, (done.stdout, done.stderr)
    return done


def test_set_a_concurrency_limit_from_the_shell(name):
    with Concurrency(name, 3) as mine, holders(name, 3) as hs:
        assert all(h.acquire() for h in hs)
        assert "never changed live" in shmwin_cli("show", name).stdout
        out = shmwin_cli("set", name, "1").stdout
        assert f"{name}: limit 3 -> 1 (slots held kept;" in out
        assert [h.limit() for h in hs] == [1, 1, 1] and mine.count(KEY) == 3
        assert not mine.acquire(KEY, 0)
        shown = shmwin_cli("show", name).stdout
        assert "limit 1 holders per key" in shown and "limit: changed live once, last at" in shown
        live = json.loads(shmwin_cli("show", "--json", name).stdout)["live"]
        assert live["changes"] == 1 and live["changed"] > 0 and not live["moved"]
        exported = shmwin_cli("export", "--format", "prometheus", name).stdout
        assert f'shmwin_concurrency_limit{{window="{name}"}} 1.0' in exported  # the limit in force
        out = shmwin_cli("set", name, "2", "--reset").stdout
        assert "limit 1 -> 2 (slots held forgotten;" in out
        assert mine.count(KEY) == 0 and [h.limit() for h in hs] == [2, 2, 2]
        assert all(h.release() == "ok" for h in hs)  # from before the reset: no-ops, no error
        assert hs[0].acquire() and hs[1].acquire() and not hs[2].acquire()
        assert hs[0].release() == "ok" and hs[1].release() == "ok"
        mine.unlink()


def test_set_refuses_what_a_concurrency_is_not(name):
    with Concurrency(name, 3) as mine:
        assert "whole number of holders" in shmwin_cli("set", name, "5/second", ok=False).stderr
        assert "--burst is a token bucket's" in shmwin_cli("set", name, "4", "--burst", "2", ok=False).stderr
        assert "limit must be an int in 1..1024" in shmwin_cli("set", name, "0", ok=False).stderr
        assert mine.limit == 3
        mine.unlink()


def test_set_a_token_buckets_rate_and_burst_from_the_shell(name, tmp_path):
    """10/second burst 5, 4 tokens taken by the stale workers: `shmwin set NAME 1/second --burst
    2` moves it, the tokens used carried up to the new burst (none left); the workers follow."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(10**17, path=clock_path)  # far from the host clock `shmwin set` runs
    with TokenBucket(name, "10/second", burst=5, clock=clock) as mine:
        workers = stale_workers(name, "10/second burst=5", str(clock_path))
        try:
            assert [w.hit("a") for w in workers] + [mine.hit("a")] == [True] * 4
            out = shmwin_cli("set", name, "1/second", "--burst", "2").stdout
            assert f"{name}: 10/second burst 5 -> 1/second burst 2 (tokens used carried;" in out
            assert not any(w.hit("a") for w in workers) and not mine.hit("a")  # 2 of 2 used
            assert str(mine.rate) == "1/second" and mine.burst == 2
            clock.advance(1)
            assert [w.hit("a") for w in workers] == [True, False, False]  # one token a second
            shown = shmwin_cli("show", name).stdout
            assert "1/second, burst 2" in shown and "rate and burst: changed live once, last at" in shown
            shmwin_cli("set", name, "2/second", "--reset")  # the burst kept; buckets full again
            assert str(mine.rate) == "2/second" and mine.burst == 2
            assert [w.hit("a") for w in workers] == [True, True, False]
        finally:
            for w in workers:
                w.close()
        mine.unlink()
