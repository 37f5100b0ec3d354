"""Flask-Limiter under gunicorn and slowapi under uvicorn on shm://, limits.aio on
async+shm:// under uvicorn, and a bare ASGI app: with several workers, exactly the limit
passes; workers that never used the limit answer from shared memory."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.servers import Server, free_port, hammer, python_module

import shmwin

STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]


def _unlink_prefix(name: str) -> list[str]:
    mine = [n for n in shmwin.names() if n == name or n.startswith(name + ".")]
    for n in mine:
        shmwin.unlink(n)
    return mine


def _run(
    args: list[str], port: int, name: str, tmp_path, strategy: str = ""
) -> tuple[dict[int, int], set[str]]:
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_STRATEGY": strategy, "SHMWIN_LOG_DIR": str(tmp_path)}
    server = Server(args, port, env)
    try:
        statuses, pids = hammer(server.port, 200)
        # A worker still importing its app accepts nothing yet, and one worker may have answered
        # all 200: more batches, every request refused (the limit is spent for all of them),
        # until a second worker has answered.
        deadline = time.monotonic() + 30
        while len(pids) < 2 and statuses[200] == 50 and time.monotonic() < deadline:
            more, more_pids = hammer(server.port, 24)
            assert more == {429: 24}, server.output()
            pids |= more_pids
            time.sleep(0.05)
        return dict(statuses), pids
    finally:
        server.stop()


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_flask_limiter_under_gunicorn(name, tmp_path, strategy):
    pytest.importorskip("flask_limiter")
    port = free_port()
    args = python_module(
        "gunicorn", "-w", "4", "--max-requests", "30", "-b", f"127.0.0.1:{port}", "flask_limited:app"
    )
    try:
        statuses, pids = _run(args, port, name, tmp_path, strategy)
        assert statuses == {200: 50, 429: 150}
        assert len(pids) > 1
    finally:
        assert _unlink_prefix(name)  # the storage really created its segments


def _under_uvicorn(app: str, name: str, tmp_path: Path, strategy: str) -> None:
    """``app`` served by 3 uvicorn workers: 50 of 200 requests admitted, across workers."""
    port = free_port()
    args = python_module("uvicorn", app, "--workers", "3", "--port", str(port), "--log-level", "warning")
    try:
        statuses, pids = _run(args, port, name, tmp_path, strategy)
        assert statuses == {200: 50, 429: 150}
        assert len(pids) > 1
    finally:
        assert _unlink_prefix(name)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_slowapi_under_uvicorn(name, tmp_path, strategy):
    pytest.importorskip("slowapi")
    _under_uvicorn("fastapi_limited:app", name, tmp_path, strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_limits_aio_on_async_shm_under_uvicorn(name, tmp_path, strategy):
    pytest.importorskip("fastapi")
    _under_uvicorn("fastapi_aio_limited:app", name, tmp_path, strategy)


def _get_with_headers(port: int) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fresh_gunicorn_workers_answer_from_shared_memory(name, tmp_path, strategy):
    """Workers recycled every 7 requests are fresh processes that never used the limit. One
    client's requests, one after the other, must still see 49, 48, ..., 0 remaining and then
    429s with a Retry-After; with ``deduct_when`` (test first, count after the response),
    exactly 50 pass."""
    pytest.importorskip("flask_limiter")
    port = free_port()
    args = python_module(
        "gunicorn", "-w", "2", "--max-requests", "7", "-b", f"127.0.0.1:{port}", "flask_limited:app"
    )
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_STRATEGY": strategy, "SHMWIN_LOG_DIR": str(tmp_path),
           "SHMWIN_DEDUCT": "1"}  # fmt: skip
    server = Server(args, port, env)
    try:
        answers = [_get_with_headers(port) for _ in range(60)]
    finally:
        server.stop()
        assert _unlink_prefix(name)
    assert [status for status, _ in answers] == [200] * 50 + [429] * 10
    assert [int(h["X-RateLimit-Remaining"]) for _, h in answers] == [*range(49, -1, -1)] + [0] * 10
    assert (
        len({h["X-RateLimit-Reset"] for _, h in answers[:50]}) <= 2
    )  # the oldest hit's (a second's rounding)
    assert all(0 < int(h["Retry-After"]) <= 86400 + 86400 // 20 + 1 for _, h in answers[50:])


def test_plain_asgi_limiter_under_uvicorn_workers(name, tmp_path):
    port = free_port()
    args = python_module(
        "uvicorn", "asgi_limited:app", "--workers", "3", "--port", str(port), "--log-level", "warning"
    )
    try:
        statuses, pids = _run(args, port, name, tmp_path)
        assert statuses == {200: 50, 429: 150}
        assert len(pids) > 1  # the spawned workers all served, through one shared limit
    finally:
        assert _unlink_prefix(name)
