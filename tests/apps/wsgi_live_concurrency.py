"""A WSGI app whose Concurrency limit comes from a file read when a worker starts (its "code"):
a deploy changes the file and HUPs gunicorn.

``/`` takes a slot of one key without waiting: 200 after holding it for ``HOLD_S`` (real time:
a request's work, not a clock), or 429; ``/code`` answers "<pid> <limit>" and takes nothing.
Each worker appends to the ledger (``SHMWIN_TEST_LEDGER``, one ``os.write`` a line, O_APPEND)
``open <t> <pid> <limit>`` once it has opened the limiter, and for each slot
``slot <asked_ns> <entered_ns> <left_ns> <pid>``: ``asked_ns`` before the try, ``entered_ns``
after it, ``left_ns`` before the release -- so a ledger interval lies inside the true holding,
and any overlap the ledger shows was real.
"""

import os
import time

from shmwin import Concurrency

NAME = os.environ["SHMWIN_TEST_NAME"]
with open(os.environ["SHMWIN_TEST_RATES"]) as f:  # read once per worker: this worker's "code"
    LIMIT, ON_CHANGE = f.read().split()
HOLD_S = 0.1
_state: dict[str, Concurrency] = {}
_LEDGER = os.open(os.environ["SHMWIN_TEST_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _note(line: str) -> None:
    os.write(_LEDGER, (line + "\n").encode())


def _limiter() -> Concurrency:
    if not _state:  # lazily, in each worker: create-or-attach, or change the limit live
        _state["conc"] = Concurrency(NAME, int(LIMIT), on_change=ON_CHANGE)
        _note(f"open {time.monotonic_ns()} {os.getpid()} {LIMIT}")
    return _state["conc"]


def app(environ, start_response):
    conc = _limiter()
    status = "200 OK"
    if environ["PATH_INFO"] != "/code":
        asked_ns = time.monotonic_ns()
        if conc.try_acquire("k"):
            entered_ns = time.monotonic_ns()
            time.sleep(HOLD_S)
            left_ns = time.monotonic_ns()
            conc.release("k")
            _note(f"slot {asked_ns} {entered_ns} {left_ns} {os.getpid()}")
        else:
            status = "429 Too Many Requests"
    body = f"{os.getpid()} {LIMIT}".encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
