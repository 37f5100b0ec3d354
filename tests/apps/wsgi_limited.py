"""A WSGI app limited through shmwin: 50/hour for everyone, counted in a window."""

import os

from shmwin import Limiter, Window

NAME = os.environ["SHMWIN_TEST_NAME"]
_state: dict[str, object] = {}


def app(environ, start_response):
    if not _state:  # lazily, in each worker: create-or-attach by name
        _state["lim"] = Limiter(NAME + "-lim", "50/hour", capacity=100)
        _state["win"] = Window(NAME + "-req", span="1h", buckets=60, fields=("ok", "limited"))
    allowed = _state["lim"].hit("client")
    _state["win"].add(1, "ok" if allowed else "limited")
    body = str(os.getpid()).encode()
    status = "200 OK" if allowed else "429 Too Many Requests"
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
