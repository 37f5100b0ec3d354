"""What the attacks on on_error="local" share (tests/integration/redis/
test_redis_local_fallback_attacks.py and ..._seen_attacks.py): a real server SIGSTOPped (it
keeps its data and answers nothing), a limiter on it with its local share, and a wait for the
switch back."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from shmwin import Limiter
from shmwin.backends.redis.testing import ServerTime
from shmwin.local_share import fallback_since

S = 1_000_000_000
BACKENDS = ["redis", "twotier"]
TIMEOUT_S = 0.2  # the socket timeout: a call that waits it while away is what must not happen per call


def url_of(server: Any, kind: str) -> str:
    return ("shm+" if kind == "twotier" else "") + server.url


@contextmanager
def frozen(server: Any) -> Iterator[None]:
    server.proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.proc.send_signal(signal.SIGCONT)


def open_local(name: str, server: Any, kind: str, clock: Any, rates: str = "10/minute", **kw: Any) -> Limiter:
    """A limiter with on_error="local" on ``server``, on the test's clock (the server's time)."""
    return Limiter(name, rates, backend=url_of(server, kind), on_error="local", clock=ServerTime(clock),
                   timeout=TIMEOUT_S, **kw)  # fmt: skip


def until_back(lim: Limiter, timeout_s: float = 30) -> None:
    """test() (counts nothing) until the limiter is on the server again: the two-tier backend
    waits DOWN_BACKOFF_S of real time after an outage before it asks again."""
    deadline = time.monotonic() + timeout_s
    lim.test("probe")
    while fallback_since(lim) is not None:
        assert time.monotonic() < deadline, "the limiter never went back to the server"
        time.sleep(0.01)
        lim.test("probe")
