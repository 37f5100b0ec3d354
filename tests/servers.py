"""Starting real servers on loopback for end-to-end tests, and driving requests at them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "tests" / "apps"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A server process started with ``args`` that serves on ``port``; stopped with SIGTERM."""

    def __init__(self, args: list[str], port: int, env: dict[str, str], cwd: Path = APPS):
        full_env = dict(os.environ, PYTHONPATH=f"{APPS}{os.pathsep}{ROOT}", **env)
        self.port = port
        # O_APPEND: the server's writes land at the end even after output() seeks to read
        self.log = open(Path(env.get("SHMWIN_LOG_DIR", "/tmp")) / f"server-{port}.log", "a+")  # noqa: SIM115
        self.proc = subprocess.Popen(args, cwd=cwd, env=full_env, stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.output()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server not ready after {timeout}s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def get(port: int, path: str = "/") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def hammer(port: int, requests: int, path: str = "/", threads: int = 8) -> tuple[Counter[int], set[str]]:
    """Send ``requests`` GETs from ``threads`` threads; status counts and response bodies."""
    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(lambda _: get(port, path), range(requests)))
    return Counter(status for status, _ in results), {body for _, body in results}
