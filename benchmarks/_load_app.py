"""The CPU-bound WSGI app of bench_breaker.py's load test (served by gunicorn).

Env: SHMWIN_BENCH_WORK (loop iterations of pure-Python work per request, calibrated by the
benchmark), SHMWIN_BENCH_SHED (a shedder name: wrap the app in ShedderMiddleware; empty: bare).
"""

import os

from shmwin.integrations.middleware import ShedderMiddleware

WORK = int(os.environ["SHMWIN_BENCH_WORK"])


def burn(n: int) -> int:
    x = 0
    for i in range(n):
        x += i * i
    return x


def bare(environ, start_response):
    body = str(burn(WORK) % 10).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


_shed = os.environ.get("SHMWIN_BENCH_SHED", "")
app = ShedderMiddleware(bare, _shed) if _shed else bare
