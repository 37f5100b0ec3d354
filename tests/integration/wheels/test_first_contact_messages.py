"""What a user is told before shmwin works at all: on a platform it cannot run on, and in a
checkout whose native module was never built. Each message says what is wrong and what to do."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.helpers import ROOT

pytestmark = pytest.mark.integration


def _setup_py_without_its_setup_call() -> dict[str, Any]:
    """setup.py's definitions, run as the build runs them, minus the final ``setup(...)``."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    tree.body = [
        node for node in tree.body if not (isinstance(node, ast.Expr) and "setup(" in ast.unparse(node))
    ]
    namespace: dict[str, Any] = {"__file__": str(ROOT / "setup.py"), "__name__": "setup"}
    exec(compile(tree, "setup.py", "exec"), namespace)
    return namespace


IMPORT_UNBUILT = "import sys; sys.path.insert(0, '.'); import shmwin"


@pytest.mark.parametrize(
    ("platform", "named"), [("darwin", "macOS"), ("win32", "Windows"), ("freebsd14", "freebsd14")]
)
def test_a_build_on_another_platform_says_at_once_that_shmwin_needs_linux(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, platform: str, named: str
) -> None:
    from setuptools import Distribution, Extension
    from setuptools.errors import PlatformError

    setup_py = _setup_py_without_its_setup_call()
    ext = Extension("shmwin._core", sources=setup_py["CORE_SOURCES"])
    command = setup_py["BuildExt"](Distribution({"ext_modules": [ext]}))
    command.build_lib = command.build_temp = str(tmp_path)
    command.ensure_finalized()
    monkeypatch.setenv("CC", "/bin/false")  # had a compiler run, it would have failed: none does
    monkeypatch.setattr(sys, "platform", platform)  # what the build reads on that system
    with pytest.raises(PlatformError) as raised:
        command.run()
    monkeypatch.undo()
    said = str(raised.value)
    assert said.startswith(f"shmwin: cannot be built on {named}: it needs Linux"), said
    for reason in ("/dev/shm", "robust process-shared mutexes", 'backend="redis://...', "docs/redis.md"):
        assert reason in said, said
    assert "apt-get install gcc" not in said, said  # no compiler advice where none would help
    assert not list(tmp_path.rglob("*.o")), "a compiler ran"


def test_a_checkout_without_its_native_module_says_so_and_how_to_build_it(tmp_path: Path) -> None:
    unbuilt = tmp_path / "checkout"
    shutil.copytree(ROOT / "shmwin", unbuilt / "shmwin", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # -S: not the editable install's
    proc = subprocess.run(
        [sys.executable, "-S", "-c", IMPORT_UNBUILT], cwd=unbuilt, env=env, capture_output=True, text=True
    )
    assert proc.returncode != 0
    said = proc.stderr
    assert "shmwin's native module (shmwin._core) is not built for this Python" in said, said
    assert "partially initialized module" not in said.splitlines()[-3], said  # not the bare message last
    for how in ("pip install -e .", "python setup.py build_ext --inplace", "apt-get install gcc python3-dev",
                "pip install dist/shmwin-*.whl"):  # fmt: skip
        assert how in said, said
