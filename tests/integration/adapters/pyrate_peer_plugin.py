"""A pytest plugin that runs pyrate-limiter's own test suite on :class:`ShmwinBucket`.

Loaded with ``-p pyrate_peer_plugin`` by test_peer_suites.py, inside a copy of pyrate-limiter's
sdist tests. It changes one thing: ``InMemoryBucket``, wherever pyrate-limiter and its tests
name it, becomes a ShmwinBucket on a segment of its own (``SHMWIN_PEER_PREFIX`` and a number),
unlinked when the session ends. So every test of the in-memory bucket (the ``inmemory``
parameter of the bucket tests, and every limiter the tests build with the default bucket)
runs on shared memory; the tests of server and file buckets are deselected by their marks.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import pyrate_limiter
import pyrate_limiter.buckets
import pyrate_limiter.buckets.in_memory_bucket
import pyrate_limiter.limiter
import pyrate_limiter.limiter_factory

from shmwin.integrations.pyrate import ShmwinBucket

PREFIX = os.environ["SHMWIN_PEER_PREFIX"]
_numbers = itertools.count()
_made: list[ShmwinBucket] = []


class PeerBucket(ShmwinBucket):
    """``InMemoryBucket(rates, algorithm=None)``, as the suite calls it, on shared memory."""

    def __init__(self, rates: list[Any], algorithm: Any = None):
        super().__init__(rates, f"{PREFIX}-{os.getpid()}-{next(_numbers)}", algorithm=algorithm)
        _made.append(self)


for _module in (pyrate_limiter, pyrate_limiter.buckets, pyrate_limiter.buckets.in_memory_bucket,
                pyrate_limiter.limiter, pyrate_limiter.limiter_factory):  # fmt: skip
    _module.InMemoryBucket = PeerBucket  # type: ignore[attr-defined]


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    for bucket in _made:
        bucket.unlink()
