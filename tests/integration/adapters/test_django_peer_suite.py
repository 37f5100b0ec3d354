"""django-ratelimit's own tests, run with Django's default cache on ShmwinCounterCache.

scripts/test.d/21-adapter-suites.sh fetches the sdist of the installed django-ratelimit (its
tests are django_ratelimit/tests.py). The run copies the package into a temporary directory and
runs ``python -m django test django_ratelimit`` there, with django_peer_settings.py: the
repository's test settings, its counting cache on shared memory. No test is left out and no
file of the sdist is edited.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from peer_suites import HERE, ROOT, suite

import shmwin

pytestmark = pytest.mark.integration


def test_django_ratelimit_suite_on_shmwin_counter_cache(name, tmp_path):
    pytest.importorskip("django_ratelimit")
    shutil.copytree(suite("django-ratelimit") / "django_ratelimit", tmp_path / "django_ratelimit")
    env = dict(
        os.environ, SHMWIN_PEER_PREFIX=name, DJANGO_SETTINGS_MODULE="django_peer_settings",
        PYTHONPATH=os.pathsep.join((str(HERE), str(ROOT), str(tmp_path))),
    )  # fmt: skip
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "django", "test", "django_ratelimit", "-v", "1"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        shmwin.unlink(name)
    ran = re.search(r"^Ran (\d+) tests?", proc.stderr, re.M)
    failed = f"django-ratelimit's tests failed on the counter cache:\n{proc.stderr[-6000:]}"
    assert proc.returncode == 0 and ran, failed
    assert int(ran.group(1)) >= 50  # 52 in django-ratelimit 4.1.0
    assert re.search(r"^OK$", proc.stderr, re.M)
