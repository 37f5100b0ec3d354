"""A WSGI app behind shmwin's ShedderMiddleware, for real-gunicorn tests.

Env: SHMWIN_TEST_NAME (the shedder), SHMWIN_CLOCK (a ManualClock file), SHMWIN_CPU (a file
holding the millicpu the shedder reads), SHMWIN_HOLD (a directory: a request to /hold writes
its worker's pid there, then waits until a file named "release" appears in it).
"""

import os
import time

from shmwin import ManualClock
from shmwin.integrations.middleware import ShedderMiddleware


def _cpu() -> int:
    with open(os.environ["SHMWIN_CPU"]) as f:
        return int(f.read().strip() or 0)


def _inner(environ, start_response):
    if environ.get("PATH_INFO") == "/hold":
        hold = os.environ["SHMWIN_HOLD"]
        with open(os.path.join(hold, str(os.getpid())), "w"):
            pass
        while not os.path.exists(os.path.join(hold, "release")):  # waits for the test, not for time
            time.sleep(0.01)
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


app = ShedderMiddleware(
    _inner, os.environ["SHMWIN_TEST_NAME"], cpu=_cpu, clock=ManualClock(path=os.environ["SHMWIN_CLOCK"])
)
