"""Run *inside a fresh venv* where a built wheel is installed (not editable), from outside the checkout.

Checks what a ``pip install 'shmwin[limits,prometheus]'`` user touches first: every documented
import, a window shared by forked processes, a limiter exact across processes, the ``shm://``
scheme in limits, and the console script. Needs no compiler and no test dependency. Used by
scripts/wheels (each wheel on its own Python, an aarch64 one under qemu-user) and by
cibuildwheel's test-command. Prints "wheel smoke ok" at the end; leaves no segment behind.
"""

from __future__ import annotations

import importlib
import os
import platform
import shutil
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable

import shmwin

S = 1_000_000_000
CHILDREN = 4
# The console script runs last, through qemu-user for another machine's wheel, where its start-up
# alone took 27 s on a loaded host, and over 60 s in 2 runs of 6: a 1-minute window had emptied by
# then and the smoke saw 0. The window it shows spans a day: no start-up short of 23 h empties it
CLI_SPAN_S = 86_400
CLI_BUCKETS = 24


def cli_window(name: str, clock: Callable[[], int] | None = None) -> shmwin.Window:
    """The window the console script is asked to show: what is added to it stays counted a day."""
    return shmwin.Window(name, span=CLI_SPAN_S, buckets=CLI_BUCKETS, clock=clock)


def in_children(work: Callable[[], int]) -> list[int]:
    """Run ``work()`` in CHILDREN forked processes at once; what each returned (0..255)."""
    pids = []
    for _ in range(CHILDREN):
        pid = os.fork()
        if pid == 0:
            code = 255
            try:
                code = work()
            finally:
                os._exit(code)
        pids.append(pid)
    return [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids]


def main() -> None:
    # numpy's BLAS pool is a thread by now; forking after it is what every preforking server does, and
    # what shmwin supports: Python 3.12+'s warning about it is not the smoke test's business
    warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)

    here = os.path.dirname(os.path.abspath(shmwin.__file__))
    assert sys.prefix in here, f"shmwin imported from {here}, not from the venv {sys.prefix}"
    assert not any(name.endswith((".c", ".h")) for name in os.listdir(here)), "the wheel ships C source"

    for module in (
        "shmwin", "shmwin._core", "shmwin.cli", "shmwin.gunicorn", "shmwin.inspector.snapshots",
        "shmwin.overload",
        "shmwin.integrations", "shmwin.integrations.limits", "shmwin.integrations.prometheus",
        "shmwin.backends.redis",  # reads its lua/*.lua package data on import (needs no redis package)
    ):  # fmt: skip
        importlib.import_module(module)
    assert os.path.exists(os.path.join(here, "py.typed")), "py.typed is missing from the wheel"

    tag = f"wheel-smoke-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        # a window: every forked writer's adds counted once, seen by the parent
        w = cli_window(f"{tag}-w")
        w.add(3)

        def add_500() -> int:
            with shmwin.Window.attach(f"{tag}-w") as mine:
                for _ in range(500):
                    mine.add()
            return 0

        assert in_children(add_500) == [0] * CHILDREN
        assert w.total() == 3 + 500 * CHILDREN, w.total()
        w.close()

        # a limiter: four processes race for 100 hits a minute on one key; exactly 100 admitted
        clock = shmwin.ManualClock(1000 * S)  # time stands still: nothing expires mid-race
        lim = shmwin.Limiter(f"{tag}-l", "100/minute", clock=clock)

        def hit_60() -> int:
            mine = shmwin.Limiter.attach(f"{tag}-l", clock=clock)
            admitted = sum(mine.hit("client") for _ in range(60))
            mine.close()
            return admitted

        admitted = in_children(hit_60)
        assert sum(admitted) == 100, admitted
        assert not lim.hit("client")
        lim.close()

        # limits' shm:// storage, registered by the package's import of shmwin.integrations.limits
        from limits import RateLimitItemPerMinute
        from limits.storage import storage_from_string
        from limits.strategies import MovingWindowRateLimiter

        storage = storage_from_string(f"shm://{tag}-s")
        limiter = MovingWindowRateLimiter(storage)
        item = RateLimitItemPerMinute(2)
        assert [limiter.hit(item, "client") for _ in range(3)] == [True, True, False]
        storage.reset()

        # the console script sees the window. Under qemu-user with no binfmt_misc (scripts/wheels'
        # other-machine wheels) the kernel cannot start it: the emulator runs its Python on it
        exe = shutil.which("shmwin", path=os.path.dirname(sys.executable))
        assert exe, "the shmwin console script was not installed"
        emulator = os.environ.get("SHMWIN_SMOKE_EMULATOR")
        cli = [emulator, sys.executable, exe] if emulator else [exe]
        # wide enough that no name is elided, whatever else /dev/shm holds (kinds like "moving-log")
        wide = dict(os.environ, COLUMNS="240")
        listed = subprocess.run([*cli, "ls"], capture_output=True, text=True, check=True, env=wide).stdout
        assert f"{tag}-w" in listed, listed
        shown = subprocess.run([*cli, "show", f"{tag}-w"], capture_output=True, text=True, check=True).stdout
        assert f"{3 + 500 * CHILDREN:,}" in shown, shown
    finally:
        for name in shmwin.names():
            if name.startswith(tag):
                shmwin.unlink(name)
    left = [name for name in shmwin.names() if name.startswith(tag)]
    assert not left, f"segments left behind: {left}"
    print(f"wheel smoke ok on Python {sys.version.split()[0]} ({platform.machine()}): {CHILDREN} forked "
          f"writers all counted, 100 of {60 * CHILDREN} hits admitted, shm:// and the CLI work")  # fmt: skip


if __name__ == "__main__":
    main()
