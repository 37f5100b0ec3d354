"""A live move's edges (shmwin/backends/shm/live.py): a mover that dies or fails after it
retired the old segment, a carry the new segment cannot hold, an opener's smaller capacity, and
a process still mapping a moved segment. Each time, the rates in force and every key's held
hits survive: never the limiter's original rates, never a silent over-admission."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

import shmwin
from shmwin import Limiter, ManualClock
from shmwin.backends.shm import live, segment

pytestmark = pytest.mark.integration

T0_NS = 10**17  # 3 years: far from any host clock (uptime), which `shmwin set` carries on (_StampClock)


def _retire_and_die(name: str) -> None:
    """A forked mover: retires the segment (as a move does right after making its passing one),
    then is gone before it renames anything."""
    pid = os.fork()
    if pid == 0:
        try:
            mover = Limiter.attach(name, clock=ManualClock(T0_NS))
            live._core_of(mover._backend._window).retire()
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0


def test_a_takeover_keeps_the_rates_changed_in_place(name):
    """100/minute, changed in place to 10/minute, then a mover dies after retire(): the next
    call's takeover moves the rates in force (10/minute), not the segment's original ones."""
    with Limiter(name, "100/minute", clock=ManualClock(T0_NS)) as lim:
        assert all(lim.hit("k") for _ in range(5))
        lim.set_rates("10/minute")
        _retire_and_die(name)
        assert sum(lim.hit("k") for _ in range(50)) == 5  # 5 held of 10
        assert [str(r) for r in lim.rates] == ["10/minute"]
        with Limiter.attach(name, clock=ManualClock(T0_NS)) as other:
            assert [str(r) for r in other.rates] == ["10/minute"]
        lim.unlink()


def test_a_mover_failing_after_retire_rolls_back(name, monkeypatch):
    """An exception in the carry (a Ctrl-C in a long one): the old segment is live again, with
    its rates and counts; no passing segment is left."""
    with Limiter(name, "10/minute", clock=ManualClock(T0_NS)) as lim:
        assert all(lim.hit("k") for _ in range(6))

        carry, calls = live._carry, []

        def interrupted(*args: object) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt  # once: a takeover after it may carry
            carry(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(live, "_carry", interrupted)
        with pytest.raises(KeyboardInterrupt):
            lim.set_rates("5/second;10/minute")
        assert not live.moved(lim._backend._window)
        assert [str(r) for r in lim.rates] == ["10/minute"]
        assert sum(lim.hit("k") for _ in range(10)) == 4
        assert not [n for n in segment.names() if n.startswith(f"{name}.moving-")]
        lim.unlink()


def test_a_smaller_capacity_keeps_every_keys_hits(name):
    """500 keys at their limit under capacity=1000, reopened with other periods and
    capacity=10: the new segment holds them all (the larger capacity), none admitted again."""
    clock = ManualClock(T0_NS)
    keys = [f"k{i}" for i in range(500)]
    with Limiter(name, "3/minute", capacity=1000, clock=clock) as lim:
        for key in keys:
            assert all(lim.hit(key) for _ in range(3))
        with Limiter(name, "3/second;3/minute", capacity=10, clock=clock) as moved:
            assert moved._backend.geometry.capacity >= 1000
            assert not any(moved.hit(key) for key in keys)
        lim.unlink()


def test_a_carry_that_does_not_fit_fails_loudly_and_keeps_the_old_segment(name, monkeypatch):
    """A new segment too small for the keys (here forced): the move raises, the old segment
    stays live with every key's hits, and nothing is left under a passing name."""
    clock = ManualClock(T0_NS)
    keys = [f"k{i}" for i in range(200)]
    with Limiter(name, "3/minute", capacity=1000, clock=clock) as lim:
        for key in keys:
            assert all(lim.hit(key) for _ in range(3))
        monkeypatch.setattr(live, "at_least", lambda want, have: want)
        backend = lim._backend
        small = dataclasses.replace(backend._window.geometry, capacity=10)
        with pytest.raises(shmwin.KeyTableFullError):
            live.move(backend._window, small, carry=True, opts=backend._opts)
        assert not any(lim.hit(key) for key in keys)
        assert not [n for n in segment.names() if n.startswith(f"{name}.moving-")]
        lim.unlink()


def _with(g, **changes):  # type: ignore[no-untyped-def]
    import dataclasses

    return dataclasses.replace(g, **changes)


def test_set_rates_from_a_stale_mapping_follows_the_move(name):
    """A -> B (another opener moves the name) -> A from the process still mapping A's segment:
    A is in force again, for everyone."""
    clock = ManualClock(T0_NS)
    a = "3/10seconds;8/minute"
    with Limiter(name, a, clock=clock) as stale:
        assert stale.hit("k")
        with Limiter(name, "5/minute", clock=clock) as mover:
            assert [str(r) for r in mover.rates] == ["5/minute"]
            stale.set_rates(a)
            assert [str(r) for r in mover.rates] == ["3/10 seconds", "8/minute"]
        assert [str(r) for r in stale.rates] == ["3/10 seconds", "8/minute"]
        stale.unlink()


def _die_after_passing(name: str) -> None:
    """A forked mover killed after it made its passing segment, before retire()."""
    pid = os.fork()
    if pid == 0:
        try:
            create = live.ShmWindow.create

            def create_and_die(*args: object, **kwargs: object) -> None:
                create(*args, **kwargs)  # type: ignore[arg-type]
                os._exit(0)

            live.ShmWindow.create = create_and_die  # type: ignore[method-assign,assignment]
            Limiter(name, "5/second;10/minute", clock=ManualClock(T0_NS))
        finally:
            os._exit(1)
    assert os.waitpid(pid, 0)[1] == 0


def _passing(name: str) -> list[str]:
    return [n for n in segment.names() if n.startswith(f"{name}.moving-")]


def test_the_next_mover_removes_a_dead_movers_passing_segment(name):
    with Limiter(name, "10/minute", clock=ManualClock(T0_NS)) as lim:
        assert all(lim.hit("k") for _ in range(6))
        _die_after_passing(name)
        assert len(_passing(name)) == 1 and not live.moved(lim._backend._window)
        lim.set_rates("10/minute;20/hour")
        assert not _passing(name)
        assert sum(lim.hit("k") for _ in range(10)) == 4
        lim.unlink()


def test_unlink_removes_a_dead_movers_passing_segment(name):
    with Limiter(name, "10/minute", clock=ManualClock(T0_NS)) as lim:
        _die_after_passing(name)
        assert len(_passing(name)) == 1
        lim.unlink()
        assert not _passing(name)


def test_shmwin_set_carries_hits_on_the_users_clock(name, tmp_path):
    """Processes on a ManualClock hold 6 of 10/minute; `shmwin set` from the shell (the host
    clock, far from theirs) moves the name to other periods: the 6 stay counted for them."""
    clock = ManualClock(T0_NS, path=tmp_path / "clock")
    with Limiter(name, "10/minute", clock=clock) as lim:
        assert all(lim.hit("k") for _ in range(6))
        done = subprocess.run(
            [sys.executable, "-m", "shmwin", "set", name, "5/second;10/minute"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert sum(lim.hit("k") for _ in range(10)) == 0  # 6 held: over 5/second
        clock.advance(2)
        assert sum(lim.hit("k") for _ in range(10)) == 4  # and 10/minute holds 4 more
        lim.unlink()
