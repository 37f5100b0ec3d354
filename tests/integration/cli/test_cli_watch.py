"""``shmwin watch`` under a real pseudo-terminal: the alternate screen, a hidden cursor,
frames that fit the terminal, and a terminal put back as it was however watch ends."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time

import pytest
from support.cli_support import CSI, ENV, cells

from shmwin import Limiter, Window

ENTER_ALT, LEAVE_ALT, HIDE, SHOW, HOME = "\x1b[?1049h", "\x1b[?1049l", "\x1b[?25l", "\x1b[?25h", "\x1b[H"
FRAME = re.compile(r"\x1b\[H(.*?)\x1b\[J", re.DOTALL)  # a frame: home, its lines, erase the rest

# runs `shmwin watch` through main(), then reports the terminal modes it left behind
WRAPPER = """
import sys, termios
from shmwin.inspector import snapshots as metrics
from shmwin.cli import main
fail_after = int(sys.argv[1])
if fail_after:
    real, calls = metrics.snapshot, []
    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) > fail_after:
            raise RuntimeError("the window went bad")
        return real(*args, **kwargs)
    metrics.snapshot = failing
try:
    rc = main(["watch", *sys.argv[2:]])
finally:
    lflag = termios.tcgetattr(0)[3]
    print(f"\\nMODES echo={bool(lflag & termios.ECHO)} icanon={bool(lflag & termios.ICANON)}", flush=True)
sys.exit(rc)
"""


class Watch:
    """``shmwin watch ARGS`` in a child whose terminal is a pty of ``cols`` x ``rows``."""

    def __init__(self, args: list[str], cols: int, rows: int, fail_after: int = 0, sigint: object = None):
        self.cols, self.rows = cols, rows
        self.seen = b""
        self.eof = False
        pid, fd = pty.fork()
        if pid == 0:  # pragma: no cover - the child
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            if sigint is not None:  # as its parent left it (kept across exec)
                signal.signal(signal.SIGINT, sigint)
            os.execve(sys.executable, [sys.executable, "-c", WRAPPER, str(fail_after), *args], ENV)
        self.pid, self.fd = pid, fd

    def _pump(self, timeout: float) -> None:
        """Read what the child wrote within ``timeout`` seconds; notice when it is gone."""
        if select.select([self.fd], [], [], timeout)[0]:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            self.eof = not chunk
            self.seen += chunk

    def read_until(self, needle: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            assert not self.eof and time.monotonic() < deadline, f"never saw {needle!r}: {self.seen[-800:]!r}"
            self._pump(0.5)

    def frames(self, count: int) -> list[str]:
        """Wait until ``count`` frames are drawn; every frame drawn so far."""
        deadline = time.monotonic() + 30
        while len(FRAME.findall(self.text)) < count:
            assert not self.eof and time.monotonic() < deadline, f"{count} frames? {self.seen[-800:]!r}"
            self._pump(0.5)
        return FRAME.findall(self.text)

    def finish(self) -> int:
        """Read everything until the child closes the terminal; its exit code."""
        deadline = time.monotonic() + 30
        while not self.eof:
            assert time.monotonic() < deadline, f"watch did not end: {self.seen[-800:]!r}"
            self._pump(0.5)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)

    @property
    def text(self) -> str:
        return self.seen.decode(errors="replace")


def check_frame(frame: str, cols: int, rows: int) -> list[str]:
    """A frame must fit: at most ``rows`` lines of at most ``cols`` cells, no stray escapes."""
    lines = CSI.sub("", frame).replace("\r", "").split("\n")
    assert "\x1b" not in CSI.sub("", frame), "an escape sequence other than ours reached the terminal"
    assert len(lines) <= rows, f"{len(lines)} lines on a terminal of {rows}"
    too_long = [line for line in lines if cells(line) > cols]
    assert not too_long, f"lines wider than {cols}: {too_long}"
    return lines


def check_restored(w: Watch) -> None:
    """The alternate screen was entered and left, the cursor hidden and shown again, and
    the terminal's modes are back to cooked with echo."""
    text = w.text
    assert text.index(ENTER_ALT) < text.index(HOME) and text.index(HIDE) < text.index(HOME)
    last_frame = text.rindex(HOME)
    assert text.rindex(LEAVE_ALT) > last_frame and text.rindex(SHOW) > last_frame
    assert "MODES echo=True icanon=True" in text


def quit_restored(w: Watch) -> None:
    """Quit with "q": the view exits 0 and gives the terminal back as it found it."""
    os.write(w.fd, b"q")
    assert w.finish() == 0
    check_restored(w)


@pytest.fixture
def windows(make_name):
    """A busy keyed window with long fields and keys, and a limiter of four rates."""
    api, login = make_name("api-" + "n" * 50), make_name("login")
    fields = ("requests_ok", "errors_upstream", "bytes")
    w = Window(api, resolutions=("1m/1s", "1h/1m", "1d/1h"), fields=fields, capacity=64)
    lim = Limiter(login, "10/second;1000/minute;100000/hour;1000000/day")
    for i, key in enumerate(("GET /" + "x" * 200, "日本語のキー", "evil\x1b[31mred", "POST /login")):
        w.add(10**9 * (i + 1), "bytes", key=key)
        w.add(i + 1, "requests_ok", key=key)
        lim.hit(key)
    yield api, login
    for x in (w, lim):
        x.unlink()
        x.close()


@pytest.mark.parametrize("cols,rows", [(80, 24), (203, 60)])
def test_watch_fits_the_terminal_and_restores_it_on_q(windows, cols, rows):
    api, login = windows
    for name in (api, login):
        w = Watch([name, "--interval", "0.2"], cols, rows)
        frames = w.frames(2)  # a second refresh, drawn in place
        for frame in frames:
            lines = check_frame(frame, cols, rows)
        assert "1h/1m" in frames[-1] or "1000/minute" in frames[-1]
        if cols > 200 and name == api:  # the room is used: a 60-bucket sparkline in full
            assert max(cells(line) for line in lines) > 120
        quit_restored(w)


def test_watch_restores_the_terminal_on_ctrl_c_sigterm_and_an_exception(windows):
    api, _ = windows
    w = Watch([api, "--interval", "0.2"], 80, 24)
    w.frames(1)
    os.write(w.fd, b"\x03")  # Ctrl-C typed on the terminal: SIGINT to its foreground group
    assert w.finish() == 0
    check_restored(w)

    # started with SIGINT ignored (a shell's background job, nohup-like runners): Python keeps
    # it ignored, so watch takes Ctrl-C itself
    w = Watch([api, "--interval", "0.2"], 80, 24, sigint=signal.SIG_IGN)
    w.frames(1)
    os.write(w.fd, b"\x03")
    assert w.finish() == 0
    check_restored(w)

    w = Watch([api, "--interval", "0.2"], 80, 24)
    w.frames(1)
    os.kill(w.pid, signal.SIGTERM)
    assert w.finish() == 128 + signal.SIGTERM
    check_restored(w)

    w = Watch([api, "--interval", "0.1"], 80, 24, fail_after=2)
    assert w.finish() == 1
    check_restored(w)
    after = w.text[w.text.rindex(LEAVE_ALT) :]
    assert "RuntimeError: the window went bad" in after  # printed on the normal screen


def test_watch_redraws_at_a_new_size(windows):
    api, _ = windows
    w = Watch([api, "--interval", "30"], 200, 40)  # a long interval: only SIGWINCH redraws soon
    w.frames(1)
    fcntl.ioctl(w.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # the kernel sends SIGWINCH
    frames = w.frames(2)
    check_frame(frames[-1], 80, 24)
    os.write(w.fd, b"q")
    assert w.finish() == 0


def test_watch_ends_when_the_window_is_removed(make_name):
    name = make_name("gone")
    with Window(name) as win:
        w = Watch([name, "--interval", "0.2"], 80, 24)
        w.frames(1)
        win.unlink()
        assert w.finish() == 0
        check_restored(w)
        assert "was removed" in w.text[w.text.rindex(LEAVE_ALT) :]


def test_watch_a_shedder_follows_its_requests_in_flight(make_name):
    """Live: a request begun in this process while watch runs shows up in the next frames;
    the host's CPU is measured from the first frame on; every frame fits 80 x 24."""
    from shmwin import Breaker
    from shmwin.overload.shedder import Shedder

    name, breaker_name = make_name("shop"), make_name("payments")
    shedder = Shedder(name, window="1h", buckets=60, cpu=lambda: 0)
    breaker = Breaker(breaker_name, window="1h", buckets=60)
    first = shedder.allow()
    try:
        w = Watch([name, "--interval", "0.2"], 80, 24)
        w.read_until("in flight 1 in 1 process")
        second = shedder.allow()
        w.read_until(f"in flight 2 in 1 process (pid {os.getpid()}: 2)")
        frames = w.frames(2)
        lines = check_frame(frames[-1], 80, 24)
        assert lines[1].startswith(f"{name} (shedder)")
        assert re.search(r"host cpu \d+\.\d%", frames[-1])
        quit_restored(w)
        for ticket in (first, second):
            assert ticket is not None
            ticket.done()

        for _ in range(6):
            breaker.reject()
        w = Watch([breaker_name, "--interval", "0.2"], 80, 24)
        w.read_until("drop ratio 0.143   accepts 0   total 6")  # (6 - 5) / 7
        breaker.reject()
        w.read_until("drop ratio 0.250   accepts 0   total 7")  # (7 - 5) / 8: redrawn
        check_frame(w.frames(1)[-1], 80, 24)
        os.write(w.fd, b"q")
        assert w.finish() == 0
    finally:
        for x in (shedder, breaker):
            x.unlink()
            x.close()


def test_watch_a_token_bucket_follows_its_keys_tokens(make_name):
    """Live: tokens taken while watch runs show in the next frames; every frame fits 80 x 24."""
    from shmwin import TokenBucket

    name = make_name("bucket")
    with TokenBucket(name, "1/hour", burst=5) as tb:
        assert tb.hit("a", 2)
        w = Watch([name, "--interval", "0.2"], 80, 24)
        w.read_until("1 key below a full bucket, 2 tokens taken in all")
        assert tb.hit("b", 5)
        w.read_until("2 keys below a full bucket, 7 tokens taken in all")
        lines = check_frame(w.frames(1)[-1], 80, 24)
        assert lines[1].startswith(f"{name} (token bucket)")
        quit_restored(w)
        tb.unlink()


def test_watch_an_apps_metrics_follows_its_samples(make_name):
    """``shmwin watch APP.metrics`` redraws what a scrape of the app serves (it once said the
    segment's header was corrupt): a counter incremented in another process while watch runs
    shows its new value in a later frame; every frame fits 80 x 24."""
    app = make_name("app")
    child = textwrap.dedent(f"""
        import sys
        from shmwin.integrations import prometheus as shp
        shp.multiprocess({app!r})
        from prometheus_client import Counter
        c = Counter("jobs", "jobs done", ["queue"])
        c.labels("mail").inc(float(sys.argv[1]))
    """)
    try:
        subprocess.run([sys.executable, "-c", child, "3"], check=True, env=ENV, timeout=60)
        w = Watch([f"{app}.metrics", "--interval", "0.2"], 80, 24)
        w.read_until('jobs_total{queue="mail"} 3.0')
        subprocess.run([sys.executable, "-c", child, "4"], check=True, env=ENV, timeout=60)
        w.read_until('jobs_total{queue="mail"} 7.0')
        lines = check_frame(w.frames(1)[-1], 80, 24)
        assert lines[1].startswith(f"{app}.metrics (prometheus_client metrics of app")
        quit_restored(w)
    finally:
        from shmwin.integrations import prometheus as shp

        shp.reset(app)
