"""A WSGI app whose limiter's rates come from a file read when a worker starts (its "code"):
a deploy changes the file and HUPs gunicorn. Time is a manual clock every worker shares.

``/`` hits the limiter for one client: 200 or 429, the body "<pid> <rates of this worker's
code>"; ``/code`` answers the same body and hits nothing (to tell old workers from new ones).
"""

import os

from shmwin import Limiter, ManualClock

NAME = os.environ["SHMWIN_TEST_NAME"]
with open(os.environ["SHMWIN_TEST_RATES"]) as f:  # read once per worker: this worker's "code"
    RATES, ON_CHANGE = f.read().split()
_state: dict[str, Limiter] = {}


def app(environ, start_response):
    if not _state:  # lazily, in each worker: create-or-attach, or change the rates live
        clock = ManualClock(path=os.environ["SHMWIN_TEST_CLOCK"])
        _state["lim"] = Limiter(NAME, RATES, clock=clock, on_change=ON_CHANGE)
    status = "200 OK"
    if environ["PATH_INFO"] != "/code" and not _state["lim"].hit("client"):
        status = "429 Too Many Requests"
    body = f"{os.getpid()} {RATES}".encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
