"""Flask-Limiter under gunicorn and slowapi under uvicorn on shm://, and a bare ASGI app:
with several workers, exactly the limit passes."""

from __future__ import annotations

import pytest
from servers import Server, free_port, hammer, python_module

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


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_slowapi_under_uvicorn(name, tmp_path, strategy):
    pytest.importorskip("slowapi")
    port = free_port()
    args = python_module(
        "uvicorn", "fastapi_limited:app", "--workers", "3", "--port", str(port), "--log-level", "warning"
    )
    try:
        statuses, pids = _run(args, port, name, tmp_path, strategy)
        assert statuses == {200: 50, 429: 150}
        assert len(pids) > 1
    finally:
        assert _unlink_prefix(name)


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
