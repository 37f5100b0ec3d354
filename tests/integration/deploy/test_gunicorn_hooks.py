"""The gunicorn hooks as functions, with stand-in server objects: what each one does (real
gunicorn servers: test_gunicorn.py, and test_trust.py for --user/--group)."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
from types import SimpleNamespace

import pytest
from support.rootenv import NOBODY, needs_root

import shmwin
from shmwin import Limiter, Window
from shmwin.backends.shm.segment import path_of
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


# -- a shm:// storage's segments, by prefix ------------------------------------------------------


@pytest.mark.parametrize("uri", ["shm://myapp", "shm://myapp?capacity=100", "shm:///a.b/", "shm://"])
def test_a_storage_uri_names_the_prefix_its_storage_uses(uri):
    storage = pytest.importorskip("shmwin.integrations.limits").ShmStorage(uri)
    assert Hooks(prefixes=[uri]).prefixes == [storage.prefix]
    assert Hooks(prefixes=["async+" + uri]).prefixes == [storage.prefix]


@pytest.mark.parametrize("bad", ["redis://localhost", "a b", "", "api#1", "shm://a b"])
def test_a_bad_prefix_stops_the_config(bad):
    with pytest.raises(ValueError):
        Hooks(prefixes=[bad])


def test_on_exit_removes_a_storage_s_segments_by_the_usr2_rules(make_name):
    prefix = make_name("app")
    mine = [f"{prefix}.moving.5.60", f"{prefix}.fixed.60"]
    for n in [*mine, f"{prefix}2.moving.5.60"]:
        Window(n).close()
    hooks = Hooks(prefixes=[f"shm://{prefix}?capacity=100"])
    hooks.on_exit(_server(reexec_pid=os.getpid()))  # a live USR2 successor still uses them
    assert set(mine) <= set(shmwin.names())
    server = _server()
    hooks.on_exit(server)
    assert not set(mine) & set(shmwin.names())
    assert f"{prefix}2.moving.5.60" in shmwin.names()  # another storage's
    assert server.log.lines == [f"shmwin: removed 2 segment(s) of storage {prefix!r}"]
    shmwin.unlink(f"{prefix}2.moving.5.60")


# -- gunicorn's --user / --group -----------------------------------------------------------------


def _server_for(uid: int, gid: int) -> SimpleNamespace:
    server = _server()
    server.cfg = SimpleNamespace(uid=uid, gid=gid)
    return server


def test_workers_running_as_this_user_change_nothing(make_name):
    win = make_name("req")
    hooks = Hooks(windows={win: {"fields": ("ok",)}})
    hooks.on_starting(_server_for(os.geteuid(), os.getegid()))
    st = os.stat(path_of(win))
    assert (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    hooks.on_exit(_server())


@needs_root
def test_the_master_creates_for_the_workers_user_and_group(make_name):
    win, lim = make_name("req"), make_name("lim")
    hooks = Hooks(windows={win: {"fields": ("ok",)}}, limiters={lim: "5/minute"})
    server = _server_for(NOBODY, NOBODY)
    hooks.on_starting(server)
    for n in (win, lim):
        st = os.stat(path_of(n))
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (NOBODY, NOBODY, 0o600)
    hooks.on_starting(server)  # a second master (HUP, USR2) attaches: it trusts the workers' user
    hooks.child_exit(server, SimpleNamespace(pid=1))
    assert not [line for line in server.log.lines if "could not" in line]
    plain = _server()  # without --user the master does not trust nobody's segments
    hooks.child_exit(plain, SimpleNamespace(pid=1))
    assert f"owned by uid {NOBODY}" in plain.log.lines[0]
    hooks.on_exit(server)
    assert win not in shmwin.names() and lim not in shmwin.names()


def test_the_master_imports_what_workers_import_at_first_use(make_name):
    """A worker forked from the master may import nothing more where it cannot read the
    interpreter's library (--user, a Python under /root): numpy (a read), uuid (a segment's
    creation), socket and asyncio are imported by on_starting, in the master."""
    code = (
        "import sys; from types import SimpleNamespace; from shmwin.gunicorn import Hooks\n"
        "assert 'numpy' not in sys.modules and 'asyncio' not in sys.modules\n"
        "Hooks().on_starting(SimpleNamespace(log=None, reexec_pid=0, master_pid=0))\n"
        "print(sorted(m for m in ('numpy', 'uuid', 'socket', 'asyncio') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split("\n")[0] == "['asyncio', 'numpy', 'socket', 'uuid']", out.stderr
