"""Real gunicorn, 4 workers recycled mid-test: a 50/hour limit admits exactly 50 of 200."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from pathlib import Path

import pytest
from support.servers import Server, free_port, get, hammer, python_module

import shmwin
from shmwin import Limiter, Window

gunicorn_config = pytest.importorskip("gunicorn.config")

CONF = """
from shmwin.gunicorn import Hooks
shmwin_hooks = Hooks(limiters={{"{lim}": {{"rates": "50/hour", "capacity": 100}}}},
                     windows={{"{req}": {{"span": "1h", "buckets": 60, "fields": ("ok", "limited")}}}})
on_starting, child_exit, on_exit = shmwin_hooks.on_starting, shmwin_hooks.child_exit, shmwin_hooks.on_exit
"""


def _gunicorn(name: str, tmp_path, conf: str | None) -> Server:
    port = free_port()
    args = ["-w", "4", "--max-requests", "15", "--max-requests-jitter", "5", "-b", f"127.0.0.1:{port}"]
    if hasattr(gunicorn_config, "ControlSocket"):  # gunicorn >= 24: one fixed socket path per user
        args.append("--no-control-socket")
    if conf is not None:
        (tmp_path / "gunicorn.conf.py").write_text(conf)
        args = ["-c", str(tmp_path / "gunicorn.conf.py"), *args]
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_LOG_DIR": str(tmp_path)}
    return Server(python_module("gunicorn", *args, "wsgi_limited:app"), port, env)


def _check_exact(server: Server, name: str, kill_one: bool = False) -> None:
    statuses, pids = hammer(server.port, 100)
    killed = None
    if kill_one:  # a live worker that served requests (so owns a stripe) dies without cleaning up
        killed = next((int(pid) for pid in sorted(pids) if _kill(int(pid))), None)
        assert killed, "no worker left to kill"
    more, more_pids = hammer(server.port, 100)
    statuses += more
    assert statuses == {200: 50, 429: 150}, server.output()
    assert len(pids | more_pids) > 4, "workers were not recycled during the test"
    with Window.attach(name + "-req") as w:
        assert w.totals() == {"ok": 50, "limited": 150}  # the killed worker's counts stayed
        if killed:  # once reaped, its stripe is adopted by a newcomer or freed by child_exit
            _wait_for(lambda: killed not in [pid for _, pid, _ in w.stripe_owners()])
    with Limiter.attach(name + "-lim") as lim:
        assert lim.stats("client").used == 50


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # already recycled
        return False
    return True


def test_with_the_hooks(name, tmp_path):
    conf = textwrap.dedent(CONF).format(lim=name + "-lim", req=name + "-req")
    server = _gunicorn(name, tmp_path, conf)
    try:
        assert {name + "-lim", name + "-req"} <= set(shmwin.names())  # created by the master
        _check_exact(server, name, kill_one=True)
        assert "shmwin: shared segments ready" in server.output()
    finally:
        assert server.stop() == 0
    assert name + "-lim" not in shmwin.names() and name + "-req" not in shmwin.names()  # on_exit


def test_without_the_hooks_lazy_create_or_attach(name, tmp_path):
    server = _gunicorn(name, tmp_path, None)
    try:
        _check_exact(server, name)
    finally:
        server.stop()
        shmwin.unlink(name + "-lim")
        shmwin.unlink(name + "-req")


def _wait_for(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _read_pid(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_usr2_reexec_keeps_the_segments_and_the_last_master_unlinks(name, tmp_path):
    conf = textwrap.dedent(CONF).format(lim=name + "-lim", req=name + "-req")
    conf += f"pidfile = {str(tmp_path / 'gunicorn.pid')!r}\n"
    server = _gunicorn(name, tmp_path, conf)
    pidfile = tmp_path / "gunicorn.pid"
    try:
        old_master = server.proc.pid
        _wait_for(lambda: _read_pid(pidfile) == old_master)
        assert hammer(server.port, 20)[0] == {200: 20}
        os.kill(old_master, signal.SIGUSR2)  # re-exec: a new master beside the old one
        next_pidfile = Path(f"{pidfile}.2")  # where a re-executed master writes until promoted
        _wait_for(lambda: _read_pid(next_pidfile) not in (0, old_master))
        new_master = _read_pid(next_pidfile)
        os.kill(old_master, signal.SIGTERM)  # retire the old master and its workers
        server.proc.wait(30)
        assert {name + "-lim", name + "-req"} <= set(shmwin.names())  # not unlinked by the old one
        _wait_for(lambda: get(server.port)[0] in (200, 429))
        statuses, _ = hammer(server.port, 60)
        assert statuses == {200: 29, 429: 31}  # the count went on across the re-exec: 20 + 1 + 29 = 50
        _wait_for(lambda: _read_pid(pidfile) == new_master)  # promoted once the old master is gone
        os.kill(new_master, signal.SIGTERM)
        _wait_for(lambda: not os.path.exists(f"/proc/{new_master}"))
        _wait_for(lambda: name + "-lim" not in shmwin.names())  # the last master unlinked
        assert name + "-req" not in shmwin.names()
    finally:
        server.stop()
        for pid in (_read_pid(pidfile), _read_pid(Path(f"{pidfile}.2"))):
            if pid and os.path.exists(f"/proc/{pid}"):
                os.kill(pid, signal.SIGKILL)
        shmwin.unlink(name + "-lim")
        shmwin.unlink(name + "-req")
