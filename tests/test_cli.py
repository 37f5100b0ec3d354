"""The `shmwin` command, run as a user runs it: subprocesses against live segments."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest
from helpers import ROOT, run_python, stop_inside, wait_stopped

import shmwin
from shmwin import Limiter, Window, layout

ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "shmwin", *args], capture_output=True, text=True, env=ENV, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def _keep_adding(name: str, stop) -> None:
    w = Window.attach(name)
    while not stop.is_set():
        w.add(1, "ok")
    w.close()


@pytest.fixture
def busy(name):
    """A window that another process is writing while the test runs the CLI."""
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    w = Window(name, resolutions=("1m/1s", "1h/1m"), fields=("ok", "err"))
    w.add(7, "err")
    writer = ctx.Process(target=_keep_adding, args=(name, stop))
    writer.start()
    yield w, stop, writer
    stop.set()
    writer.join(30)
    w.close()
    w.unlink()


def test_ls_and_show_against_a_live_writer(busy, name):
    w, stop, writer = busy
    listing = {row["name"]: row for row in json.loads(cli("ls", "--json").stdout)}
    row = listing[name]
    assert row["kind"] == "window" and row["fields"] == ["ok", "err"]
    assert row["resolutions"] == ["1m/1s", "1h/1m"] and row["nbytes"] == w.nbytes
    assert row["creator_pid"] == os.getpid() and row["creator_alive"] is True
    assert row["stripes_in_use"] >= 1 and row["stripes"] == 64 and row["error"] is None
    assert name in cli("ls").stdout
    live = json.loads(cli("show", name, "--json").stdout)  # while the writer is busy
    assert live["resolutions"][0]["totals"]["err"] == 7
    stop.set()
    writer.join(30)
    snap = json.loads(cli("show", name, "--json").stdout)
    by_res = {r["resolution"]: r for r in snap["resolutions"]}
    assert by_res["1m/1s"]["totals"] == w.totals(resolution=0)
    assert by_res["1h/1m"]["totals"] == w.totals(resolution=1) == w.totals()
    assert len(by_res["1m/1s"]["series"]["ok"]) == 60
    assert sum(by_res["1h/1m"]["series"]["ok"]) == w.total("ok")
    one = json.loads(cli("show", name, "--last", "10s", "--json").stdout)
    assert [r["resolution"] for r in one["resolutions"]] == ["1m/1s"]
    text = cli("show", name).stdout
    assert "ok" in text and "1h/1m" in text and any(ch in text for ch in "▁▂▃▄▅▆▇█")


def test_export_prometheus_parses_back_to_the_windows_totals(busy, name):
    from prometheus_client.parser import text_string_to_metric_families

    w, stop, writer = busy
    stop.set()
    writer.join(30)
    families = {
        f.name: f
        for f in text_string_to_metric_families(cli("export", name, "--format", "prometheus").stdout)
    }
    totals = {
        (s.labels["resolution"], s.labels["field"]): s.value for s in families["shmwin_window_total"].samples
    }
    assert totals == {
        ("1m/1s", "ok"): w.total("ok", resolution=0), ("1m/1s", "err"): 7,
        ("1h/1m", "ok"): w.total("ok", resolution=1), ("1h/1m", "err"): 7,
    }  # fmt: skip
    rates = families["shmwin_window_rate_per_second"].samples
    assert all(s.value >= 0 for s in rates) and len(rates) == 4
    assert json.loads(cli("export", name).stdout)["resolutions"][1]["totals"] == w.totals()


def test_keyed_window_and_limiter_show_their_keys(make_name):
    routes, login = make_name("routes"), make_name("login")
    with Window(routes, fields=("req",), capacity=32) as w, Limiter(login, "5/minute") as lim:
        for route, n in (("GET /a", 3), ("GET /b", 9), ("POST /c", 1)):
            w.add(n, key=route)
        for _ in range(7):
            lim.hit("203.0.113.7")
        snap = json.loads(cli("show", routes, "--json").stdout)
        assert snap["top"] == [["GET /b", 9], ["GET /a", 3], ["POST /c", 1]] and snap["keys"] == 3
        one = json.loads(cli("show", routes, "--key", "GET /a", "--json").stdout)
        assert one["resolutions"][0]["totals"] == {"req": 3}
        shown = json.loads(cli("show", login, "--json").stdout)
        assert shown["kind"] == "limiter" and shown["resolutions"][0]["resolution"] == "5/minute"
        assert shown["top"] == [["203.0.113.7", 5]]
        from prometheus_client.parser import text_string_to_metric_families

        text = cli("export", routes, "--format", "prometheus").stdout
        keyed = [
            s
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if f.name == "shmwin_window_total"
        ]
        assert {s.labels["key"]: s.value for s in keyed} == {"GET /a": 3, "GET /b": 9, "POST /c": 1}
        listing = {r["name"]: r for r in json.loads(cli("ls", "--json").stdout)}
        assert listing[routes]["keys"] == 3 and listing[routes]["capacity"] == 32
        assert listing[login]["resolutions"] == ["5/minute"]
        w.unlink()
        lim.unlink()


def test_unreadable_segments_are_explained_not_fatal(make_name):
    junk, future = make_name("junk"), make_name("future")
    with open(shmwin.segment.path_of(junk), "wb") as f:
        f.write(b"\x07" * 8192)
    Window(future).close()
    fd = os.open(shmwin.segment.path_of(future), os.O_RDWR)
    os.pwrite(fd, (layout.FORMAT_VERSION + 1).to_bytes(4, "little"), 8)
    os.close(fd)
    listing = {r["name"]: r for r in json.loads(cli("ls", "--json").stdout)}
    assert "CorruptSegmentError" in listing[junk]["error"]
    assert "version" in listing[future]["error"]
    assert f"{junk}" in cli("ls").stdout and "unreadable" in cli("ls").stdout
    bad = cli("show", future, check=False)
    assert bad.returncode == 2 and "format version" in bad.stderr and "Traceback" not in bad.stderr
    missing = cli("show", make_name("missing"), check=False)
    assert missing.returncode == 2 and "no window named" in missing.stderr
    gc = cli("gc", "--dry-run").stdout
    assert f"skip {junk}" in gc
    assert cli("rm", junk, future).stdout.count("removed") == 2
    assert cli("rm", junk, check=False).returncode == 1


def test_gc_removes_only_dead_and_idle(make_name):
    old, fresh, mine = make_name("old"), make_name("fresh"), make_name("mine")
    # a dead creator whose last write is 30 s behind the real clock, with a 2 s span
    run_python(
        """
        import sys, time
        from shmwin import ManualClock, Window
        then = ManualClock(max(time.monotonic_ns() - 30 * 10**9, 0))
        Window(sys.argv[1], span=2, buckets=2, clock=then).add(1)
        Window(sys.argv[2]).add(1)
        """,
        old,
        fresh,
    )
    with Window(mine) as w:
        w.add(1)
        dry = cli("gc", "--dry-run").stdout
        assert f"would remove {old}" in dry and fresh not in dry and mine not in dry
        assert old in shmwin.names()  # a dry run removes nothing
        assert f"removed {old}" in cli("gc").stdout
        assert old not in shmwin.names() and {fresh, mine} <= set(shmwin.names())
        w.unlink()
    shmwin.unlink(fresh)


def test_the_inspector_never_waits_on_a_workers_lock(make_name):
    name = make_name("locked")
    ctx = mp.get_context("fork")
    with Window(name, mode="locked", lock_timeout=30) as w:
        w.add(5)
        holding = ctx.Event()
        holders = [ctx.Process(target=stop_inside, args=(name, "add_locked", holding))]  # holds the row lock
        holders[0].start()
        assert holding.wait(30)
        wait_stopped(holders[0].pid)
        started = time.monotonic()
        totals = json.loads(cli("show", name, "--json").stdout)["resolutions"][0]["totals"]
        assert totals in ({"count": 5}, {"count": 6})  # the stopped add may be visible: it is one store
        cli("ls")
        cli("export", name, "--format", "prometheus")
        assert time.monotonic() - started < 20  # three runs, none waited for the 30 s lock timeout
        for p in holders:
            p.kill()
            p.join()
        w.unlink()


def test_every_command_has_help_with_an_example():
    for command in ("ls", "show", "watch", "export", "rm", "gc"):
        out = cli(command, "--help").stdout
        assert "example:" in out and f"shmwin {command}" in out, command
    assert "watch" in cli("--help").stdout


def _read_until(fd: int, needle: bytes, timeout: float = 30) -> bytes:
    seen, deadline = b"", time.monotonic() + timeout
    while needle not in seen:
        assert time.monotonic() < deadline, f"never saw {needle!r}; got {seen[-500:]!r}"
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen


def _watch_in_pty(name: str) -> tuple[int, int]:
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - child
        os.environ["PYTHONPATH"] = str(ROOT)
        os.execv(sys.executable, [sys.executable, "-m", "shmwin", "watch", name, "--interval", "0.2"])
    return pid, fd


def test_watch_renders_and_quits_on_q(busy, name):
    pid, fd = _watch_in_pty(name)
    try:
        _read_until(fd, b"(q to quit)")
        screen = _read_until(fd, b"(q to quit)")  # a second refresh, in place
        assert b"\x1b[H\x1b[2J" in screen and name.encode() in screen and b"1h/1m" in screen
        os.write(fd, b"q")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        os.close(fd)


def test_watch_quits_on_ctrl_c_and_when_the_window_disappears(make_name):
    a, b = make_name("a"), make_name("b")
    with Window(a) as wa, Window(b) as wb:
        pid, fd = _watch_in_pty(a)
        _read_until(fd, b"(q to quit)")
        os.kill(pid, signal.SIGINT)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        os.close(fd)
        pid, fd = _watch_in_pty(b)
        _read_until(fd, b"(q to quit)")
        wb.unlink()
        assert b"was removed" in _read_until(fd, b"was removed")
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        os.close(fd)
        wa.unlink()


def test_console_script_is_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "shmwin")
    assert os.path.exists(exe)
    assert "watch" in subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30).stdout
