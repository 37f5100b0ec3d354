"""A limiter's decisions (admitted, rejected, near the limit) and its shadow mode: counted by
every process's hit into ``NAME.decisions``, time driven by a manual clock."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from support.cli_support import cli
from support.helpers import ROOT, run_all
from support.workers import limiter_hits_uncounted

from shmwin import Decisions, Limiter, ManualClock, TokenBucket, Window
from shmwin.backends.shm.segment import SHM_DIR, check_name
from shmwin.errors import NotSupportedError
from shmwin.integrations.prometheus import ShmwinCollector

S = 1_000_000_000


@pytest.fixture
def clock():
    return ManualClock(1000 * S)


def exists(name: str) -> bool:
    return os.path.exists(SHM_DIR + check_name(name))


def test_enforced_limit_counts_admitted_rejected_and_near(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert [lim.hit("k") for _ in range(12)] == [True] * 10 + [False] * 2
        # near: remaining after the hit <= 10 / 5, i.e. the 8th, 9th and 10th
        assert lim.decisions() == Decisions(admitted=10, rejected=2, near_limit=3)
        lim.unlink()


def test_shadow_never_refuses_and_counts_what_enforcement_would(name, clock):
    with Limiter(name, "3/minute", clock=clock, shadow=True) as lim:
        assert [lim.hit("k") for _ in range(5)] == [True] * 5
        assert lim.decisions() == (3, 2, 1)
        assert lim.stats("k").used == 3  # a would-be refusal is not counted against the key
        assert lim.test("k") and lim.acquire("k", timeout=0)  # never waits, never refuses
        assert lim.decisions().rejected == 3
        lim.unlink()


def test_shadow_and_enforced_limiters_share_the_counts_of_one_name(name, clock):
    enforced = Limiter(name, "3/minute", clock=clock)
    shadow = Limiter(name, "3/minute", clock=clock, shadow=True)
    assert [enforced.hit("k") for _ in range(3)] == [True] * 3
    assert shadow.hit("k") and not enforced.hit("k")
    assert enforced.decisions() == shadow.decisions() == (3, 2, 1)
    shadow.close()
    enforced.unlink()
    enforced.close()


def test_counts_are_forgotten_after_the_longest_period(name, clock):
    with Limiter(name, ["2/second", "5/minute"], clock=clock) as lim:
        assert [lim.hit("a") for _ in range(3)] == [True, True, False]
        clock.advance(30)
        assert lim.decisions() == (2, 1, 1)  # 30 s later: within the longest period (1 minute)
        clock.advance(31)
        assert lim.decisions() == (0, 0, 0)
        lim.unlink()


def test_near_limit_looks_at_every_rate(name, clock):
    with Limiter(name, ["100/second", "5/minute"], clock=clock) as lim:
        assert all(lim.hit(k) for k in ("a", "a", "a", "a"))  # minute: 1 left after the 4th
        assert lim.decisions() == (4, 0, 1)
        lim.unlink()


def test_cost_and_keys(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert lim.hit("a", cost=8)  # 2 left: near
        assert not lim.hit("a", cost=3)
        assert lim.hit("b", cost=1)
        assert lim.decisions() == (2, 1, 1)
        lim.unlink()


def test_acquire_counts_its_admission_not_its_waits(name, clock):
    with Limiter(name, "1/second", clock=clock) as lim:
        assert lim.acquire("k")
        assert not lim.acquire("k", timeout=0)  # a try that would wait: no decision
        assert lim.decisions() == (1, 0, 1)
        lim.unlink()


def test_full_table_answers_are_decisions(name, clock):
    with Limiter(name, "5/minute", clock=clock, capacity=1, on_full="deny") as lim:
        assert lim.hit("a")
        assert not lim.hit("b")  # no row for b: on_full denies
        assert lim.decisions() == (1, 1, 0)
        lim.unlink()


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_every_process_counts_into_the_same_decisions(name, start):
    ctx = mp.get_context(start)
    with Limiter(name, "100/hour") as lim:
        procs = [ctx.Process(target=limiter_hits_uncounted, args=(name, 60)) for _ in range(4)]
        run_all(procs, timeout_s=60)
        code = textwrap.dedent("""
            import sys
            from shmwin import Limiter
            lim = Limiter.attach(sys.argv[1])
            print([lim.hit("other") for _ in range(3)].count(True), tuple(lim.decisions()))
            lim.close()
        """)
        out = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True, cwd=ROOT,
                             timeout=60)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == "3"
        # 240 hits on one key, 100 admitted (80..100 near: 20 left or fewer), then 3 on another
        assert lim.decisions() == (103, 140, 21)
        lim.unlink()


def test_decisions_false_keeps_none(name, clock):
    with Limiter(name, "5/minute", clock=clock, decisions=False) as lim:
        assert lim.hit("k")
        assert not exists(name + ".decisions")
        with pytest.raises(NotSupportedError, match="keeps no decisions"):
            lim.decisions()
        lim.unlink()


def test_attach_never_makes_a_decisions_window(name, clock):
    with Limiter(name, "5/minute", clock=clock, decisions=False), Limiter.attach(name, clock=clock) as other:
        assert other.hit("k")
        assert not exists(name + ".decisions")
        other.unlink()


def test_unlink_removes_the_decisions_window_too(name, clock):
    lim = Limiter(name, "5/minute", clock=clock)
    assert exists(name) and exists(name + ".decisions")
    assert lim.unlink()
    lim.close()
    assert not exists(name) and not exists(name + ".decisions")


def test_a_closed_decisions_window_never_fails_a_hit(name, clock):
    with Limiter(name, "5/minute", clock=clock) as lim:
        lim._decisions.close()  # e.g. closed by a careless caller: the hit goes on, uncounted
        assert lim.hit("k") and lim.stats("k").used == 1
        lim.unlink()


def test_the_tools_show_and_export_decisions(name, clock):
    with Limiter(name, "10/minute") as lim:
        try:
            _tools_show(name, lim)
        finally:
            lim.unlink()


def _tools_show(name: str, lim: Limiter) -> None:
    for _ in range(12):
        lim.hit("k")
    shown = cli("show", name + ".decisions", columns=200).stdout
    assert f"decisions of limiter {name}" in shown and "admitted 10 (3 near the limit), rejected 2" in shown
    assert name + ".decisions" in cli("ls", columns=200).stdout
    # and the limiter's own show says it too
    shown = cli("show", name, columns=200).stdout
    assert "decisions over 1m: admitted 10 (3 near the limit), rejected 2" in shown
    registry = CollectorRegistry()
    registry.register(ShmwinCollector([name + ".decisions"]))
    text = generate_latest(registry).decode()
    for outcome, n in (("admitted", 10), ("rejected", 2), ("near_limit", 3)):
        assert f'shmwin_limiter_decisions{{outcome="{outcome}",window="{name}"}} {n}.0' in text, text


def test_a_decisions_window_is_a_read_only_window_of_three_fields(name, clock):
    with Limiter(name, "10/minute", clock=clock) as lim:
        lim.hit("k")
        w = Window.attach(name + ".decisions", clock=clock)
        assert w.fields == ("admitted", "rejected", "near_limit") and w.geometry.role == "decisions"
        assert w.totals() == {"admitted": 1, "rejected": 0, "near_limit": 0}
        w.close()
        lim.unlink()


def test_a_token_bucket_counts_its_decisions(name, clock):
    with TokenBucket(name, "10/second", burst=10, clock=clock) as bucket:
        assert [bucket.hit("k") for _ in range(12)] == [True] * 10 + [False] * 2
        assert bucket.decisions() == (10, 2, 3)  # near: 2, 1 and 0 tokens left after
        clock.advance(2)  # over the rate's period: forgotten
        assert bucket.decisions() == (0, 0, 0)
        bucket.unlink()
    assert not exists(name + ".decisions")


def test_a_shadow_token_bucket_never_refuses(name, clock):
    with TokenBucket(name, "1/second", burst=3, clock=clock, shadow=True) as bucket:
        assert [bucket.hit("k") for _ in range(5)] == [True] * 5
        assert bucket.decisions() == (3, 2, 1)
        assert bucket.stats("k").remaining == 0  # what enforcement would have taken
        assert bucket.test("k") and bucket.acquire("k", timeout=0)
        with TokenBucket.attach(name, clock=clock) as other:  # attached: counts into the same
            assert not other.hit("k")
        assert bucket.decisions().rejected == 4
        bucket.unlink()


def test_a_shadow_token_bucket_on_redis(redis_server, name):
    bucket = TokenBucket(name, "1/minute", burst=2, backend=redis_server.url, shadow=True)
    try:
        assert [bucket.hit("k") for _ in range(3)] == [True] * 3
        with pytest.raises(NotSupportedError, match="keeps no decisions"):
            bucket.decisions()
    finally:
        bucket.unlink()
        bucket.close()
