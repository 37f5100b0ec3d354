"""Live limits elsewhere: a window's geometry change says what to do (drop it with ``shmwin rm``);
limits' ``shm://`` storage needs nothing when a limit changes (its keys carry the limit); a
token bucket is not set from the shell."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from support.helpers import ROOT

import shmwin
from shmwin import ManualClock, TokenBucket, Window

S = 10**9
START_S = 1_800_000_000  # a wall-clock time that is a multiple of every period used here


def _shmwin(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, env=env,
                          timeout=60)  # fmt: skip


def test_a_window_of_other_buckets_says_to_drop_it_and_rm_does(name):
    old = Window(name, span=60, buckets=60, fields=("ok",))
    old.add(3, "ok")
    with pytest.raises(shmwin.GeometryMismatchError, match=f"shmwin rm {name}"):
        Window(name, span=30, buckets=30, fields=("ok",))
    assert old.total("ok") == 3  # the error changed nothing
    refused = _shmwin("rm", name)  # the old window is open here: rm says so
    assert refused.returncode == 1 and "--force" in refused.stdout
    assert _shmwin("rm", "--force", name).returncode == 0
    with Window(name, span=30, buckets=30, fields=("ok",)) as new:  # made anew, empty
        new.add(1, "ok")
        assert new.total("ok") == 1 and str(new.geometry).startswith("span=30s")
        new.unlink()
    old.close()


def test_a_token_bucket_is_set_from_the_shell_a_window_is_not(name, make_name):
    """`shmwin set` takes a token bucket's rate since issue 31's last parts (it was refused: not
    a limiter); a plain window's span and buckets are its layout: a clear error still."""
    with TokenBucket(name, "10/second", burst=5) as tb:
        assert _shmwin("set", name, "20/second").returncode == 0
        assert str(tb.rate) == "20/second" and tb.burst == 5
        tb.unlink()
    plain = make_name("plain")
    with Window(plain, span=30, buckets=30, fields=("ok",)) as w:
        refused = _shmwin("set", plain, "20/second")
        assert refused.returncode == 2 and "limiter" in refused.stderr, refused.stderr
        w.unlink()


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window", "sliding-window-counter"])
def test_limits_shm_storage_needs_nothing_when_a_limit_changes(name, monkeypatch, strategy):
    """limits keys a limit's counts by the limit itself: 3/minute then 5/minute on the same
    identifier answers on shm:// as on memory://: each limit counts under keys of its own."""
    limits = pytest.importorskip("limits")
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES

    import shmwin.integrations.limits  # registers shm://

    clock = ManualClock(START_S * S)
    monkeypatch.setattr(time, "time", lambda: clock() / S)
    answers = {}
    for uri in (f"shm://{name}", "memory://"):
        limiter = STRATEGIES[strategy](storage_from_string(uri))
        three, five = limits.parse("3/minute"), limits.parse("5/minute")
        said = [limiter.hit(three, "client") for _ in range(4)]  # the deploy before
        said += [limiter.hit(five, "client") for _ in range(6)]  # the deploy after
        said += [limiter.hit(three, "client")]  # an old worker still running
        answers[uri] = said
    assert answers[f"shm://{name}"] == answers["memory://"]
    assert answers["memory://"] == [True] * 3 + [False] + [True] * 5 + [False] * 2
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)
