"""What ``pip install`` ships: scripts/wheels' wheel and sdist, as a user gets them.

The rest of the suite runs against the checkout; these tests see the package exactly as it is
shipped. The wheel is built by scripts/wheels for this interpreter (zig cc, glibc 2.17, retagged
manylinux_2_17 by auditwheel), which also installs it into a fresh venv with no C compiler
reachable and runs tests/support/wheel_smoke.py there. Here its bytes are checked again: every module
present, no C source, no debug info, no symbol version newer than GLIBC_2.17. A source install
with no compiler must stop with a line saying what to install. (scripts/checks.d/20-wheels.sh
builds and tests the wheels of every other CPython.)
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from support import wheelcheck
from support.helpers import ROOT, assert_no_fail_point

pytestmark = pytest.mark.integration

VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900):
    if env is None:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_of_this_python_is_manylinux_2_17_stripped_sourceless_and_works_without_a_compiler(
    tmp_path: Path,
) -> None:
    out = tmp_path / "wheelhouse"
    wheels = ["bash", str(ROOT / "scripts" / "wheels"), "--python", VERSION, "--arch", platform.machine()]
    proc = _run([*wheels, "--out", str(out)], tmp_path)
    assert proc.returncode == 0, f"scripts/wheels failed:\n{proc.stdout}\n{proc.stderr}"
    assert f"wheel smoke ok on Python {VERSION}" in proc.stdout, proc.stdout  # no compiler, own venv
    (wheel,) = out.glob(f"shmwin-*-cp{VERSION.replace('.', '')}-*.whl")
    assert f"manylinux_2_17_{platform.machine()}" in wheel.name

    with zipfile.ZipFile(wheel) as whl:
        listed = whl.namelist()
        (so_name,) = [n for n in listed if n.endswith(".so")]
        so = whl.read(so_name)
    modules = {p.relative_to(ROOT).as_posix() for p in (ROOT / "shmwin").rglob("*.py")}
    assert not modules - set(listed), f"the wheel leaves out {sorted(modules - set(listed))}"
    assert not [n for n in listed if n.endswith((".c", ".h"))], "the wheel ships C source"
    elf = wheelcheck.parse_elf(so)
    assert not [s for s in elf.sections if s.startswith(".debug_")], f"debug info in {so_name}"
    assert elf.glibc_max() <= (2, 17), sorted(elf.versions)
    assert set(elf.needed) <= wheelcheck.ALLOWED_LIBS and not elf.rpaths
    assert wheelcheck.wheel_problems(wheel) == []
    assert_no_fail_point(so)  # fail points are the test build's only

    if shutil.which("objdump"):  # binutils, where present, reads the same versions
        (tmp_path / "core.so").write_bytes(so)
        dump = _run(["objdump", "-T", str(tmp_path / "core.so")], tmp_path).stdout
        versions = {tuple(map(int, v.split("."))) for v in re.findall(r"GLIBC_([\d.]+)", dump)}
        assert versions and max(versions) <= (2, 17), sorted(versions)
        assert max(versions) == elf.glibc_max()


def test_a_source_install_without_a_compiler_says_what_to_install(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    proc = _run(["bash", str(ROOT / "scripts" / "wheels"), "--sdist-only", "--out", str(out)], tmp_path)
    assert proc.returncode == 0, f"scripts/wheels --sdist-only failed:\n{proc.stdout}\n{proc.stderr}"
    (sdist,) = out.glob("shmwin-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.split("/", 1)[1] for m in tar.getnames() if "/" in m}
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "shmwin").rglob("*.[ch]")}
    assert sources and sources <= members, f"the sdist leaves out {sorted(sources - members)}"
    assert "LICENSE" in members, "the sdist ships no LICENSE"

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    bare = {"HOME": os.environ.get("HOME", "/root"), "PATH": str(env_dir / "bin"), "LANG": "C.UTF-8",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1"}  # fmt: skip
    assert not any(shutil.which(c, path=bare["PATH"]) for c in ("gcc", "cc", "clang"))
    for cc, reason in ((None, "no C compiler was found"), ("/bin/false", "the C compiler failed")):
        env = bare if cc is None else {**bare, "CC": cc}
        install = [str(env_dir / "bin" / "python"), "-m", "pip", "install", "--no-deps", str(sdist)]
        proc = _run(install, tmp_path, env=env)
        said = proc.stdout + proc.stderr
        assert proc.returncode != 0, said
        assert "shmwin: cannot build its native module (shmwin._core) from source" in said, said
        assert reason in said, said
        for line in ("apt-get install gcc python3-dev", "apk add gcc musl-dev python3-dev",
                     "dnf install gcc python3-devel", "pip install --only-binary shmwin shmwin"):  # fmt: skip
            assert line in said, said


def test_the_declared_pythons_are_those_built_and_tested() -> None:
    """pyproject's classifiers and requires-python, the README and the install page name the
    CPythons that scripts/wheels builds for and 30-other-pythons tests on: 3.10 to 3.14."""
    tomllib = pytest.importorskip("tomllib")  # 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (pythons,) = re.findall(r'SHMWIN_PYTHONS="([\d. ]+)"', (ROOT / "scripts" / "_pythons.sh").read_text())
    versions = pythons.split()
    assert versions[0] == "3.10" and "3.14" in versions
    declared = [c.rpartition(" :: ")[2] for c in project["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]  # fmt: skip
    assert declared == versions
    assert project["requires-python"] == f">={versions[0]}"
    readme, install = (ROOT / "README.md").read_text(), (ROOT / "docs" / "install.md").read_text()
    assert f"CPython {versions[0]} to {versions[-1]} on Linux" in readme
    assert f"CPython {versions[0]} to {versions[-1]}, each tested" in install
    assert f"CPython {', '.join(versions[:-1])} and {versions[-1]} on Linux" in " ".join(install.split())


def test_cibuildwheel_builds_what_scripts_wheels_builds() -> None:
    tomllib = pytest.importorskip("tomllib")  # 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    script = (ROOT / "scripts" / "_pythons.sh").read_text()
    (pythons,) = re.findall(r'SHMWIN_PYTHONS="([\d. ]+)"', script)
    assert config["build"] == [f"cp{v.replace('.', '')}-*" for v in pythons.split()]
    assert config["test-command"] == "python {project}/tests/support/wheel_smoke.py"
    assert (ROOT / "tests" / "support" / "wheel_smoke.py").exists()
    linux = config["linux"]
    assert "manylinux_2_17_{arch}" in linux["repair-wheel-command"]
    assert {linux[f"manylinux-{arch}-image"] for arch in linux["archs"]} == {"manylinux2014"}
