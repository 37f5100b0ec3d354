"""Exact limiters (``Limiter(exact=...)``): each rate keeps a key's hit times (a log ring),
so a hit is forgotten exactly one period after it, across real processes. The fail points
of their section are in core/failpoints/test_fp_hit_exact_log.py."""

from __future__ import annotations

import multiprocessing as mp
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import pytest
from support.helpers import ROOT, run_all
from support.workers import limiter_hits

import shmwin
from shmwin import (
    CorruptSegmentError,
    GeometryMismatchError,
    Limiter,
    ManualClock,
    NotSupportedError,
    geometry,
)
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of

S = 1_000_000_000
T0 = 1_000 * S


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_exactly_the_limit_passes_across_processes_and_leaves_exactly_a_period_later(name, tmp_path, start):
    ctx = mp.get_context(start)
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(T0, path=clock_path)
    with Limiter(name, "300/minute", exact=True, clock=clock) as lim:
        for round_ in range(3):
            admitted = ctx.Array("q", 4, lock=False)
            procs = [ctx.Process(target=limiter_hits, args=(name, "client", 150, admitted, i, clock_path))
                     for i in range(4)]  # fmt: skip
            run_all(procs, timeout_s=120)
            assert sum(admitted) == 300, f"round {round_}: {list(admitted)} admitted"
            assert lim.stats("client").used == 300
            assert lim.stats("client").reset_after == pytest.approx(60 + 1e-9)
            clock.advance(60)  # every hit is exactly one period old: still counted ...
            assert not lim.hit("client")
            clock.set(clock() + 1)  # ... and forgotten one nanosecond later
        lim.unlink()


def test_a_hit_counts_for_exactly_its_period(name):
    clock = ManualClock(T0)
    with Limiter(name, "3/minute", exact=True, clock=clock) as lim:
        assert lim.hit("k") and lim.hit("k")
        clock.advance(10)
        assert lim.hit("k") and not lim.hit("k")
        stats = lim.stats("k")
        assert (stats.used, stats.remaining) == (3, 0)
        assert stats.reset_after == pytest.approx(50 + 1e-9)  # the two oldest leave at T0 + 60 s + 1 ns
        clock.set(T0 + 60 * S)
        assert not lim.hit("k")
        clock.set(T0 + 60 * S + 1)  # the two at T0 have left; the one at T0 + 10 s stays
        assert lim.hit("k") and lim.hit("k") and not lim.hit("k")
        assert lim.stats("k").used == 3 and lim.window.total(key="k") == 3
        clock.set(T0 + 70 * S + 1)
        assert lim.stats("k").used == 2  # the hit at T0 + 10 s is gone; the new ones stay
        lim.unlink()


def test_a_cost_above_the_log_is_one_entry(name):
    """1,000,000 per 2 s (limits' huge-cost case): two entries, exact."""
    clock = ManualClock(T0)
    with Limiter(name, "1000000/2s", exact=True, clock=clock) as lim:
        assert lim.window.geometry.rings[0].n_buckets == shmwin.geometry.DEFAULT_LOG_ENTRIES
        assert lim.hit("k")
        clock.advance(1)
        assert lim.hit("k", 999_999) and not lim.hit("k")
        clock.advance(1)
        assert lim.stats("k").remaining == 0  # the first hit is exactly 2 s old: still counted
        clock.set(clock() + 1)
        assert lim.stats("k").remaining == 1
        lim.unlink()


def test_a_merging_log_errs_only_towards_refusing(name):
    """exact=2 for 5/minute: past two times, the oldest two merge into the later time, so
    hits leave late, never early: the limit holds in every window, and fewer pass than with
    an exact log."""
    clock = ManualClock(T0)
    with (Limiter(name, "5/minute", exact=2, clock=clock) as lim,
          Limiter(name + "x", "5/minute", exact=True, clock=clock) as full):  # fmt: skip
        admitted, admitted_exact = [], []
        for second in range(0, 240, 7):
            clock.set(T0 + second * S)
            if lim.hit("k"):
                admitted.append(second)
            if full.hit("k"):
                admitted_exact.append(second)
        for i, t in enumerate(admitted):
            assert len([u for u in admitted[i:] if u <= t + 60]) <= 5
        assert len(admitted) <= len(admitted_exact)
        assert admitted[:5] == admitted_exact[:5] == [0, 7, 14, 21, 28]
        full.unlink()
        lim.unlink()


def test_another_python_attaches_by_name_and_sees_the_same_log(name, tmp_path):
    clock_path = tmp_path / "clock"
    clock = ManualClock(T0, path=clock_path)
    with Limiter(name, "10/minute", exact=True, clock=clock) as lim:
        assert sum(lim.hit("k") for _ in range(4)) == 4
        clock.advance(30)
        code = textwrap.dedent("""
            import sys
            from shmwin import Limiter, ManualClock
            with Limiter.attach(sys.argv[1], clock=ManualClock(path=sys.argv[2])) as lim:
                print(lim.rates[0], lim.stats("k").used, sum(lim.hit("k") for _ in range(10)))
        """)
        env_path = {"PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code, name, str(clock_path)], capture_output=True,
                             text=True, timeout=60, env=env_path | {"PATH": "/usr/bin:/bin"})  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["10/minute", "4", "6"]
        assert lim.stats("k").used == 10
        lim.unlink()


def test_geometry_is_checked_and_bad_options_are_refused(name):
    with Limiter(name, "10/minute", exact=True) as lim:
        assert "log of 10 per 1m" in str(lim.window.geometry)
        with pytest.raises(GeometryMismatchError):
            Limiter(name, "10/minute", on_change="raise")  # bucketed: another geometry
        with pytest.raises(GeometryMismatchError):
            Limiter(name, "10/minute", exact=5, on_change="raise")
        Limiter(name, "10/minute", exact=True).close()  # the same: attaches
        Limiter(name, "10/minute", exact=10).close()  # min(limit, entries): the same too
        lim.hit("k")
        with pytest.raises(NotSupportedError, match="hit times"):
            lim.window.series(key="k")
        assert lim.window.total(key="k") == 1 and lim.window.top() == [("k", 1)]
        lim.unlink()
    for bad in (0, -1, geometry.MAX_LOG_ENTRIES + 1, "yes", 2.5, None):
        with pytest.raises(ValueError, match="exact"):
            Limiter(name, "10/minute", exact=bad)
    assert not os.path.exists(path_of(name))


def test_junk_ring_flags_are_refused_on_attach(name):
    with Limiter(name, "10/minute", exact=True) as lim:
        lim.hit("k")
    with open(path_of(name), "r+b") as f:
        header = bytearray(f.read(layout.HEADER_BYTES))
        struct.pack_into("<I", header, layout.RING_TABLE_OFF + 12, 0x80 | layout.RING_LOG)
        struct.pack_into("<I", header, 24, zlib.crc32(header[layout.CRC_START : layout.CRC_END]))
        f.seek(0)
        f.write(header)
    with pytest.raises(CorruptSegmentError, match="flags"):
        Limiter.attach(name)
    shmwin.unlink(name)


def test_the_tools_read_an_exact_limiter(name):
    """The inspector's snapshot (shmwin show/export) reads a log ring: totals over its
    period, and each busy key's used, remaining and reset from its hit times."""
    from shmwin.inspector import snapshots

    clock = ManualClock(T0)
    with Limiter(name, "5/minute", exact=True, clock=clock) as lim:
        for key, at in (("a", T0), ("a", T0 + 10 * S), ("b", T0 + 20 * S)):
            clock.set(at)
            assert lim.hit(key)
        clock.set(T0 + 30 * S)
        w = lim.window
        assert w.total() == 3 and w.rate(last=None) == pytest.approx(3 / 60)
        snap = snapshots.snapshot(w, top=5)
        assert (
            snap["resolutions"][0]["resolution"] == "1m/1ns" and snap["resolutions"][0]["rate"] == "5/minute"
        )
        by_key = {entry["key"]: entry["rates"][0] for entry in snap["top"]}
        assert (by_key["a"]["used"], by_key["a"]["remaining"], by_key["a"]["reset_s"]) == (2, 3, 30.0)
        assert (by_key["b"]["used"], by_key["b"]["reset_s"]) == (1, 50.0)
        with pytest.raises(ValueError, match="longer than"):
            w.total(last="2m")
        lim.unlink()
