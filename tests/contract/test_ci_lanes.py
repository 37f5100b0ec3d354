"""scripts/test's lanes (scripts/_stages.sh, scripts/checks.d/README): a background job that has
ended is collected after the suite while one still running keeps going and is collected at the
end, each with its own log, seconds and status; every job of scripts/checks.d/ says its lane
in a marker scripts/test knows, since a misspelt one would silently move a job into the serial
lane; and the suite's --durations list comes with the tests that cost the most CPU
(tests/support/cpu_durations.py), what the 2 cores are short of."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAGES = ROOT / "scripts" / "_stages.sh"
CHECKS = ROOT / "scripts" / "checks.d"
LANES = {"beside the suite", "beside the checks"}  # the markers scripts/test reads

# No job waits on the clock: "slow" runs until the driver creates its go file, and the driver
# waits for the "fast" job's CPU file (written as a job ends) before collecting what has ended.
DRIVER = r"""
set -euo pipefail
source "$1"
go="$2/go"
stage_bg fast bash -c 'echo fast says hi'
stage_bg slow bash -c 'while [ ! -e "$0" ]; do sleep 0.01; done; echo slow says hi; exit 3' "$go"
stage "wait for fast" bash -c 'while [ ! -e "$0/0.cpu" ]; do sleep 0.01; done' "$stage_logs_dir"
stage_wait --done
echo "still running: ${stage_bg_names[*]}"
stage_bg late bash -c 'echo late says hi'
touch "$go"
stage_wait
echo "still running: ${stage_bg_names[*]:-none}"
stage_table
stage_status || echo "status: failed"
"""


def test_a_job_that_has_ended_is_collected_and_one_still_running_at_the_end(tmp_path: Path) -> None:
    try:  # before stage_wait --done, the first collection waited for "slow" forever
        proc = subprocess.run(["bash", "-c", DRIVER, "driver", str(STAGES), str(tmp_path)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        (tmp_path / "go").touch()  # whatever happened, "slow" ends
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # fast is shown after the first collection; slow only after the second, late beside it
    first, _, second = out.partition("still running: slow\n")
    assert "fast says hi" in first and "slow says hi" not in first, out
    assert "slow says hi" in second and "late says hi" in second and "still running: none" in second, out
    table = out[out.index("== stage times") :]
    row = re.compile(r"^(\S.*?)\s+\d+\s+\d+\s+(ok|FAILED \(\d+\))$", re.M)
    rows = {m.group(1): m.group(2) for m in row.finditer(table)}
    want = {"wait for fast": "ok", "fast (bg)": "ok", "slow (bg)": "FAILED (3)", "late (bg)": "ok"}
    assert rows == want, table
    assert "status: failed" in out
    assert (tmp_path / ".stage-times").read_text().startswith("stage ")


@pytest.mark.parametrize("job", sorted(p.name for p in CHECKS.glob("*.sh")))
def test_each_check_names_a_lane_scripts_test_knows(job: str) -> None:
    marks = re.findall(r"^# stage: (.*?)(?: \(|$)", (CHECKS / job).read_text(), re.M)
    assert len(marks) <= 1 and set(marks) <= LANES, (job, marks)


def test_the_cpu_list_puts_a_test_whose_child_burns_cpu_before_one_that_sleeps(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["support.cpu_durations"]\n')
    (tmp_path / "test_two.py").write_text(
        "import subprocess, sys, time\n"
        "def test_sleeps():\n    time.sleep(0.3)\n"
        "def test_burns():\n"
        "    subprocess.run([sys.executable, '-c', 'sum(range(3 * 10**6))'], check=True)\n"
    )
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--durations=2", str(tmp_path)]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "tests")}
    proc = subprocess.run([*argv, "--rootdir", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = proc.stdout[proc.stdout.index("most CPU-seconds 2") :].splitlines()[1:3]
    assert "s cpu  test_two.py::test_burns" in listed[0], proc.stdout
    assert "s cpu  test_two.py::test_sleeps" in listed[1], proc.stdout
