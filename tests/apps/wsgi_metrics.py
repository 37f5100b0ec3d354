"""A WSGI app whose prometheus_client metrics live in shmwin's shared memory (docs/metrics.md).

    /work?i=N   counts a request, observes a latency of (N % 7) / 10 s, answers its pid
    /hang       holds an in-flight gauge up and never answers (the test SIGKILLs the worker)
    /metrics    the scrape: every process's values, from whichever worker answers
"""

import os
import time
import urllib.parse

import shmwin.integrations.prometheus as shp

APP = os.environ["SHMWIN_TEST_NAME"]
shp.multiprocess(APP)  # before any metric is created

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest  # noqa: E402

REQS = Counter("http_requests", "Requests served", ["route"])
LAT = Histogram("http_request_duration_seconds", "Latency", ["route"])
INFLIGHT = Gauge("inflight", "Requests in flight", multiprocess_mode="livesum")
UP = Gauge("worker_up", "Live workers", multiprocess_mode="liveall")
STARTED = Gauge("worker_started", "Each worker's start time", multiprocess_mode="all")
UP.set(1)
STARTED.set(time.time())
REGISTRY = CollectorRegistry()
shp.MultiProcessCollector(REGISTRY, APP)


def _answer(start_response, body: bytes, kind: str = "text/plain"):
    start_response("200 OK", [("Content-Type", kind), ("Content-Length", str(len(body)))])
    return [body]


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/metrics":
        return _answer(start_response, generate_latest(REGISTRY), "text/plain; version=0.0.4")
    if path == "/hang":
        INFLIGHT.inc()
        with open(os.path.join(os.environ["SHMWIN_LOG_DIR"], "hung.pid"), "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(1)
    with INFLIGHT.track_inprogress():
        i = int(urllib.parse.parse_qs(environ.get("QUERY_STRING", "")).get("i", ["0"])[0])
        REQS.labels("work").inc()
        LAT.labels("work").observe((i % 7) / 10)
        return _answer(start_response, str(os.getpid()).encode())
