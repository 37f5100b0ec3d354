"""Worker processes for the live-rates tests on redis (tests/integration/redis/): each runs
``Limiter(name, rates, on_change=...)`` -- the code it was started with -- on one shared
hand-driven clock (``ManualClock(path=)`` as the server's time) and answers hit and rates
requests on its stdin, so a test knows the time of every admitted hit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKER = """
import sys
from shmwin import Limiter, ManualClock, TokenBucket
from shmwin.backends.redis.testing import ServerTime
name, url, rates, on_change, clock_path, burst = (sys.argv[1:] + [""])[:6]
kw = dict(backend=url, on_change=on_change, clock=ServerTime(ManualClock(path=clock_path)))
lim = TokenBucket(name, rates, burst=int(burst), **kw) if burst else Limiter(name, rates, **kw)
print("ready", flush=True)
for line in sys.stdin:
    word, _, arg = line.split()[0], None, line.split()[1:]
    if word == "hit":
        print(sum(lim.hit(arg[0]) for _ in range(int(arg[1]))), flush=True)
    elif word == "clear":
        lim.clear(arg[0])
        print("cleared", flush=True)
    elif word == "cost":  # one hit of cost N: 1, 0, or the error's type
        try:
            print(int(lim.hit(arg[0], int(arg[1]))), flush=True)
        except Exception as exc:
            print(type(exc).__name__, flush=True)
    elif word == "rates":
        print(";".join(map(str, lim.rates)) if burst == "" else f"{lim.rate} burst={lim.burst}", flush=True)
lim.close()
"""


class Worker:
    """One process running ``Limiter(name, rates, on_change=...)`` (with ``burst``, a
    ``TokenBucket(name, rates, burst=...)``): the code it was started with."""

    def __init__(self, name: str, url: str, rates: str, on_change: str, clock_path: Path, burst: int = 0):
        args = [sys.executable, "-c", textwrap.dedent(WORKER), name, url, rates, on_change, str(clock_path)]
        args += [str(burst)] if burst else []
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
        assert self._read() == "ready"

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._read()

    def _read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"the worker died: exit {self.proc.poll()}"
        return line

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        assert self.proc.wait(60) == 0
