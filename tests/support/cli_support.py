"""What the CLI tests share: running ``shmwin`` as a user does, processes that hold a
window open, and reading what a terminal would show."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import unicodedata

import pytest
from support.helpers import ROOT

ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
ENV["PYTHONPATH"] = str(ROOT)

HOLD = """
import sys
from shmwin import Window
w = Window.attach(sys.argv[1])
print("attached", flush=True)
sys.stdin.read()   # hold the window until the test closes our stdin
"""

CSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cli(*args: str, check: bool = True, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m shmwin ARGS`` in a subprocess, output captured (so 80 columns unless told)."""
    env = dict(ENV, COLUMNS=str(columns)) if columns else ENV
    proc = subprocess.run(
        [sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, env=env, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def hold(name: str) -> subprocess.Popen[str]:
    """An unrelated ``python -c`` process that attaches ``name`` and keeps it open until
    :func:`release`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert proc.stdout is not None and proc.stdout.readline() == "attached\n"
    return proc


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(30) == 0


def cells(text: str) -> int:
    """Terminal cells of ``text`` (wide East Asian characters take two)."""
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def visible_lines(text: str) -> list[str]:
    """The lines a terminal shows: escape sequences removed, split at line ends."""
    return CSI.sub("", text).replace("\r\n", "\n").replace("\r", "\n").split("\n")


def promtool_check(text: str) -> None:
    """``promtool check metrics`` must accept ``text`` with no lint problem."""
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip("promtool is not installed (scripts/test installs Debian's prometheus package)")
    proc = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), (
        f"promtool: exit {proc.returncode}\n{proc.stdout}{proc.stderr}\n--- input:\n{text}"
    )
