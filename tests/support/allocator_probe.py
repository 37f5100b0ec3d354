"""Run by tests/contract/test_sanitizer_allocators.py as a pytest file of its own (named on the
command line): the process running this test must be on the allocator it was started with
(``PYTHONMALLOC=malloc``: every object through malloc, so through ASan's in the sanitizer job),
and a process it starts on the one tests/conftest.py's ``children_allocator`` sets
(``SHMWIN_CHILD_PYTHONMALLOC``). pymalloc's statistics say which: only pymalloc prints its
size classes."""

from __future__ import annotations

import subprocess
import sys

import pytest

PYMALLOC = "Small block threshold"
STATS = "import sys; sys._debugmallocstats()"


def test_this_process_on_malloc_and_a_child_on_pymalloc(capfd: pytest.CaptureFixture[str]) -> None:
    sys._debugmallocstats()
    assert PYMALLOC not in capfd.readouterr().err, "the test process is not on malloc"
    child = subprocess.run([sys.executable, "-c", STATS], capture_output=True, text=True, check=True)
    assert PYMALLOC in child.stderr, "the child is not on pymalloc"
