"""The package's sizes, held (issue 28): at most fourteen modules directly in ``shmwin/``, and no
hand-written Python file over 600 lines anywhere in the checkout. The import layers are
``test_architecture.py``'s; the C core's own size rule is ``tests/unit/test_core_file_map.py``'s."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.helpers import ROOT

MAX_TOP_LEVEL_MODULES = 14  # shmwin/*.py, __init__ and __main__ counted
MAX_FILE_LINES = 600  # a hand-written Python file (the C core's own rule: tests/unit/test_core_file_map.py)
PYTHON_TREES = ("shmwin", "tests", "benchmarks", "scripts")  # and the .py files at the root


def _top_level_modules(root: Path = ROOT) -> list[str]:
    return sorted(p.name for p in (root / "shmwin").glob("*.py"))


def _long_python_files(root: Path = ROOT, most: int = MAX_FILE_LINES) -> list[str]:
    """``path: lines`` of each hand-written Python file of the checkout longer than ``most``."""
    files = [*root.glob("*.py"), *(p for tree in PYTHON_TREES for p in (root / tree).rglob("*.py"))]
    long = []
    for path in sorted(files):
        lines = len(path.read_text().splitlines())
        if lines > most:
            long.append(f"{path.relative_to(root)}: {lines}")
    return long


@pytest.mark.unit
def test_shmwin_has_at_most_fourteen_top_level_modules():
    modules = _top_level_modules()
    assert {"__init__.py", "__main__.py", "window.py", "limiter.py"} <= set(modules)  # it counts them
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, (
        f"{len(modules)} modules directly in shmwin/ ({', '.join(modules)}): at most "
        f"{MAX_TOP_LEVEL_MODULES}; a new one belongs in a subpackage, or in the module it serves"
    )


@pytest.mark.unit
def test_no_hand_written_python_file_is_over_600_lines():
    assert _long_python_files() == [], f"split by concern: at most {MAX_FILE_LINES} lines a file"


@pytest.mark.unit
def test_the_size_checks_see_what_they_count(tmp_path):
    (tmp_path / "shmwin" / "sub").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    for name in ("__init__.py", "__main__.py", "a.py", "sub/b.py"):
        (tmp_path / "shmwin" / name).write_text("x = 1\n")
    (tmp_path / "tests" / "test_long.py").write_text("x = 1\n" * 601)
    (tmp_path / "setup.py").write_text("x = 1\n" * 600)  # exactly the most: fine
    assert _top_level_modules(tmp_path) == ["__init__.py", "__main__.py", "a.py"]  # not sub/b.py
    assert _long_python_files(tmp_path) == ["tests/test_long.py: 601"]
