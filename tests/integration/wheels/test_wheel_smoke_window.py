"""The wheel smoke's console-script check does not depend on how long the CLI takes to start.

Under qemu-user the CLI's start-up took 27 s on a loaded host and over 60 s twice in 6 runs, so
the 1-minute window it was asked to show had emptied and the smoke saw 0. Here the window the
smoke builds is written on a clock shared through a file, time is moved by hand past where the
old window emptied, and the real console script (a separate process) is asked what it holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support import wheel_smoke

import shmwin

pytestmark = pytest.mark.integration
S = 1_000_000_000


def test_the_window_the_smoke_shows_still_counts_after_a_slow_start(tmp_path: Path) -> None:
    clock = shmwin.ManualClock(1_000 * S, path=tmp_path / "clock")
    name = f"smoke-span-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    w = wheel_smoke.cli_window(name, clock=clock)
    try:
        w.add(2003)
        for late_s in (61, 27 * 10, 3_600 * 22):  # past the old 1-minute span; 10x, 3000x qemu's start
            clock.set(1_000 * S + late_s * S)
            assert w.total() == 2003, late_s
        assert wheel_smoke.CLI_SPAN_S >= 86_400
    finally:
        w.close()
        shmwin.unlink(name)


def test_the_console_script_reads_the_smoke_window_it_was_given(tmp_path: Path) -> None:
    name = f"smoke-cli-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    w = wheel_smoke.cli_window(name)
    try:
        w.add(2003)
        cli = [sys.executable, "-m", "shmwin", "show", name, "--json"]
        shown = json.loads(subprocess.run(cli, capture_output=True, text=True, check=True).stdout)
        assert "2003" in json.dumps(shown), shown
    finally:
        w.close()
        shmwin.unlink(name)
