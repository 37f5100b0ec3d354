"""``shmwin watch``: a live view, redrawn in place in the terminal's alternate screen.

The terminal is put back as it was however watch ends: ``q``, Ctrl-C, SIGTERM or SIGHUP,
the window disappearing, or an exception (whose message then prints on the normal
screen, where it stays readable). Each frame fits the terminal's current size, read
again at every refresh and at once on SIGWINCH.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

from .text import clip

ENTER = "\x1b[?1049h\x1b[?25l"  # alternate screen, cursor hidden
LEAVE = "\x1b[?25h\x1b[?1049l"  # cursor shown, main screen back
HOME, ERASE_LINE, ERASE_BELOW = "\x1b[H", "\x1b[2K", "\x1b[J"
QUIT_KEYS = ("q", "Q")


def watch(
    render: Callable[[int], list[str]],
    interval_s: float,
    out: TextIO,
    title: str,
    gone: Callable[[], str | None] = lambda: None,
) -> int:
    """Draw ``render(width)`` every ``interval_s`` until a quit key, Ctrl-C or ``gone()``
    says why the view ended (printed after the terminal is restored)."""
    ended: str | None = None
    try:
        with Terminal(out, sys.stdin) as term:
            while True:
                ended = gone()
                if ended:
                    break
                cols, rows = term.size()
                status = f"{title}  {time.strftime('%H:%M:%S')}  every {interval_s:g}s  q quits"
                term.draw([clip(status, cols), *render(cols)], cols, rows)
                if term.wait(interval_s) in QUIT_KEYS:
                    break
    except KeyboardInterrupt:
        pass
    if ended:
        out.write(ended + "\n")
    return 0


class Terminal:
    """The alternate screen, a hidden cursor and single-key input, while inside ``with``.
    Not a terminal (a pipe, a file): frames are written one after another, no escapes."""

    def __init__(self, out: TextIO, keys: TextIO | None):
        self.out = out
        self.screen = out.isatty()
        self.keys = keys if keys is not None and keys.isatty() else None
        self._undo: list[Callable[[], Any]] = []
        self._wake_r = -1

    def __enter__(self) -> Terminal:
        try:
            self._take_signals()
            if self.keys is not None:
                self._cbreak(self.keys.fileno())
            if self.screen:
                self.out.write(ENTER)
                self.out.flush()
                self._undo.append(self._leave_screen)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        while self._undo:
            with contextlib.suppress(Exception):
                self._undo.pop()()

    def size(self) -> tuple[int, int]:
        cols, rows = shutil.get_terminal_size((80, 24))
        return max(cols, 20), max(rows, 3)

    def draw(self, lines: list[str], cols: int, rows: int) -> None:
        if not self.screen:
            self.out.write("\n".join(lines) + "\n\n")
        else:  # erase each line before writing it: no flicker, no leftovers, no scrolling
            body = "\r\n".join(ERASE_LINE + line for line in lines[:rows])
            self.out.write(HOME + body + ERASE_BELOW)
        self.out.flush()

    def wait(self, seconds: float) -> str | None:
        """Sleep up to ``seconds``; a key pressed meanwhile (None if none, or a resize)."""
        readable = [fd for fd in (self._wake_r, self.keys.fileno() if self.keys else -1) if fd >= 0]
        if not readable:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select(readable, [], [], seconds)
        if self._wake_r in ready:
            with contextlib.suppress(OSError):
                os.read(self._wake_r, 512)  # a signal (SIGWINCH): redraw now
        if self.keys is not None and self.keys.fileno() in ready:
            return os.read(self.keys.fileno(), 1).decode(errors="replace")
        return None

    # -- what __exit__ undoes ---------------------------------------------------------------

    def _leave_screen(self) -> None:
        self.out.write(LEAVE)
        self.out.flush()

    def _cbreak(self, fd: int) -> None:
        import termios
        import tty

        saved = termios.tcgetattr(fd)
        self._undo.append(lambda: termios.tcsetattr(fd, termios.TCSADRAIN, saved))
        tty.setcbreak(fd)

    def _take_signals(self) -> None:
        """SIGTERM and SIGHUP end the view as Ctrl-C does (so the terminal is restored);
        SIGWINCH wakes the wait through a pipe, to redraw at the new size at once. Ctrl-C
        raises KeyboardInterrupt even where it was ignored when we started (Python keeps a
        SIGINT its parent ignored -- a shell's background job -- ignored)."""
        try:
            was = signal.signal(signal.SIGINT, signal.default_int_handler)
            self._undo.append(_restorer(signal.SIGINT, was))
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self._undo.append(_restorer(signum, signal.signal(signum, _exit_on)))
            self._undo.append(_restorer(signal.SIGWINCH, signal.signal(signal.SIGWINCH, _ignore)))
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            old_fd = signal.set_wakeup_fd(w)
            self._undo += [lambda: os.close(w), lambda: os.close(r), lambda: signal.set_wakeup_fd(old_fd)]
            self._wake_r = r
        except ValueError:  # not the main thread: no signal handling, plain timed waits
            pass


def _exit_on(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _ignore(signum: int, frame: FrameType | None) -> None:
    """SIGWINCH: nothing to do here; its arrival on the wakeup pipe is what counts."""


def _restorer(signum: int, handler: Any) -> Callable[[], Any]:
    return lambda: signal.signal(signum, handler)
