"""The tests that cost the most CPU-seconds, listed beside pytest's ``--durations=N`` list, N long.

On 2 cores shared by the suite's workers and the jobs beside it, a test's wall time says little
about what it costs the run: the limits peer suites take 30 s waiting on sleeps for 2 CPU-s,
while a test that hammers a server keeps a core busy all along. Each test's CPU is user + system
time, from its setup's start to its teardown's end, of its worker and of every child process the
worker has waited for by then (a session's server is counted in the test that stopped it).
Workers send it in their reports (``user_properties``), so the list covers every worker.
"""

from __future__ import annotations

import resource
from collections.abc import Generator
from typing import Any

import pytest

STARTED = pytest.StashKey[float]()
PROPERTY = "cpu_s"


def cpu_s() -> float:
    """User + system seconds of this process and of its children waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[STARTED] = cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    started = item.stash.get(STARTED, None)
    if call.when == "teardown" and started is not None:
        outcome.get_result().user_properties.append((PROPERTY, cpu_s() - started))


class CpuList:
    """Collects each test's CPU from the teardown reports (this process's, or every worker's)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.spent: list[tuple[float, str]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for name, value in report.user_properties:
            if report.when == "teardown" and name == PROPERTY:
                self.spent.append((float(value), report.nodeid))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.spent:
            return
        total = sum(cpu for cpu, _ in self.spent)
        terminalreporter.write_sep("=", f"most CPU-seconds {self.count} (of {total:.0f} in all the tests)")
        for cpu, nodeid in sorted(self.spent, reverse=True)[: self.count]:
            terminalreporter.write_line(f"{cpu:7.2f}s cpu  {nodeid}")


def pytest_configure(config: pytest.Config) -> None:
    count = config.getoption("durations", None)
    if count and not hasattr(config, "workerinput"):  # xdist's workers only measure
        config.pluginmanager.register(CpuList(int(count)), "cpu-durations-list")
