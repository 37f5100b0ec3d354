"""`shmwin gc` and `shmwin rm` against live processes, in a private PID namespace, /proc and
/dev/shm: there root can read every process (a complete scan), nobody cannot (incomplete)."""

from __future__ import annotations

import json

from support.cli_support import HOLD
from support.rootenv import NOBODY, describe, needs_namespace, python_argv, run_in_namespace

DRIVER = r"""
import json, subprocess, sys
import shmwin
from shmwin import Window

HOLD, NOBODY = sys.argv[1], sys.argv[2]
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
IDLE = (
    "import sys, time\n"
    "from shmwin import ManualClock, Window\n"
    "then = ManualClock(max(time.monotonic_ns() - 30 * 10**9, 0))\n"  # last write 30 s ago, span 2 s
    "Window(sys.argv[1], span=2, buckets=2, clock=then).add(1)\n"
)

def run(argv, nobody=False):
    proc = subprocess.run((AS_NOBODY if nobody else []) + argv, capture_output=True, text=True)
    return proc.stdout + proc.stderr

def cli(*args, nobody=False):
    return run([sys.executable, "-m", "shmwin", *args], nobody)

def idle_window(name, nobody=False):
    assert not run([sys.executable, "-c", IDLE, name], nobody)

out = {}
idle_window("old")
idle_window("held")
with Window("fresh") as w:
    w.add(1)
holder = subprocess.Popen([sys.executable, "-c", HOLD, "held"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True)
assert holder.stdout.readline() == "attached\n"
out["holder"] = holder.pid
out["dry"], out["after_dry"] = cli("gc", "--dry-run"), shmwin.names()
out["gc"], out["after_gc"] = cli("gc"), shmwin.names()
holder.stdin.close()
holder.wait()
out["gc_released"], out["after_released"] = cli("gc"), shmwin.names()
idle_window("lone", nobody=True)
idle_window("lone2", nobody=True)
out["nobody"], out["after_nobody"] = cli("gc", "lone*", nobody=True), shmwin.names()
out["nobody_force"], out["after_force"] = cli("gc", "--force", "lone", nobody=True), shmwin.names()
out["nobody_rm"], out["after_rm"] = cli("rm", "lone2", nobody=True), shmwin.names()
print(json.dumps(out))
"""


@needs_namespace
def test_gc_removes_only_idle_windows_no_process_has_open():
    proc = run_in_namespace(python_argv(DRIVER, HOLD, str(NOBODY)), hidepid=None)
    assert proc.returncode == 0, describe(proc)
    out = json.loads(proc.stdout)
    # root, complete scan: the idle window held by a live process stays, the recent one too
    assert "would remove old (idle" in out["dry"] and "open in no process" in out["dry"]
    assert "keep held: idle " in out["dry"] and "> span 2.0s, but open in" in out["dry"]
    assert f"pid {out['holder']} (python" in out["dry"]
    assert "fresh" not in out["dry"] and out["after_dry"] == ["fresh", "held", "old"]
    assert "removed old" in out["gc"] and out["after_gc"] == ["fresh", "held"]
    assert "removed held" in out["gc_released"] and out["after_released"] == ["fresh"]
    # nobody cannot read root's processes: gc keeps what it cannot prove unused, and says why
    assert "keep lone: idle" in out["nobody"] and "could not be read" in out["nobody"], out["nobody"]
    assert "--force" in out["nobody"] and "lone" in out["after_nobody"]
    assert "removed lone" in out["nobody_force"] and "lone" not in out["after_force"]
    # rm was asked by name: it removes, and warns that the answer was incomplete
    assert "removed lone2 (note: the memory maps of" in out["nobody_rm"] and out["after_rm"] == ["fresh"]
