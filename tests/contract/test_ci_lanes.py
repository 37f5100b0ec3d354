"""scripts/test's lanes (scripts/_stages.sh, scripts/checks.d/README): a background job that has
ended is collected after the suite while one still running keeps going and is collected at the
end, each with its own log, seconds and status; and every job of scripts/checks.d/ says its lane
in a marker scripts/test knows, since a misspelt one would silently move a job into the serial
lane."""

from __future__ import annotations

import re
import subprocess
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
