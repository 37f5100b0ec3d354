"""README.md, then docs/install.md, run as a new user runs them: every fenced block, in order.

Unlike tests/integration/docs/test_docs_snippets.py (each python block alone, against this
checkout), here the blocks share one fresh venv, one working directory and one private
/dev/shm, and run one after the other: the install commands install the wheel that
``scripts/wheels`` built (found in ``wheelhouse/`` of a copy of the clone, as the pages say),
a snippet sees the segments the blocks before it left, and two snippets that pick the same
name meet, as they would for a user. Shell blocks run under ``bash -e`` with the venv's bin/
first on PATH; python blocks with the venv's python.

A block is not run only when the line before its fence says why:
``<!-- as-written: skip (REASON) -->``. One command is wrapped, and said here: ``shmwin watch``
runs until q or Ctrl-C, so tests/support/ctrl_c_after_frame.py presses Ctrl-C (SIGINT) once it
has drawn a frame, and the view must then exit 0, as a Ctrl-C'd watch does.
"""

from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from support.helpers import ROOT, Block, fenced_blocks
from support.rootenv import describe, namespace_argv, needs_namespace

pytestmark = [pytest.mark.integration, needs_namespace]

PAGES = [ROOT / "README.md", ROOT / "docs" / "install.md"]
SKIP = re.compile(r"<!-- as-written: skip \((.+)\) -->")
WATCH = re.compile(r"^(shmwin watch .*)$", re.MULTILINE)
CTRL_C = shlex.quote(str(ROOT / "tests" / "support" / "ctrl_c_after_frame.py"))
VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"


def blocks() -> list[Block]:
    """Every fenced block of the two pages, in reading order."""
    return [b for page in PAGES for b in fenced_blocks(page)]


def _skip(b: Block) -> str:
    """The reason given on the line before the block's fence; "" if it is run."""
    reason = SKIP.fullmatch(b.before)
    return reason.group(1) if reason else ""


def test_every_block_is_python_or_shell_and_few_are_skipped() -> None:
    found = blocks()
    assert {b.lang for b in found} <= {"python", "bash"}, [(b.where, b.lang) for b in found]
    run = [b for b in found if not _skip(b)]
    assert len([b for b in run if b.lang == "python"]) >= 4 and len([b for b in run if b.lang == "bash"]) >= 4
    skipped = [b for b in found if _skip(b)]
    assert len(skipped) <= 4, [
        (b.where, _skip(b)) for b in skipped
    ]  # the README's first block: above Installing
    for page in PAGES:  # a skip marker stands right before a fence, or it skips nothing
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("<!-- as-written:"):
                assert SKIP.fullmatch(line) and lines[i + 1].startswith("```"), f"{page.name}:{i + 1}"


def _clone(dest: Path) -> Path:
    """The tracked files of this checkout, as a fresh clone has them (no .venv, no build)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in filter(None, listed.stdout.split("\0")):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def _script(found: list[Block], scripts: Path, env_bin: Path) -> str:
    """One bash script that runs the blocks in order, each announced, stopping at the first
    that fails."""
    lines = ["set -e", f"export PATH={shlex.quote(str(env_bin))}:$PATH", "export COLUMNS=200"]
    for i, block in enumerate(found):
        if _skip(block):
            continue
        code = block.code
        if block.lang == "bash":
            code = WATCH.sub(rf"{shlex.quote(sys.executable)} {CTRL_C} 'q quits' \1", code)
        path = scripts / f"{i:02d}-{block.line}.{'py' if block.lang == 'python' else 'sh'}"
        path.write_text(code)
        runner = "python" if block.lang == "python" else "bash -e"
        lines += [f"echo '=== {block.where} ({block.lang})'", f"{runner} {shlex.quote(str(path))}"]
    lines.append("echo '=== every block ran'")
    return "\n".join(lines) + "\n"


def test_the_readme_and_the_install_page_run_as_written(tmp_path: Path) -> None:
    clone = _clone(tmp_path / "shmwin")
    wheels = ["bash", str(ROOT / "scripts" / "wheels"), "--python", VERSION, "--arch", platform.machine()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    built = subprocess.run([*wheels, "--no-test", "--out", str(clone / "wheelhouse")], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=900)  # fmt: skip
    assert built.returncode == 0, describe(built)

    env_dir = tmp_path / "venv"  # the user's fresh venv: nothing of shmwin's in it yet
    venv.create(env_dir, with_pip=True)
    scripts = tmp_path / "blocks"
    scripts.mkdir()
    found = blocks()
    driver = scripts / "run.sh"
    driver.write_text(_script(found, scripts, env_dir / "bin"))
    argv = namespace_argv(["bash", str(driver)], shm_size="64m")
    env = dict(env, PIP_DISABLE_PIP_VERSION_CHECK="1")
    proc = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, describe(proc)
    assert "=== every block ran" in proc.stdout, describe(proc)
    for block in found:  # each ran, in order (the driver stops at the first failure)
        assert _skip(block) or f"=== {block.where} ({block.lang})" in proc.stdout, block.where

    # what the blocks were about: the wheel is what got installed, and the CLI saw the snippets'
    # windows in the same private /dev/shm
    installed = subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    for dist in ("shmwin==", "Flask-Limiter==", "limits==", "redis==", "prometheus_client=="):
        assert dist.lower() in installed.lower(), installed
    assert "login" in proc.stdout and "uploads" in proc.stdout, proc.stdout
    assert not [e for e in os.listdir("/dev/shm") if "uploads" in e], "a block wrote to the host's /dev/shm"
