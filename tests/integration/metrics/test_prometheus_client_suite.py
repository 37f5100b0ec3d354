"""prometheus_client's own multiprocess tests, run against shmwin's mode.

scripts/test.d/22-metrics-suite.sh fetches the sdist of the installed prometheus_client (it
ships its tests; 0.26.0 passes 33 of 33 of its ``tests/test_multiprocess.py``). This file
imports that file unedited and runs its class ``TestMultiProcess`` with the setup changed only:
the names it imported from prometheus_client's multiprocess mode are bound to shmwin's, and
setUp/tearDown name and reset an app instead of a directory. A test that differs is wrapped
below with the difference's number (docs/metrics.md gives each reason). The file's other
classes test prometheus_client's files and environment variable, which shmwin has none of.
"""

from __future__ import annotations

import importlib.util
import os
import unittest
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from prometheus_client import values
from prometheus_client.core import CollectorRegistry
from prometheus_client.values import MutexValue
from support.sdists import ROOT, fetched_sdist

import shmwin.integrations.prometheus as shp

pytestmark = [pytest.mark.integration]

FETCH = ROOT / "scripts" / "test.d" / "22-metrics-suite.sh"


def _peer_module() -> ModuleType:
    """The installed prometheus_client's ``tests/test_multiprocess.py``, imported as it ships."""
    if not FETCH.exists():  # a copy of tests/ alone: the core's test build runs only fail points
        pytest.skip(f"no {FETCH.relative_to(ROOT)} to fetch the peer suite with", allow_module_level=True)
    path = fetched_sdist("prometheus_client", FETCH) / "tests" / "test_multiprocess.py"
    spec = importlib.util.spec_from_file_location("prometheus_client_peer_test_multiprocess", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_peer = _peer_module()
_app = ""  # the running test's app: the peer's tests call the names below without one


def _value_class(process_identifier: Callable[[], int] = os.getpid) -> Any:
    return shp.value_class(_app, process_identifier)


def _collector(registry: CollectorRegistry, path: str | None = None) -> Any:
    return shp.MultiProcessCollector(registry, _app)


def _mark_process_dead(pid: int, path: str | None = None) -> None:
    shp.mark_process_dead(pid, path or _app)


# CHANGED (setup): the peer's tests reach these through its module's globals.
_peer.MultiProcessValue = _value_class
_peer.MultiProcessCollector = _collector
_peer.mark_process_dead = _mark_process_dead


def _expected_failure(test: Callable[[Any], None]) -> Callable[[Any], None]:
    """The peer's ``test`` marked expected to fail, on a wrapper (its own function stays as it is)."""

    def differs(self: Any) -> None:
        test(self)

    differs.__name__ = test.__name__
    return unittest.expectedFailure(differs)


# The peer class is reached through its module only: pytest collects every TestCase a module holds.
class TestMultiProcess(_peer.TestMultiProcess):  # type: ignore[misc,name-defined]
    @pytest.fixture(autouse=True)
    def _app_names(self, make_name: Callable[[str], str]) -> None:
        """Each test's app name is unique to it, and its segment is checked gone afterwards."""
        self._make_name = make_name

    def setUp(self) -> None:
        # CHANGED (setup): the directory becomes a shmwin app name; the collector reads it.
        global _app
        _app = self._make_name("app")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = _app  # the tests pass it to mark_process_dead
        values.ValueClass = _value_class(lambda: 123)
        self.registry = CollectorRegistry(support_collectors_without_names=True)
        self.collector = _collector(self.registry)

    def tearDown(self) -> None:
        # CHANGED (setup): unlink the app's segment instead of removing the directory.
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]
        shp.reset(_app)
        values.ValueClass = MutexValue

    # DIFFERENCE 1: a counter's get() is every process's total (one shared cell)
    test_counter_across_forks = _expected_failure(_peer.TestMultiProcess.test_counter_across_forks)


# The peer's tests that cannot apply here, by their difference's number in docs/metrics.md.
NO_FILES = "DIFFERENCE 2: there are no files to list (one segment, whatever the pids)"
MERGE_OF_FILES = "DIFFERENCE 3: merge() takes files; shmwin merges series read from the segment"
NO_WARNING = "DIFFERENCE 4: remove()/clear() warn only when PROMETHEUS_MULTIPROC_DIR is set"
SKIPPED = {
    "test_initialization_detects_pid_change": NO_FILES,
    "test_merge_no_accumulate": MERGE_OF_FILES,
    "test_missing_gauge_file_during_merge": MERGE_OF_FILES,
    "test_remove_clear_warning": NO_WARNING,
}
for _test, _reason in SKIPPED.items():  # unittest.skip wraps: the peer's functions stay as they are
    setattr(TestMultiProcess, _test, unittest.skip(_reason)(getattr(_peer.TestMultiProcess, _test)))
