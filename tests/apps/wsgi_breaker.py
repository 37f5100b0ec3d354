"""A WSGI app that calls an upstream through one shmwin Breaker shared by every worker.

Env: SHMWIN_TEST_NAME (the breaker), SHMWIN_CLOCK (a ManualClock file the test moves),
SHMWIN_UPSTREAM (the upstream's URL). The breaker's RNG always draws 0: a call is dropped
exactly when the SRE drop ratio is above 0, so the test can count failures exactly.
"""

import os
import urllib.request

from shmwin import ManualClock
from shmwin.overload.breaker import Breaker, BreakerOpenError

_state: dict[str, Breaker] = {}


class _Zero:
    def random(self) -> float:
        return 0.0


def _fetch() -> bytes:
    with urllib.request.urlopen(os.environ["SHMWIN_UPSTREAM"], timeout=30) as resp:
        return resp.read()


def app(environ, start_response):
    if "b" not in _state:  # lazily, in each worker: create-or-attach by name
        clock = ManualClock(path=os.environ["SHMWIN_CLOCK"])
        _state["b"] = Breaker(os.environ["SHMWIN_TEST_NAME"], clock=clock, rng=_Zero())
    try:
        _state["b"].call(_fetch)
        status = "200 OK"
    except BreakerOpenError:
        status = "503 Service Unavailable"
    except OSError:  # the upstream failed (urllib's HTTPError is an OSError): counted by call()
        status = "502 Bad Gateway"
    body = str(os.getpid()).encode()
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
