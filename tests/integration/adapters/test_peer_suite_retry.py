"""peer_suites.run_pytest: a peer's test that fails in the whole suite's run (its real sleeps run late
under load) runs once more, alone and serially, and a pass there counts; one that fails twice fails
the calling test. Here a tiny suite whose test fails on its first run only, and one that always fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from peer_suites import run_pytest

pytestmark = pytest.mark.integration

FLAKY = """
from pathlib import Path

def test_fails_the_first_time():
    ran = Path(__file__).with_name("ran")
    first = not ran.exists()
    ran.touch()
    assert not first, "the first run"
"""


def test_a_test_that_fails_once_runs_again_alone_and_its_pass_counts(tmp_path: Path) -> None:
    (tmp_path / "test_flaky.py").write_text(FLAKY)
    outcomes = run_pytest(["test_flaky.py"], tmp_path, tmp_path / "report.xml", env={})
    assert len(outcomes["passed"]) == 1 and not outcomes["failed"] and not outcomes["error"], outcomes
    assert (tmp_path / "report.again.xml").exists()  # the second, alone


def test_a_test_that_fails_twice_fails(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text("def test_broken():\n    assert False\n")
    with pytest.raises(AssertionError, match="test_broken"):  # the second run's verdict
        run_pytest(["test_broken.py"], tmp_path, tmp_path / "report.xml", env={})
