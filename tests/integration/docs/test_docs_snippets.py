"""Every ``python`` block of README.md and docs/**/*.md runs, as it is written there.

Each block runs on its own in a fresh interpreter (``python -c``), from an empty directory,
with this checkout's shmwin and a ``SHMWIN_NAMESPACE`` of its own, so blocks that open the
same names ("api", "login") never meet, and whatever segments a block leaves open are
removed after it. A block that names a ``redis://`` URL runs against a redis-server of its
own, one that names a ``redis+cluster://`` URL against a Redis Cluster of its own, the URL
replaced (the docs' example addresses are never contacted).

Only two kinds of block are not run here, each marked on the line before its fence:

- ``<!-- recipe: NAME -->``: a deployment recipe, which tests/integration/docs/test_docs_recipes.py
  runs under a real gunicorn or uvicorn;
- ``<!-- snippet: skip (REASON) -->``: a fragment that cannot run alone, with the reason.

Any other block that fails fails its test. A block whose imports are not installed here is
skipped, as the tests of those integrations are.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys

import pytest
from support.helpers import Block, fenced_blocks
from support.servers import ROOT

import shmwin
from shmwin.backends.shm.segment import PREFIX, SHM_DIR

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SKIP = re.compile(r"<!-- snippet: skip \((.+)\) -->")
MARKER = re.compile(r"<!-- (?:snippet|recipe):")
REDIS_URL = re.compile(r"redis://[^\s\"')]+")
CLUSTER_URL = re.compile(r"redis\+cluster://[^\s\"')]+")


def _marker(b: Block) -> str:
    """The line before the block's fence, if it is a marker comment; else ""."""
    return b.before if MARKER.match(b.before) else ""


BLOCKS = [b for page in PAGES for b in fenced_blocks(page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]
TO_RUN = [b for b in PYTHON if not _marker(b)]


def test_the_docs_have_python_blocks_to_run():
    assert len(TO_RUN) >= 10, [b.where for b in TO_RUN]


def test_every_marker_stands_before_a_python_block_and_says_why():
    """A marker only before a block (recipes may be any language), and a skip gives its reason."""
    marked = {(b.page, b.line - 1) for b in BLOCKS if _marker(b)}
    for page in PAGES:
        for i, line in enumerate(page.read_text().splitlines(), 1):
            where = f"{page.relative_to(ROOT)}:{i}: {line!r}"
            if MARKER.match(line):
                assert (page, i) in marked, f"{where} is not right before a fence"
                if line.startswith("<!-- snippet:"):
                    assert SKIP.fullmatch(line), f"{where}: write <!-- snippet: skip (reason) -->"
    for b in BLOCKS:
        if _marker(b).startswith("<!-- snippet:"):
            assert b.lang == "python", f"{b.where}: only python blocks are run; no need to skip {b.lang!r}"


def _missing_imports(code: str) -> list[str]:
    """Top-level modules the block imports that this environment does not have."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.partition(".")[0])
    return sorted(n for n in names if importlib.util.find_spec(n) is None)


def _remove_namespace(namespace: str) -> list[str]:
    """Remove every segment of ``namespace`` (``shmwin.<namespace>~<name>``); their names."""
    left = sorted(e for e in os.listdir(SHM_DIR) if e.startswith(f"{PREFIX}{namespace}~"))
    for entry in left:
        os.unlink(os.path.join(SHM_DIR, entry))
    return left


@pytest.mark.parametrize("block", TO_RUN, ids=[b.where for b in TO_RUN])
def test_the_block_runs(block: Block, make_name, tmp_path, request):
    missing = _missing_imports(block.code)
    if missing:
        pytest.skip(f"{block.where} imports {', '.join(missing)}, not installed here")
    code = block.code
    if REDIS_URL.search(code):
        code = REDIS_URL.sub(request.getfixturevalue("own_redis").url, code)
    if CLUSTER_URL.search(code):
        code = CLUSTER_URL.sub(request.getfixturevalue("own_redis_cluster").url, code)
    namespace = make_name("docs")  # its segments start with this test's prefix: make_name checks
    env = dict(os.environ, PYTHONPATH=str(ROOT), SHMWIN_NAMESPACE=namespace)
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    finally:
        _remove_namespace(namespace)
    out = f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, f"{block.where} failed:\n{code}\n{out}"


def test_the_readme_links_to_pages_that_exist():
    """README.md links to docs/ by relative path (mkdocs checks the links inside docs/)."""
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in targets if "://" not in t]
    assert any(t.startswith("docs/") for t in local)
    for target in local:
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_the_readme_shows_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert "scripts/demo" in text and "scripts/test" in text


def test_the_api_page_documents_every_public_name():
    page = (ROOT / "docs" / "api.md").read_text()
    documented = set(re.findall(r"^::: shmwin\.(\w+)$", page, re.MULTILINE))
    assert documented == set(shmwin.__all__)
