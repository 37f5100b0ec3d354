"""Processes in another time namespace share windows on the host's clock.

A process in a time namespace (``unshare -T``: a container started with one, a CRIU
restore) reads CLOCK_MONOTONIC shifted by its namespace's offset. Both the native core and
the Python readers take that offset off (``/proc/self/timens_offsets``), so every process
stamps and reads a segment on the host's monotonic clock. The offsets here (11 s, more than
the 10 s period) would each let a limiter admit its whole limit twice at once if they were
not taken off: no sleeping is needed to see it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import cache

import pytest
from support.rootenv import tool_skip_reason

from shmwin import Limiter, Window, _core
from shmwin.clock import host_monotonic_ns, read_timens_offset_ns

pytestmark = pytest.mark.integration

PERIOD_S, LIMIT = 10, 20


@cache
def timens_skip_reason() -> str | None:
    if reason := tool_skip_reason("unshare", "for time namespaces"):
        return reason
    probe = subprocess.run(["unshare", "-T", "--monotonic", "7", "cat", "/proc/self/timens_offsets"],
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode != 0 or "monotonic" not in probe.stdout:
        return f"no time namespaces here: {probe.stderr.strip() or probe.stdout.strip()}"
    return None


needs_timens = pytest.mark.skipif(timens_skip_reason() is not None, reason=str(timens_skip_reason()))


def in_time_namespace(offset_s: int, code: str, *args: str) -> str:
    """Run ``code`` in a fresh Python in a time namespace whose monotonic clock is
    ``offset_s`` seconds off the host's; its stdout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = ["unshare", "-T", "--monotonic", str(offset_s), sys.executable, "-c", code, *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


HIT = """
import sys
from shmwin import Limiter, _core
from shmwin.clock import read_timens_offset_ns
assert _core.timens_offset() == read_timens_offset_ns() == int(sys.argv[2]) * 10**9
with Limiter.attach(sys.argv[1]) as lim:
    print(sum(lim.hit("client") for _ in range(int(sys.argv[3]))))
"""


@needs_timens
@pytest.mark.parametrize("offset_s", [PERIOD_S + 1, -(PERIOD_S + 1)])
@pytest.mark.parametrize("exact", [True, False])
def test_a_limiter_admits_its_limit_once_across_time_namespaces(name, offset_s, exact):
    if offset_s < 0 and host_monotonic_ns() < 60 * 10**9:
        pytest.skip("the host booted under a minute ago: a negative offset would go below 0")
    with Limiter(name, f"{LIMIT}/{PERIOD_S}s", exact=exact) as lim:
        first = sum(lim.hit("client") for _ in range(LIMIT))  # the host's process, at real time t
        # at once, a process whose clock reads 11 s later (or earlier) than ours
        other = int(in_time_namespace(offset_s, HIT, name, str(offset_s), str(LIMIT)))
        assert (first, other) == (LIMIT, 0)
        assert not lim.hit("client")  # and the host's process sees the other's refusals so
        assert lim.stats("client").remaining == 0
        lim.unlink()


@needs_timens
def test_the_other_process_hits_first_and_the_host_reads_its_counts(name):
    with Limiter(name, f"{LIMIT}/{PERIOD_S}s", exact=True) as lim:
        behind = -(PERIOD_S + 1)
        assert int(in_time_namespace(behind, HIT, name, str(behind), str(LIMIT + 5))) == LIMIT
        assert not any(lim.hit("client") for _ in range(LIMIT))
        lim.unlink()


READ_AND_ADD = """
import sys
from shmwin import Window
with Window.attach(sys.argv[1]) as w:
    print(w.total(key="a"))  # the host's adds, read on the host's clock
    w.add(5, key="b")
"""


@needs_timens
def test_windows_are_written_and_read_on_the_hosts_clock(name):
    with Window(name, span=PERIOD_S, buckets=10, keyed=True) as w:
        w.add(3, key="a")
        assert in_time_namespace(PERIOD_S + 1, READ_AND_ADD, name).split() == ["3"]
        assert w.total(key="b") == 5 and w.total() == 8
        newest = w.last_write_ns()
        assert newest is not None and abs(newest - host_monotonic_ns()) < 5 * 10**9
        w.unlink()


def test_no_time_namespace_no_offset():
    if read_timens_offset_ns() != 0:
        pytest.skip("this test process itself runs in a shifted time namespace")
    assert _core.timens_offset() == 0


def test_the_offsets_file_is_parsed(tmp_path):
    f = tmp_path / "timens_offsets"
    f.write_text("monotonic           -3    250000000\nboottime            9         0\n")
    assert read_timens_offset_ns(str(f)) == -3 * 10**9 + 250_000_000
    f.write_text("junk\n")
    assert read_timens_offset_ns(str(f)) == 0
    assert read_timens_offset_ns(str(tmp_path / "missing")) == 0
