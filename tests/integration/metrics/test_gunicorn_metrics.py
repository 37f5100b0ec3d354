"""Real gunicorn, 4 workers recycled (max_requests) about a dozen times and one SIGKILLed
mid-request, its prometheus_client metrics in shmwin's shared memory (tests/apps/wsgi_metrics.py):
counts exact, live gauges without the dead, every scrape and ``shmwin export`` the same text,
and ``promtool`` accepting it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.servers import ROOT, Server, free_port, get, python_module

import shmwin.integrations.prometheus as shp

gunicorn_config = pytest.importorskip("gunicorn.config")
pytestmark = [pytest.mark.integration]

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, float("inf"))
PER_WORKER = "15"  # --max-requests (with a jitter of 5): 240 requests recycle workers 12+ times
CONF = """
from shmwin.gunicorn import Hooks
shmwin_hooks = Hooks(reset_metrics=[{app!r}])
on_starting, child_exit, on_exit = shmwin_hooks.on_starting, shmwin_hooks.child_exit, shmwin_hooks.on_exit
"""


def _gunicorn(app: str, tmp_path: Path, *extra: str) -> Server:
    port = free_port()
    (tmp_path / "gunicorn.conf.py").write_text(textwrap.dedent(CONF).format(app=app))
    args = ["-c", str(tmp_path / "gunicorn.conf.py"), "-w", "4", "--max-requests", PER_WORKER,
            "--max-requests-jitter", "5", "-b", f"127.0.0.1:{port}", *extra]  # fmt: skip
    if hasattr(gunicorn_config, "ControlSocket"):  # gunicorn >= 24: one fixed socket path per user
        args.append("--no-control-socket")
    env = {"SHMWIN_TEST_NAME": app, "SHMWIN_LOG_DIR": str(tmp_path)}
    return Server(python_module("gunicorn", *args, "wsgi_metrics:app"), port, env)


def _work(port: int, numbers: range) -> set[int]:
    """GET /work?i=N for each N (8 at a time): the pids that answered."""
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: get(port, f"/work?i={i}"), numbers))
    assert {status for status, _ in answers} == {200}, answers[:3]
    return {int(body) for _, body in answers}


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}  # fmt: skip


def _without(text: str, *families: str) -> str:
    """The text less the lines of these families (gauges a recycled worker's start writes)."""
    return "\n".join(line for line in text.splitlines() if not any(f in line for f in families))


def _hang(port: int, tmp_path: Path) -> int:
    """A request that stays in flight: the pid of the worker that holds it."""
    def request() -> None:
        with contextlib.suppress(OSError):  # its worker is killed: the connection drops
            get(port, "/hang")

    threading.Thread(target=request, daemon=True).start()
    marker = tmp_path / "hung.pid"
    deadline = time.monotonic() + 30
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the /hang request never reached a worker"
        time.sleep(0.05)
    return int(marker.read_text())


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _expected_buckets(numbers: range) -> dict[str, float]:
    observed = [(i % 7) / 10 for i in numbers]
    return {("+Inf" if b == float("inf") else repr(b)): float(sum(v <= b for v in observed)) for b in BUCKETS}


def test_gunicorn_recycled_and_killed_workers(app, tmp_path):
    value = shp.value_class(app)
    stale = value("counter", "http_requests", "http_requests_total", ["route"], ["work"], "Requests served")
    stale.inc(1000)  # a previous run's count: Hooks(reset_metrics=[app]) removes it at master start
    server = _gunicorn(app, tmp_path)
    try:
        pids = _work(server.port, range(0, 120))
        hung = _hang(server.port, tmp_path)
        _wait(lambda: _samples(get(server.port, "/metrics")[1]).get(("inflight", ())) == 1.0,
              "the hung request is not in flight")  # fmt: skip
        os.kill(hung, signal.SIGKILL)  # mid-request: its in-flight +1 is never given back
        _wait(lambda: _gone(hung), "the killed worker was not reaped")
        pids |= _work(server.port, range(120, 240))

        dead = {pid for pid in pids | {hung} if _gone(pid)}  # before the scrapes: none may be listed live
        scrapes = [get(server.port, "/metrics")[1] for _ in range(6)]  # from whichever workers answer
        exported = subprocess.run([sys.executable, "-m", "shmwin", "export", "--metrics", app], cwd=ROOT,
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
    finally:
        assert server.stop() == 0
    try:
        assert len(pids) >= 12, f"workers were recycled {len(pids) - 4} times, not ~10"
        texts = {_without(t, "worker_up", "worker_started") for t in [*scrapes, exported]}
        assert len(texts) == 1, "scrapes from different workers and `shmwin export` differ"
        samples = _samples(exported)
        assert samples[("http_requests_total", (("route", "work"),))] == 240.0  # exact, recycled and killed
        for bound, count in _expected_buckets(range(240)).items():
            labels = (("le", bound), ("route", "work"))
            assert samples[("http_request_duration_seconds_bucket", labels)] == count
        assert samples[("http_request_duration_seconds_count", (("route", "work"),))] == 240.0
        assert samples[("inflight", ())] == 0.0  # livesum: the killed worker's +1 left with it
        up = {int(dict(labels)["pid"]) for (name, labels) in samples if name == "worker_up"}
        assert hung in dead and len(dead) >= 8 and not up & dead and len(up) <= 4  # liveall: the live only
        started = {int(dict(labels)["pid"]) for (name, labels) in samples if name == "worker_started"}
        assert pids | {hung} <= started  # mode "all": every lifetime stays, dead or alive
        promtool = shutil.which("promtool")
        if promtool is None:
            pytest.skip("promtool is not installed (scripts/system-packages)")
        check = subprocess.run([promtool, "check", "metrics"], input=exported, capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        shp.reset(app)


def test_a_preloaded_app_is_reset_before_its_metrics_are_made(app, tmp_path):
    """--preload imports the app (and makes its metrics) in the master before on_starting: the
    reset comes right before its first metric, so the workers it forks count into the fresh
    segment (every request failed with WindowClosedError once, and nothing was scraped)."""
    value = shp.value_class(app)
    value("counter", "http_requests", "http_requests_total", ["route"], ["work"], "Requests served").inc(1000)
    for run in range(2):  # the second start resets the first one's counts too
        server = _gunicorn(app, tmp_path, "--preload")
        try:
            _work(server.port, range(30))
            exported = subprocess.run([sys.executable, "-m", "shmwin", "export", "--metrics", app], cwd=ROOT,
                                      capture_output=True, text=True, check=True).stdout  # fmt: skip
        finally:
            assert server.stop() == 0, server.output()[-2000:]
        assert _samples(exported)[("http_requests_total", (("route", "work"),))] == 30.0, (run, exported)
