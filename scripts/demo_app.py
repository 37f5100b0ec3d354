"""The demo's WSGI app: the same 100/minute per-client limit kept two ways.

/shared  -- shmwin: one Limiter in shared memory, exact across every worker
/local   -- a dict in each worker, which is what in-process limiters
            (limits' memory://, Flask-Limiter's default) amount to
Every request is also counted, per client, in a shmwin window.
"""

import json
import os
import time
from collections import defaultdict, deque

from shmwin import Limiter, Window

LIMIT, PERIOD_S = 100, 60
_shmwin: dict[str, object] = {}
_local: dict[str, deque[float]] = defaultdict(deque)


def _local_hit(client: str) -> bool:
    now, hits = time.monotonic(), _local[client]
    while hits and hits[0] <= now - PERIOD_S:
        hits.popleft()
    if len(hits) >= LIMIT:
        return False
    hits.append(now)
    return True


def _metrics(start_response):
    """Prometheus scrape: read straight from shared memory, whichever worker answers."""
    from prometheus_client import CollectorRegistry, generate_latest

    from shmwin.integrations.prometheus import ShmwinCollector

    registry = CollectorRegistry()
    registry.register(ShmwinCollector([os.environ["DEMO_LIMITER"], os.environ["DEMO_WINDOW"]], top_keys=20))
    body = generate_latest(registry)
    headers = [("Content-Type", "text/plain; version=0.0.4"), ("Content-Length", str(len(body)))]
    start_response("200 OK", headers)
    return [body]


def app(environ, start_response):
    if not _shmwin:  # each worker attaches lazily, by name (created by the master's hook)
        _shmwin["limiter"] = Limiter(os.environ["DEMO_LIMITER"], f"{LIMIT}/minute")
        _shmwin["window"] = Window.attach(os.environ["DEMO_WINDOW"])
    client = environ.get("HTTP_X_CLIENT", "anonymous")
    path = environ.get("PATH_INFO", "/")
    if path == "/metrics":
        return _metrics(start_response)
    allowed = _shmwin["limiter"].hit(client) if path == "/shared" else _local_hit(client)
    _shmwin["window"].add(1, "admitted" if allowed else "refused", key=f"{path} {client}")
    body = json.dumps({"pid": os.getpid(), "allowed": allowed}).encode()
    status = "200 OK" if allowed else "429 Too Many Requests"
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
