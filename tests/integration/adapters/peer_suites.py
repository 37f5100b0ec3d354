"""What the adapters' peer-suite tests share: the fetched sdist of an installed peer, and a
pytest run on a copy of its tests in a subprocess, read back from its JUnit report."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.sdists import fetched_sdist, outcomes_of

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
FETCH = ROOT / "scripts" / "test.d" / "21-adapter-suites.sh"


def suite(dist: str) -> Path:
    """The extracted sdist of the installed ``dist``, fetched by the script if missing."""
    return fetched_sdist(dist, FETCH)


def run_pytest(args: list[str], cwd: Path, report: Path, env: dict[str, str]) -> dict[str, list[str]]:
    """``python -m pytest args`` in ``cwd`` (this folder and the checkout importable); outcome ->
    test ids. Fails the calling test on any failure or error, with the tail of the output."""
    # a dict of its own: the second run below is given the caller's env, not this one (which has
    # PYTHONPATH already: dict(..., PYTHONPATH=...) then raised TypeError instead of running again)
    path = os.pathsep.join((str(HERE), str(ROOT), env.get("PYTHONPATH", "")))
    run_env = {**os.environ, **env, "PYTHONPATH": path}
    run_env.pop("PYTEST_XDIST_WORKER", None)
    alone = args[:1] == ["--again-alone"]  # a second run of the failed tests (below)
    args = args[1:] if alone else args
    command = [sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q", "--tb=short"]
    proc = subprocess.run(
        [*command, f"--junitxml={report}"], cwd=cwd, env=run_env, capture_output=True, text=True, timeout=900
    )
    outcomes = outcomes_of(report)
    if proc.returncode not in (0, 1) or not report.exists():
        pytest.fail(
            f"the suite did not run ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    bad = outcomes["failed"] + outcomes["error"]
    if bad and not alone:
        # the peers' buckets tests time real sleeps of a few hundred ms (pyrate's test_bucket_waiting
        # puts after "Elapsed: 303" of a 500 ms rate): under the whole suite's load a step can run
        # late. Each failed test runs once more, alone and serially: a real defect fails twice.
        again = run_pytest(["--again-alone", *options_of(args), *(node_id(t, cwd) for t in bad)], cwd,
                           report.with_suffix(".again.xml"), env)  # fmt: skip
        outcomes["passed"] += again["passed"]
        outcomes["failed"] = outcomes["error"] = []
        return outcomes
    assert not bad, f"the peer's own tests failed: {bad}\n{proc.stdout[-6000:]}"
    return outcomes


VALUED = {"-p", "-m", "-k", "-c", "-o", "--deselect", "--ignore"}  # options whose value follows


def options_of(args: list[str]) -> list[str]:
    """``args`` without what picks the tests (paths) and without xdist's ``-n N``: the plugins,
    marks and settings of a run, for a serial run of named tests."""
    out, i = ["-p", "no:xdist"], 0
    while i < len(args):
        arg = args[i]
        if arg == "-n":
            i += 2
            continue
        if arg in VALUED:
            out += args[i : i + 2]
            i += 2
            continue
        if arg.startswith("-"):
            out.append(arg)
        i += 1
    return out


def node_id(test: str, cwd: Path) -> str:
    """A JUnit ``classname::name`` (``tests.test_x::test_y[p]``, or ``tests.test_x.TestZ::...``
    for a test in a class) as pytest's node id, relative to ``cwd``."""
    classname, name = test.split("::", 1)
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):  # the longest dotted prefix that is a file
        path = "/".join(parts[:cut]) + ".py"
        if (cwd / path).exists():
            return "::".join([path, *parts[cut:], name])
    return classname.replace(".", "/") + ".py::" + name
