"""pyrate-limiter's own test suite, run against ShmwinBucket.

scripts/test.d/21-adapter-suites.sh fetches the sdist of the installed pyrate-limiter (it ships
its tests). The run copies its tests into a temporary directory and runs pytest on the copy in
a subprocess with pyrate_peer_plugin.py loaded: InMemoryBucket, wherever pyrate-limiter or its
tests name it, becomes a ShmwinBucket on a segment of its own. The files of the other buckets
(SQLite, Redis, Postgres, the multiprocessing one, aiohttp's extra) are not run, nor the other
buckets' parameters (by pyrate's own marks). No file of the sdist is edited.

Every test must pass except the ones listed below, each with its reason; docs/adapters.md's
"Differences from pyrate-limiter's buckets" lists the same ones.
"""

from __future__ import annotations

import shutil

import pytest
from peer_suites import ROOT, run_pytest, suite

pytestmark = pytest.mark.integration

NO_LEAK_STEP = "counts only what the rates count now: a hit leaves one period after it, with no leak() step"
NO_NAMES = "the log keeps hit times, not items: peek() names the bucket's key"
LOG_ONLY = "FixedWindow/GCRA asked of the bucket: it keeps the sliding-window log only (a clear ValueError)"

PYRATE_DESELECTED = {
    "tests/test_bucket_all.py::test_bucket_02[create_in_memory_bucket]": NO_LEAK_STEP,
    "tests/test_bucket_all.py::test_bucket_leak[create_in_memory_bucket]": NO_LEAK_STEP,
    "tests/test_limiter.py::test_bucket_no_schedule_leak": NO_LEAK_STEP,
    "tests/test_bucket_all.py::test_bucket_03[create_in_memory_bucket]": NO_NAMES,
    "tests/test_coverage_extras.py::test_bucket_async_wrapper_over_sync_bucket": NO_NAMES,
    "tests/test_fixed_window.py": LOG_ONLY,
    "tests/test_gcra.py::test_async_wrapper_delegates_the_algorithm": LOG_ONLY,
    "tests/test_retry_after.py::test_fallback_skips_the_lookup_when_the_policy_wants_no_entry": LOG_ONLY,
}
OTHER_BUCKETS = ["test_aiohttp_limiter.py", "test_multiprocessing.py", "test_postgres_concurrent.py",
                 "test_redis_bucket.py", "test_sqlite_bucket.py"]  # fmt: skip
OTHER_MARKS = (
    "not redis and not asyncredis and not sqlite and not filelocksqlite and not postgres and not mpbucket"
)


def test_pyrate_limiter_suite_on_shmwin_bucket(name_prefix, tmp_path):
    pytest.importorskip("pyrate_limiter")
    where = suite("pyrate-limiter")
    copy = tmp_path / "pyrate"
    shutil.copytree(where / "tests", copy / "tests")
    shutil.copy(where / "pyproject.toml", copy / "pyproject.toml")  # its pytest settings (asyncio_mode)
    args = ["tests", "-p", "pyrate_peer_plugin", "-m", OTHER_MARKS, "-n", "2"]
    args += [f"--ignore=tests/{file}" for file in OTHER_BUCKETS]
    for test in PYRATE_DESELECTED:
        args += ["--ignore" if test.endswith(".py") else "--deselect", test]
    outcomes = run_pytest(args, copy, tmp_path / "report.xml", {"SHMWIN_PEER_PREFIX": name_prefix})
    assert len(outcomes["passed"]) >= 215, outcomes["passed"]  # 219 of pyrate 4.5.0's tests


def test_every_exclusion_is_in_the_docs():
    """Each test left out is named, with its reason, among docs/adapters.md's differences."""
    page = (ROOT / "docs" / "adapters.md").read_text()
    section = page[page.index("### Differences from pyrate-limiter's buckets") :]
    for test in PYRATE_DESELECTED:
        name = test.rpartition("::")[2].rpartition("/")[2].partition("[")[0]
        assert name in section, f"{test} is left out but not named in docs/adapters.md"
