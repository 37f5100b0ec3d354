"""The gunicorn hooks as functions, with stand-in server objects: what each one does."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from types import SimpleNamespace

import pytest

import shmwin
from shmwin import Limiter, Window
from shmwin.gunicorn import Hooks


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    error = info


def _server(reexec_pid: int = 0, master_pid: int = 0) -> SimpleNamespace:
    return SimpleNamespace(log=_Log(), reexec_pid=reexec_pid, master_pid=master_pid)


def _add_then_wait(name: str, ready) -> None:
    w = Window.attach(name)  # held, as a worker holds it: a dropped Window hands its stripe back
    w.add(3)
    ready.set()
    signal.pause()


def test_lifecycle(make_name):
    win, lim = make_name("req"), make_name("lim")
    hooks = Hooks(windows={win: {"span": 60, "fields": ("ok",)}}, limiters={lim: "5/minute"})
    server = _server()
    hooks.on_starting(server)
    assert {win, lim} <= set(shmwin.names())
    assert Limiter(lim, "5/minute").hit("k")  # the app opens the same names

    ctx = mp.get_context("fork")
    ready = ctx.Event()
    worker = ctx.Process(target=_add_then_wait, args=(win, ready))
    worker.start()
    assert ready.wait(30)
    os.kill(worker.pid, signal.SIGKILL)
    worker.join()
    hooks.child_exit(server, SimpleNamespace(pid=worker.pid))
    assert any(f"freed 1 stripe(s) of {win!r}" in line for line in server.log.lines)
    with Window.attach(win) as w:
        assert w.stripe_owners() == [] and w.total() == 3  # freed, counts kept

    hooks.on_exit(_server(reexec_pid=os.getpid()))  # a live USR2 successor: keep them
    hooks.on_exit(_server(master_pid=os.getpid()))  # a live predecessor: keep them
    assert {win, lim} <= set(shmwin.names())
    hooks.on_exit(_server(master_pid=worker.pid))  # the predecessor is dead: we are the last
    assert win not in shmwin.names() and lim not in shmwin.names()


def test_on_starting_refuses_a_geometry_mismatch(make_name):
    win = make_name("req")
    with Window(win, span=60, fields=("ok",)):
        with pytest.raises(shmwin.GeometryMismatchError):
            Hooks(windows={win: {"span": 30, "fields": ("ok",)}}).on_starting(_server())
        shmwin.unlink(win)


def test_child_exit_never_raises(make_name):
    server = _server()
    Hooks(windows={make_name("missing"): {}}).child_exit(server, SimpleNamespace(pid=1))
    assert "could not reclaim" in server.log.lines[0]
