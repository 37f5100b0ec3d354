"""Issue #31 item 1, read as an outside checker would: live limits on shared memory. A deploy
opens a limiter (token bucket, concurrency) with other rates than the segment holds while a
process of the old code goes on calling with its old handle; ``on_change=`` carry, reset,
raise; ``shmwin set`` / ``shmwin show`` from the shell; a Window reopened with other buckets;
limits' ``shm://`` with a changed limit. Time is a ManualClock every process shares."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES
from support.conc_live import Holder
from support.foreign import shm_storage
from support.helpers import ROOT
from support.live import MpWorker, ScriptWorker, assert_bucket_strict, assert_strict

import shmwin
from shmwin import Concurrency, Limiter, ManualClock, TokenBucket, Window
from shmwin.errors import GeometryMismatchError, WindowNotFoundError
from shmwin.rate import parse, parse_many

S = 1_000_000_000
T0 = 1_000 * S


def _clock(tmp_path) -> tuple[ManualClock, str]:
    path = str(tmp_path / "clock")
    return ManualClock(T0, path=path), path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip


def test_a_deploy_with_new_amounts_carries_the_counts_and_the_old_process_follows(tmp_path, name):
    clock, path = _clock(tmp_path)
    old = ScriptWorker(name, "5/minute", path)  # the running code, another interpreter
    new = None
    try:
        assert [old.hit("k") for _ in range(3)] == [True] * 3
        new = Limiter(name, "10/minute", clock=clock)  # the deploy: no error
        assert new.stats("k").used == 3  # the count kept as it is
        assert [old.hit("k") for _ in range(8)] == [True] * 7 + [False]  # the newest rates win
        lower = Limiter(name, "4/minute", clock=clock)
        assert not old.hit("k") and not new.hit("k") and new.stats("k").used == 10
        lower.close()
        clock.set(T0 + 63 * S)  # a period and a bucket (3 s) on, the old process admits 4, no more
        assert [old.hit("k") for _ in range(5)] == [True] * 4 + [False]
        assert new.rates == parse_many("4/minute")
    finally:
        old.close()
        if new is not None:
            new.unlink()
            new.close()


CHANGES = [
    pytest.param("10/minute", {}, "2/second", {}, id="minute-to-second"),
    pytest.param("10/minute", {}, "10/minute", {"buckets": 60}, id="buckets-20-to-60"),
    pytest.param("20/minute", {}, "3/second;12/minute", {}, id="one-rate-to-two"),
    pytest.param("6/second", {}, "30/minute", {}, id="second-to-minute"),
]


@pytest.mark.parametrize(("before", "opts_before", "after", "opts_after"), CHANGES)
def test_other_periods_or_buckets_stay_strict_across_the_change_and_stale_processes_converge(
    tmp_path, name, before, opts_before, after, opts_after
):
    """Two stale processes (fork, ``python -c``) of the old rates hit every 0.25 s, before the
    change and for three of the new longest periods after it; the deploy's process too, after.
    No period of the old rates over its limit before; none of the new ones over its limit in
    any interval ending after the change (counting the hits the old segment held); each stale
    process admits again under the new rates."""
    clock, path = _clock(tmp_path)
    first = Limiter(name, before, clock=clock, **opts_before)
    stale = [MpWorker("fork", name, before, path), ScriptWorker(name, before, path)]
    new_rates, old_rates = parse_many(after), parse_many(before)
    admitted: list[int] = []
    late: dict[int, int] = {0: 0, 1: 0}
    new = None
    try:
        now = T0
        for _ in range(4 * 90):
            now += S // 4
            clock.set(now)
            admitted += [now for worker in stale if worker.hit("k")]
        assert_strict(admitted, old_rates, since_ns=T0)
        change = now
        new = Limiter(name, after, clock=clock, **opts_after)
        assert new.rates == new_rates and first.rates == new_rates
        longest = max(r.period_ns for r in new_rates)
        while now < change + 3 * longest:
            now += S // 4
            clock.set(now)
            for i, worker in enumerate(stale):
                if worker.hit("k"):
                    admitted.append(now)
                    late[i] += now > change + longest
            if new.hit("k"):
                admitted.append(now)
        counted_from = change - max(r.period_ns for r in old_rates)
        assert_strict(admitted, new_rates, since_ns=change, counted_from_ns=counted_from)
        assert all(late.values()), late  # each stale process admits under the new rates
    finally:
        for worker in stale:
            worker.close()
        first.close()
        if new is not None:
            new.close()
        shmwin.unlink(name)


def test_reset_forgets_and_raise_refuses_and_changes_nothing(tmp_path, name):
    clock, _ = _clock(tmp_path)
    old = Limiter(name, "3/minute", clock=clock)
    try:
        assert [old.hit("k") for _ in range(4)] == [True, True, True, False]
        for other in ("3/second", "5/minute"):
            with pytest.raises(GeometryMismatchError):
                Limiter(name, other, on_change="raise", clock=clock)
        assert old.rates == parse_many("3/minute") and not old.hit("k") and old.stats("k").used == 3
        with pytest.raises(GeometryMismatchError):
            Limiter(name, "3/minute", buckets=60, on_change="raise", clock=clock)
        new = Limiter(name, "2/second", on_change="reset", clock=clock)
        assert new.stats("k").used == 0  # forgotten
        assert [old.hit("k") for _ in range(3)] == [True, True, False]  # the old handle follows
        assert old.rates == parse_many("2/second")
        new.close()
    finally:
        old.unlink()
        old.close()


def test_a_reset_asked_for_resets_even_with_the_same_rates(tmp_path, name):
    """``set_rates(same, on_change="reset")`` (and ``shmwin set NAME SAME --reset``, which says
    "counts reset") forgot nothing before: the rates being the same, the call returned at once.
    An open with the same rates and ``on_change="reset"`` still keeps the counts."""
    clock, _ = _clock(tmp_path)
    lim = Limiter(name, "2/minute", clock=clock)
    tb = TokenBucket(name + "-tb", "1/minute", burst=2, clock=clock)
    try:
        assert lim.hit("k") and lim.hit("k") and tb.hit("k") and tb.hit("k")
        Limiter(name, "2/minute", on_change="reset", clock=clock).close()  # a worker's open
        TokenBucket(name + "-tb", "1/minute", burst=2, on_change="reset", clock=clock).close()
        assert lim.stats("k").used == 2 and not lim.hit("k") and not tb.hit("k")
        lim.set_rates("2/minute", on_change="reset")
        tb.set_rate("1/minute", on_change="reset")
        assert [lim.hit("k") for _ in range(3)] == [True, True, False]
        assert [tb.hit("k") for _ in range(3)] == [True, True, False]
    finally:
        for front in (lim, tb):
            front.unlink()
            front.close()


def test_a_token_bucket_rate_and_burst_change_under_a_stale_process(tmp_path, name):
    clock, path = _clock(tmp_path)
    stale = ScriptWorker(name, "1/second burst=5", path)
    new = None
    try:
        assert [stale.hit("k") for _ in range(6)] == [True] * 5 + [False]
        new = TokenBucket(name, "2/second", burst=3, clock=clock)  # no error; 5 used, 3 at most
        assert not new.hit("k") and not stale.hit("k")
        change, now, admitted, stale_late = clock(), clock(), [], 0
        for _ in range(40):
            now += S // 8
            clock.set(now)
            if stale.hit("k"):
                admitted.append(now)
                stale_late += 1
            admitted += [now] if new.hit("k") else []
        assert_bucket_strict(admitted, parse("2/second"), 3, since_ns=change)
        assert stale_late > 0 and len(admitted) <= 3 + 2 * 5
        with pytest.raises(GeometryMismatchError):
            TokenBucket(name, "9/second", burst=3, on_change="raise", clock=clock)
        fresh = TokenBucket(name, "2/second", burst=4, on_change="reset", clock=clock)
        assert [stale.hit("k") for _ in range(5)] == [True] * 4 + [False]  # full again, the new burst
        fresh.close()
    finally:
        stale.close()
        if new is not None:
            new.unlink()
            new.close()


def test_a_concurrency_limit_change_under_a_stale_process(name):
    stale = Holder("python -c", name, 2)
    new = None
    try:
        assert stale.acquire() and stale.acquire() and not stale.acquire()
        new = Concurrency(name, 1)  # lowered: the 2 slots held stay, no one comes in
        assert not new.acquire("k", timeout=0) and not stale.acquire() and stale.limit() == 1
        assert stale.release() == "ok" and not new.acquire("k", timeout=0)
        assert stale.release() == "ok" and new.acquire("k", timeout=0) and not stale.acquire()
        new.release("k")
        with pytest.raises(GeometryMismatchError):
            Concurrency(name, 3, on_change="raise")
        assert stale.limit() == 1
        raised = Concurrency(name, 3)
        assert stale.acquire() and stale.acquire() and raised.acquire("k", timeout=0)
        assert not stale.acquire() and not new.acquire("k", timeout=0)
        reset = Concurrency(name, 2, on_change="reset")  # the 3 held are forgotten
        assert stale.acquire() and stale.acquire() and not stale.acquire() and stale.limit() == 2
        for conc in (raised, reset):
            conc.close()
    finally:
        stale.close()
        if new is not None:
            new.unlink()
            new.close()


def test_shmwin_set_and_show_from_the_shell(tmp_path, name):
    lim = Limiter(name, "3/minute")
    try:
        assert [lim.hit("k") for _ in range(3)] == [True] * 3
        shown = json.loads(_cli("show", "--json", name).stdout)
        before = shown[0]["live"] if isinstance(shown, list) else shown["live"]
        assert before["changes"] == 0, before
        done = _cli("set", name, "5/minute")
        assert done.returncode == 0, done.stderr
        assert "3/minute" in done.stdout and "5/minute" in done.stdout, done.stdout
        assert lim.rates == parse_many("5/minute") and lim.stats("k").used == 3
        show = _cli("show", name)
        assert show.returncode == 0 and "changed live once" in show.stdout, show.stdout
        moved = _cli("set", name, "2/second;5/minute")
        assert moved.returncode == 0 and lim.rates == parse_many("2/second;5/minute"), moved.stderr
        assert not lim.hit("k")  # the 3 carried weigh on the new second
        reset = _cli("set", name, "2/second;5/minute", "--reset")
        assert reset.returncode == 0 and lim.hit("k") and lim.stats("k").used == 1, reset.stderr
        for bad in (["set", name, "ten/minute"], ["set", name, "0/minute"], ["set", name, ""],
                    ["set", name, "5/minute", "--burst", "3"], ["set", name + "-none", "5/minute"],
                    ["set", name, "5/fortnight"]):  # fmt: skip
            out = _cli(*bad)
            assert out.returncode != 0 and "Traceback" not in out.stderr, (bad, out.stderr)
            assert out.stderr.strip(), bad
            assert lim.rates == parse_many("2/second;5/minute") and lim.stats("k").used == 1, bad
    finally:
        lim.unlink()
        lim.close()


def test_a_window_reopened_with_other_buckets_says_what_to_do_and_that_works(name):
    win = Window(name, "1m", buckets=20)
    try:
        win.add(3)
        with pytest.raises(GeometryMismatchError) as raised:
            Window(name, "1m", buckets=60)
        said = str(raised.value)
        assert "shmwin rm" in said and name in said, said
        command = said[said.index("shmwin rm") :].split("`")[0].split("'")[0].split(")")[0].split()
        assert command[:3] == ["shmwin", "rm", name], command
        command = [c.rstrip(".,;:") for c in command if c.startswith("--") or c in ("shmwin", "rm", name)]
        out = _cli(*command[1:])
        if "--force" not in command:  # this process holds it: the command says so, --force drops it
            assert out.returncode != 0 and "--force" in out.stdout + out.stderr, out
            out = _cli(*command[1:], "--force")
        assert out.returncode == 0, out.stderr
        again = Window(name, "1m", buckets=60)
        assert again.total() == 0
        again.add(1)
        assert again.total() == 1
        again.close()
    finally:
        win.close()
        shmwin.unlink(name)


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_limits_shm_storage_with_a_changed_limit_answers_as_memory(make_name, strategy):
    """limits keys a limit's counts by the limit itself: a changed limit needs nothing, on
    ``shm://`` as on ``memory://`` (the same answers, hit for hit, no error)."""
    with shm_storage(make_name("lm")) as shm:
        limiters = [STRATEGIES[strategy](shm), STRATEGIES[strategy](storage_from_string("memory://"))]
        for item in (RateLimitItemPerMinute(5), RateLimitItemPerMinute(8), RateLimitItemPerMinute(3),
                     RateLimitItemPerSecond(2)):  # fmt: skip
            answers = [[lim.hit(item, "client") for _ in range(item.amount + 2)] for lim in limiters]
            assert answers[0] == answers[1], (item, answers)
            assert sum(answers[0]) <= item.amount


def test_a_reset_asked_for_on_redis_resets_even_with_the_same_rates(redis_server, make_name):
    """The same on ``redis://`` and ``shm+redis://`` (change.lua returned at once for the
    spec in force; ``shmwin set --backend URL NAME SAME --reset`` said "counts reset"). And
    ``shmwin set --backend redis://`` on a two-tier name says to put ``shm+`` before it (it
    said "not a token bucket"); ``shmwin show --backend shm+redis://`` says to read Redis
    itself (it was redis-py's "Redis URL must specify one of the following schemes")."""
    url = redis_server.url
    fronts = [Limiter(make_name("r"), "2/minute", backend=url),
              Limiter(make_name("t"), "2/minute", backend="shm+" + url),
              TokenBucket(make_name("b"), "1/minute", burst=2, backend=url)]  # fmt: skip
    reopen = [lambda: Limiter(fronts[0].name, "2/minute", backend=url, on_change="reset"),
              lambda: Limiter(fronts[1].name, "2/minute", backend="shm+" + url, on_change="reset"),
              lambda: TokenBucket(fronts[2].name, "1/minute", burst=2, backend=url, on_change="reset"),
              ]  # fmt: skip
    try:
        for front, again in zip(fronts, reopen, strict=True):
            assert front.hit("k") and front.hit("k") and not front.hit("k")
            again().close()
            assert not front.hit("k"), front.name  # an open with the rates in force resets nothing
        fronts[0].set_rates("2/minute", on_change="reset")
        fronts[2].set_rate("1/minute", on_change="reset")
        done = _cli("set", "--backend", "shm+" + url, fronts[1].name, "2/minute", "--reset")
        assert done.returncode == 0 and "counts reset" in done.stdout, done.stderr
        for front in fronts:
            assert [front.hit("k") for _ in range(3)] == [True, True, False], front.name
        plain = _cli("set", "--backend", url, fronts[1].name, "3/minute")
        assert plain.returncode != 0 and "shm+" in plain.stderr, plain.stderr
        shown = _cli("show", "--backend", "shm+" + url, fronts[1].name)
        assert shown.returncode != 0 and repr(url) in shown.stderr, shown.stderr
    finally:
        for front in fronts:
            front.unlink()
            front.close()


def test_a_redis_window_reopened_with_other_buckets_says_what_to_do_and_that_works(redis_server, name):
    """On Redis the error said only that the geometries differ (and ``shmwin rm`` refused
    Redis): it now names the command that drops it, ``shmwin rm --backend URL NAME``, which
    works, as the unlink it also names does."""
    win = Window(name, "1m", buckets=20, backend=redis_server.url)
    try:
        win.add(3)
        with pytest.raises(GeometryMismatchError, match=r"Window\.attach\(.*\)\.unlink\(\)") as raised:
            Window(name, "1m", buckets=60, backend=redis_server.url)
        assert f"'shmwin rm --backend URL {name}'" in str(raised.value)
        done = _cli("rm", "--backend", redis_server.url, name)
        assert done.returncode == 0 and f"removed {name} from {redis_server.url}" in done.stdout, done.stderr
        again = Window(name, "1m", buckets=60, backend=redis_server.url)
        again.add(1)
        assert again.total() == 1
        again.unlink()  # and the unlink the error names
        with pytest.raises(WindowNotFoundError):
            Window.attach(name, backend=redis_server.url)
        again.close()
    finally:
        win.unlink()
        win.close()
