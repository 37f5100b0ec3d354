"""A WSGI app whose limiter's rates come from a file read when a worker starts (its "code"):
a deploy changes the file and HUPs gunicorn. Time is a manual clock every worker shares.

The file holds "RATES ON_CHANGE", or "RATE ON_CHANGE BURST" for a token bucket. With
``SHMWIN_TEST_BACKEND`` (a ``redis://`` or ``shm+redis://`` URL) the limiter is there, the shared
clock driving the server's time (``ServerTime``), with ``SHMWIN_TEST_ON_ERROR`` when set.

``/`` hits the limiter for one client: 200 or 429, the body "<pid> <rates of this worker's
code>" ("<pid> local <rates>" while this worker is on its host's share, ``on_error="local"``);
``/code`` answers the same body and hits nothing (to tell old workers from new ones).
"""

import os
from typing import Any

from shmwin import Limiter, ManualClock, TokenBucket
from shmwin.backends.redis.testing import ServerTime
from shmwin.local_share import fallback_since

NAME = os.environ["SHMWIN_TEST_NAME"]
with open(os.environ["SHMWIN_TEST_RATES"]) as f:  # read once per worker: this worker's "code"
    RATES, ON_CHANGE, *BURST = f.read().split()
BACKEND = os.environ.get("SHMWIN_TEST_BACKEND")
_state: dict[str, Any] = {}


def _open() -> Any:
    clock: Any = ManualClock(path=os.environ["SHMWIN_TEST_CLOCK"])
    kw: dict[str, Any] = {"on_change": ON_CHANGE}
    if BACKEND:
        clock = ServerTime(clock)
        kw.update(backend=BACKEND, timeout=0.2, on_error=os.environ.get("SHMWIN_TEST_ON_ERROR", "raise"))
    if BURST:
        return TokenBucket(NAME, RATES, burst=int(BURST[0]), clock=clock, **kw)
    return Limiter(NAME, RATES, clock=clock, **kw)


def app(environ, start_response):
    if not _state:  # lazily, in each worker: create-or-attach, or change the rates live
        _state["lim"] = _open()
    status = "200 OK"
    if environ["PATH_INFO"] != "/code" and not _state["lim"].hit("client"):
        status = "429 Too Many Requests"
    away = " local" if fallback_since(_state["lim"]) is not None else ""
    body = f"{os.getpid()}{away} {RATES}".encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
