"""limits' ``shm://`` storages for the tests of ``get`` of a foreign key
(tests/integration/limits/test_foreign_*.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from limits.storage import storage_from_string

import shmwin
import shmwin.integrations.limits  # registers shm://
from shmwin.backends.shm import boards


@contextmanager
def shm_storage(name: str) -> Iterator[Any]:
    """A storage of prefix ``name``; after it, closed, and its segments and board removed."""
    s = storage_from_string(f"shm://{name}")
    try:
        yield s
    finally:
        s.segments.close()
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)
        if os.path.exists(boards.path_of(name)):
            os.unlink(boards.path_of(name))
