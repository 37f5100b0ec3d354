"""The sdists of installed peers, which ship their own tests: fetched into ``.peer-suites/`` by
a script of ``scripts/test.d/`` (limits' and Flask-Limiter's, the adapters' peers'), for the
peer-suite tests (``integration/limits/test_peer_suites.py``, ``integration/adapters/``); and
what a run of those tests reports (its JUnit XML)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def fetched_sdist(dist: str, fetch: Path) -> Path:
    """The extracted sdist of the installed ``dist``, fetched by the script ``fetch`` if missing
    (the calling test fails, with the script's errors, if it cannot)."""
    version = importlib.metadata.version(dist)
    where = ROOT / ".peer-suites" / f"{dist}-{version}"
    if not (where / ".complete").exists():
        fetched = subprocess.run(["bash", str(fetch)], capture_output=True, text=True, timeout=600)
        if fetched.returncode != 0:
            pytest.fail(f"{fetch.name} could not fetch the {dist} {version} sdist:\n{fetched.stderr}")
    return where


def outcomes_of(report: Path) -> dict[str, list[str]]:
    """A pytest JUnit report's test ids (``classname::name``) by outcome: passed, failed, error,
    skipped (a failure outranks an error, an error a skip). No report: every list empty."""
    out: dict[str, list[str]] = {"passed": [], "failed": [], "error": [], "skipped": []}
    if not report.exists():
        return out
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        kind = next((k for k in ("failure", "error", "skipped") if k in kinds), "passed")
        out[{"failure": "failed"}.get(kind, kind)].append(test)
    return out
