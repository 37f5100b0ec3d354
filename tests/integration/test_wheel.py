"""What ``pip install`` ships: build the wheel, install it into a fresh venv, use it there.

The rest of the suite runs against the checkout; this test is the only one that
sees the package exactly as a user gets it, so a subpackage or data file missing
from the wheel fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, assert_no_fail_point

pytestmark = pytest.mark.integration

# the wheel builds its own extension: an in-place build (*.so) is left behind
_SKIP = shutil.ignore_patterns(
    ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "*.so"
)  # fmt: skip


def _run(args: list[str], cwd: Path, timeout: float = 600) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args[:3]} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_built_wheel_works_in_a_fresh_venv(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=_SKIP)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)], tmp_path)
    (wheel,) = dist.glob("shmwin-*.whl")

    listed = set(zipfile.ZipFile(wheel).namelist())
    packages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "shmwin").rglob("*.py")}
    missing = sorted(packages - listed)
    assert not missing, f"the wheel leaves out {missing}"
    (extension,) = [n for n in listed if n.startswith("shmwin/_core") and n.endswith(".so")]
    assert_no_fail_point(zipfile.ZipFile(wheel).read(extension))  # the test build's only

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", f"{wheel}[limits,prometheus]"], tmp_path)
    out = _run([py, str(ROOT / "tests" / "wheel_smoke.py")], tmp_path)
    assert "wheel smoke ok" in out
