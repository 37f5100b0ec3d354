"""Fixtures shared by every test.

Each test gets a unique name prefix (xdist worker + uuid), and fails if it leaves
any segment with that prefix in /dev/shm: leaked segments are removed and reported.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

import shmwin
from shmwin.segment import PREFIX, SHM_DIR


def _leftovers(prefix: str) -> list[str]:
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + prefix))


@pytest.fixture
def name_prefix(worker_id: str) -> str:
    return f"t-{worker_id}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_name(name_prefix: str) -> Iterator[Callable[[str], str]]:
    """``make_name("x")`` -> a window name unique to this test; leaks fail the test."""
    yield lambda suffix="w": f"{name_prefix}-{suffix}"
    leaked = _leftovers(name_prefix)
    for entry in leaked:
        shmwin.unlink(entry[len(PREFIX) :])
    assert not leaked, f"test left segments behind in {SHM_DIR}: {leaked}"


@pytest.fixture
def name(make_name: Callable[[str], str]) -> str:
    return make_name("w")


@pytest.fixture(scope="session", autouse=True)
def no_test_segments_at_exit(worker_id: str) -> Iterator[None]:
    yield
    leaked = _leftovers(f"t-{worker_id}-")
    assert not leaked, f"segments left in {SHM_DIR} at session end: {leaked}"
