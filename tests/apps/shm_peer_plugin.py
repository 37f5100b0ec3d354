"""A pytest plugin that runs limits' and Flask-Limiter's own test suites on shm://.

Loaded with ``-p shm_peer_plugin`` by tests/integration/limits/test_peer_suites.py, inside a copy of the
peer's sdist tests. It changes one thing: every ``memory://`` (``async+memory://``) URI
handed to ``limits.storage.storage_from_string`` becomes ``shm://<prefix>``
(``async+shm://<prefix>``), with a prefix unique to each test, whose segments are
unlinked when the test ends. Tests that need a server (redis, memcached, mongodb,
valkey: the peers start them with docker) are deselected, by storage.

Environment: ``SHMWIN_PEER_PREFIX`` (required), the name prefix of every segment made;
``SHMWIN_PEER_STORAGE=memory`` keeps memory:// (the same selection, for a baseline).
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import sys
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import shmwin
import shmwin.integrations.limits  # registers shm:// and async+shm://

PREFIX = os.environ["SHMWIN_PEER_PREFIX"]
# client libraries the peers' conftest files import at the top, for fixtures of server
# storages this harness never runs: stand-ins, only when the real one is not installed
_SERVER_CLIENTS = ("pymemcache", "pymemcache.client", "pymongo", "valkey", "redis.sentinel")
_SERVER_FIXTURES = {"docker_services", "redis_connection", "memcached_connection", "mongo_connection"}
_SERVER_URI = re.compile(r"\b(?:async\+)?(?:redis|rediss|memcached|mongodb|valkey)(?:\+\w+)?://")

_current = {"prefix": f"{PREFIX}-setup"}


def _stand_in(module: str) -> None:
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        found = None
    if found is None:
        sys.modules.setdefault(module, types.ModuleType(module))


def _to_shm(uri: str) -> str:
    if os.environ.get("SHMWIN_PEER_STORAGE") == "memory":
        return uri
    for memory, shm in (("async+memory://", "async+shm://"), ("memory://", "shm://")):
        if uri.startswith(memory):
            return f"{shm}{_current['prefix']}"
    return uri


for _module in _SERVER_CLIENTS:  # before pytest imports the peer's conftest
    _stand_in(_module)


def pytest_configure(config: pytest.Config) -> None:
    import limits.storage

    real = limits.storage.storage_from_string

    def storage_from_string(storage_string: str, **options: Any) -> Any:
        return real(_to_shm(storage_string), **options)

    limits.storage.storage_from_string = storage_from_string  # what the test modules import
    for module in ("flask_limiter._extension", "slowapi.extension"):
        if module in sys.modules:  # imported before this plugin: rebind its name too
            sys.modules[module].storage_from_string = storage_from_string  # type: ignore[attr-defined]


def _needs_server(item: pytest.Item) -> bool:
    """A test of a server storage: by its fixtures, its parameters, or a URI in its body."""
    if _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    params = getattr(getattr(item, "callspec", None), "params", {})
    if any(isinstance(v, str) and _SERVER_URI.match(v) for v in params.values()):
        return True
    function = getattr(item, "function", None)
    return function is not None and bool(_SERVER_URI.search(inspect.getsource(function)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kept = [i for i in items if not _needs_server(i)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if _needs_server(i)])
        items[:] = kept


@pytest.fixture(autouse=True)
def _shm_prefix_per_test() -> Iterator[None]:
    """Each test's storages get their own segments, unlinked when it ends."""
    _current["prefix"] = f"{PREFIX}-{uuid.uuid4().hex[:8]}"
    yield
    for name in shmwin.names():
        if name.startswith(_current["prefix"] + "."):
            shmwin.unlink(name)


def pytest_sessionfinish(session: pytest.Session) -> None:
    left = [n for n in shmwin.names() if n.startswith(PREFIX)]
    for name in left:
        shmwin.unlink(name)
