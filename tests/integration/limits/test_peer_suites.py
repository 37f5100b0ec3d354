"""limits' and Flask-Limiter's own test suites, run against shm://.

scripts/test.d/20-peer-suites.sh fetches the sdists of the installed versions (they ship
their tests) into .peer-suites/. Each run here copies a suite's tests into a temporary
directory and runs pytest on the copy in a subprocess, with tests/apps/shm_peer_plugin.py
loaded: every memory:// URI the tests build becomes shm://<a prefix per test>, and the
tests of server storages (redis, memcached, mongodb, valkey) are deselected. Nothing else
changes, and no file of the sdist is edited.

Every test must pass except the ones listed below, each with its reason; the docs'
"Documented differences from limits" (docs/limits-storage.md) lists the same ones.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.sdists import fetched_sdist, outcomes_of

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
FETCH = ROOT / "scripts" / "test.d" / "20-peer-suites.sh"

HARNESS = "asserts the class that memory:// builds, which this harness replaces by shm://"

LIMITS_STRATEGIES: dict[str, str] = {}  # every strategy test passes (the sliding counter is limits' own)
LIMITS_DESELECTED = (
    {f"tests/test_strategy.py::{test}[in-memory]": why for test, why in LIMITS_STRATEGIES.items()}
    | {f"tests/aio/test_strategy.py::{test.replace('Test', 'TestAsync', 1)}[in-memory]": why
       for test, why in LIMITS_STRATEGIES.items()}
    | {f"tests/{path}::TestConcreteStorages::test_storage_string[in-memory]": HARNESS
       for path in ("test_storage.py", "aio/test_storage.py")}
)  # fmt: skip
FLASK_LIMITER_DESELECTED: dict[str, str] = {}  # every test passes

LIMITS_SYNC = ["tests/test_strategy.py", "tests/test_storage.py", "tests/integration/test_concurrency.py"]
LIMITS_ASYNC = ["tests/aio/test_strategy.py", "tests/aio/test_storage.py"]


def _suite(dist: str) -> Path:
    """The extracted sdist of the installed ``dist``, fetched by the script if missing."""
    where = fetched_sdist(dist, FETCH)
    assert (where / "tests").is_dir(), f"{where} holds no tests/"
    return where


def _run(dist: str, paths: list[str], deselected: dict[str, str], prefix: str, tmp_path: Path,
         *extra: str) -> dict[str, list[str]]:  # fmt: skip
    """Run ``paths`` of ``dist``'s suite on a copy, on shm://; outcome -> test ids."""
    copy = tmp_path / dist
    suite = _suite(dist)
    shutil.copytree(suite / "tests", copy / "tests")
    shutil.copy(suite / "pytest.ini", copy / "pytest.ini")
    report = tmp_path / "report.xml"
    args = [
        sys.executable, "-m", "pytest", *paths, "-p", "shm_peer_plugin", "-p", "no:cacheprovider",
        "-o", "addopts=", "-o", "asyncio_default_fixture_loop_scope=function", "--no-flaky-report",
        "-q", "--tb=short", f"--junitxml={report}", *extra,
    ]  # fmt: skip
    for test in deselected:
        args += ["--deselect", test]
    env = dict(
        os.environ, SHMWIN_PEER_PREFIX=prefix, PYTHONPATH=f"{ROOT / 'tests' / 'apps'}{os.pathsep}{ROOT}"
    )
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(args, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    outcomes = outcomes_of(report)
    if proc.returncode not in (0, 1) or not report.exists():
        pytest.fail(
            f"the {dist} suite did not run ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    bad = outcomes["failed"] + outcomes["error"]
    assert not bad, f"{dist}'s own tests failed on shm://: {bad}\n{proc.stdout[-6000:]}"
    return outcomes


@pytest.fixture
def prefix(name: str) -> str:
    return name


def test_limits_sync_suite_on_shm(prefix, tmp_path):
    pytest.importorskip("limits")
    outcomes = _run("limits", LIMITS_SYNC, LIMITS_DESELECTED, prefix, tmp_path)
    assert len(outcomes["passed"]) >= 45  # the strategies, the storages, the concurrency tests


def test_limits_async_suite_on_shm(prefix, tmp_path):
    pytest.importorskip("limits")
    outcomes = _run("limits", LIMITS_ASYNC, LIMITS_DESELECTED, prefix, tmp_path)
    assert len(outcomes["passed"]) >= 40  # limits.aio on async+shm://


def test_flask_limiter_suite_on_shm(prefix, tmp_path):
    pytest.importorskip("flask_limiter")
    outcomes = _run("flask-limiter", ["tests"], FLASK_LIMITER_DESELECTED, prefix, tmp_path)
    assert len(outcomes["passed"]) >= 100


def test_every_exclusion_is_in_the_docs():
    """Each deselected test is listed, with its reason, among the docs' documented differences."""
    page = (ROOT / "docs" / "limits-storage.md").read_text()
    section = page[page.index("## Documented differences from limits") :]
    for test in {**LIMITS_DESELECTED, **FLASK_LIMITER_DESELECTED}:
        name = test.rpartition("::")[2].partition("[")[0]
        assert name in section, f"{test} is excluded but not documented in docs/limits-storage.md"
