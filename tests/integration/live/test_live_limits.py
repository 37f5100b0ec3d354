"""Live limits (issue 31, item 1): a limiter's rates changed while stale processes -- forked,
spawned and unrelated ``python -c``, each opened with the old rates -- keep hitting it, time
moved by hand for all of them. Per carry rule: strict in every period across the change, and a
stale process follows the newest rates at its next call."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
from support.helpers import ROOT
from support.live import assert_strict, busiest, stale_workers

import shmwin
from shmwin import Limiter, ManualClock
from shmwin.rate import parse_many

S = 10**9
STEP_NS = 97_000_000  # between two hits: 0.097 s, so a period holds several buckets' worth
START_NS = 10**17  # 3 years: far from any host clock (uptime), which `shmwin set` carries on


@pytest.fixture
def clock_path(tmp_path) -> str:
    return str(tmp_path / "clock")


@pytest.fixture
def clock(clock_path) -> ManualClock:
    return ManualClock(START_NS, path=clock_path)


@pytest.fixture
def run(name: str, clock: ManualClock, clock_path: str) -> Iterator[Callable[..., tuple[list[int], int]]]:
    """``run(old, change, steps, at)``: the parent makes the limiter with ``old``; three stale
    workers (fork, spawn, ``python -c``) open it with ``old`` and take turns hitting one key,
    STEP_NS apart, ``steps`` hits in all; before hit ``at``, ``change()`` is called. Answers
    the admitted hits' times and when the change was made."""
    made: list[Limiter] = []

    def go(old: str, change: Callable[[], object], steps: int, at: int) -> tuple[list[int], int]:
        made.append(Limiter(name, old, clock=clock))
        workers = stale_workers(name, old, clock_path)
        admitted, changed_ns = [], -1
        try:
            for i in range(steps):
                if i == at:
                    made.append(change())  # type: ignore[arg-type]
                    changed_ns = clock()
                if workers[i % len(workers)].hit("k"):
                    admitted.append(clock())
                clock.advance(ns=STEP_NS)
        finally:
            for w in workers:
                w.close()
        return admitted, changed_ns

    yield go
    for lim in made:
        if isinstance(lim, Limiter):
            lim.close()
    shmwin.unlink(name)


def _set(name: str, rates: str, *extra: str) -> None:
    """``shmwin set`` as an operator types it."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # kept: a sanitized core's run needs its preloads
    command = [sys.executable, "-m", "shmwin", "set", name, rates, *extra]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"-> {rates}" in done.stdout


def test_new_amounts_from_the_shell_keep_the_counts_and_stale_processes_follow(name, run):
    """10/minute -> 4/minute in place (``shmwin set``) with 10 hits in the minute: the counts stay, so
    no stale process admits again until fewer than 4 remain; then 4 per minute, never 10."""
    admitted, changed_ns = run("10/minute", lambda: _set(name, "4/minute"), steps=1500, at=400)
    before = [t for t in admitted if t < changed_ns]
    assert_strict(before, parse_many("10/minute"), since_ns=0)
    assert_strict(admitted, parse_many("4/minute"), since_ns=changed_ns)  # the old hits count too
    assert busiest(admitted, parse_many("10/minute")[0], 0, -1) == 10  # the old limit was reached
    after = [t for t in admitted if t >= changed_ns]
    assert after and min(after) >= max(before) + 55 * S  # the kept counts left first
    with Limiter.attach(name) as lim:
        assert [str(r) for r in lim.rates] == ["4/minute"]


def test_a_higher_limit_applies_at_once_to_stale_processes(name, run, clock):
    admitted, changed_ns = run("3/minute", lambda: Limiter(name, "9/minute", clock=clock), steps=600, at=100)
    assert_strict(admitted, parse_many("9/minute"), since_ns=changed_ns)
    assert busiest(admitted, parse_many("9/minute")[0], changed_ns, -1) == 9  # stale ones admitted to 9


def test_other_periods_carry_every_held_hit_as_recent(name, run, clock):
    """6/minute -> 2/second;20/minute: a new segment, each key's hits (the most an old rate held)
    counted at the change, so the first new second admits nothing the old hits filled."""
    new = "2/second;20/minute"
    admitted, changed_ns = run("6/minute", lambda: Limiter(name, new, clock=clock), steps=2000, at=450)
    assert_strict(admitted, parse_many(new), since_ns=changed_ns)
    assert_strict([t for t in admitted if t < changed_ns], parse_many("6/minute"), since_ns=0)
    assert not [t for t in admitted if changed_ns <= t < changed_ns + S]  # 6 held: over 2/second
    assert busiest(admitted, parse_many("2/second")[0], changed_ns, changed_ns) == 2  # then 2 a second
    with Limiter.attach(name, clock=clock) as lim:
        assert [str(r) for r in lim.rates] == ["2/second", "20/minute"]


def test_other_buckets_and_exact_logs_move_too(name, run, clock):
    """A bucketed 6/minute -> an exact 6/minute (a log of hit times): other rings, so a move; the
    held hits carried, strict across."""
    admitted, _ = run("6/minute", lambda: Limiter(name, "6/minute", exact=True, clock=clock),
                               steps=1500, at=300)  # fmt: skip
    assert_strict(admitted, parse_many("6/minute"), since_ns=0)


def test_reset_starts_from_zero_and_stays_strict_after(name, run, clock):
    admitted, changed_ns = run("5/minute", lambda: Limiter(name, "3/second", clock=clock, on_change="reset"),
                               steps=900, at=300)  # fmt: skip
    after = [t for t in admitted if t >= changed_ns]
    assert after[:3] == [changed_ns + i * STEP_NS for i in range(3)]  # nothing carried
    assert_strict(admitted, parse_many("3/second"), since_ns=changed_ns, counted_from_ns=changed_ns)


def test_raise_keeps_the_segment_as_it_is(name, clock):
    with Limiter(name, "5/minute", clock=clock) as lim:
        lim.hit("k")
        with pytest.raises(shmwin.GeometryMismatchError, match="on_change='carry'"):
            Limiter(name, "6/minute", clock=clock, on_change="raise")
        with pytest.raises(shmwin.GeometryMismatchError):
            Limiter(name, "6/second", clock=clock, on_change="raise")
        assert [str(r) for r in lim.rates] == ["5/minute"] and lim.stats("k").used == 1
        lim.unlink()


def test_a_bad_on_change_is_refused(name):
    with pytest.raises(ValueError, match="on_change"):
        Limiter(name, "5/minute", on_change="merge")
    with pytest.raises(ValueError, match="on_change"):
        Limiter(name, "5/minute").set_rates("6/minute", on_change="raise")
    shmwin.unlink(name)


def test_a_move_keeps_the_segments_mode_and_its_stale_users_follow(name, clock):
    """A limiter made 0o600 moved by a process that would make its segments 0o660 (perm=): the
    new segment keeps 0o600, the mode its users trust; the old handle follows the name."""
    from shmwin.backends.shm.segment import path_of

    with Limiter(name, "5/minute", clock=clock) as old:
        assert old.hit("k")
        with Limiter(name, "5/second", clock=clock, perm=0o660) as new:
            assert os.stat(path_of(name)).st_mode & 0o777 == 0o600
            assert [str(r) for r in old.rates] == ["5/second"] and new.stats("k").used == 1
            assert old.hit("k") and new.stats("k").used == 2
        old.unlink()
