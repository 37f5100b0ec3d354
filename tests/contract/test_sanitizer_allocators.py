"""The sanitizer job's two allocators (scripts/checks.d/50-sanitizers.sh): the processes that run
the tests keep ``PYTHONMALLOC=malloc`` (every Python object through ASan's malloc), and the
processes they start get ``SHMWIN_CHILD_PYTHONMALLOC`` (tests/conftest.py's
``children_allocator``), with xdist's workers, as the job runs them (-n 2). Were the
switch made in xdist's controller, the workers would lose malloc; were it lost, every child would
pay for it (the job's time, its comment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "support" / "allocator_probe.py"


def test_test_processes_on_malloc_and_their_children_on_pymalloc() -> None:
    env = dict(os.environ, PYTHONMALLOC="malloc", SHMWIN_CHILD_PYTHONMALLOC="pymalloc")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "2",
         str(PROBE)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout, run.stdout


def test_without_the_variable_children_keep_the_parents_allocator() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SHMWIN_CHILD_PYTHONMALLOC"}
    env["PYTHONMALLOC"] = "malloc"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-n", "0",
         str(PROBE)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode != 0 and "the child is not on pymalloc" in run.stdout, run.stdout + run.stderr
