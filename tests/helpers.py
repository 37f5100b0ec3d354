"""Worker bodies for multiprocess tests (importable by spawned children)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from shmwin import ManualClock, Window

ROOT = Path(__file__).resolve().parent.parent


def add_many(name: str, n: int, err_every: int = 0) -> None:
    """Attach by name and add ``n`` to "ok" (and 1 to "err" every ``err_every`` adds)."""
    w = Window.attach(name)
    try:
        for i in range(n):
            w.add()
            if err_every and i % err_every == 0:
                w.add(1, "err")
    finally:
        w.close()


def add_with_clock(name: str, clock_path: str, n: int, field: str) -> None:
    w = Window.attach(name, clock=ManualClock(path=clock_path))
    w.add(n, field)
    w.close()


def run_python(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in an unrelated ``python -c`` process; raise with its stderr on failure."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, f"child failed ({proc.returncode}):\n{proc.stderr}"
    return proc
