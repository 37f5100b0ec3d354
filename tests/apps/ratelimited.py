"""An ASGI app and a WSGI app behind shmwin's rate-limit middlewares: 50/hour and
1000/day per client (the X-Client header), one limiter shared by every worker; or, with
SHMWIN_RATELIMITER=token-bucket, a token bucket of 50/hour with a burst of 50."""

import os

from plain import serve_plain, wsgi_plain

from shmwin import Limiter, TokenBucket
from shmwin.integrations.ratelimit import RateLimitMiddleware, WSGIRateLimitMiddleware

limiter: Limiter | TokenBucket
if os.environ.get("SHMWIN_RATELIMITER") == "token-bucket":
    limiter = TokenBucket(os.environ["SHMWIN_TEST_NAME"], "50/hour", burst=50)  # create, or attach
else:
    limiter = Limiter(os.environ["SHMWIN_TEST_NAME"], "50/hour;1000/day")  # create, or attach by name


def _pid_body() -> bytes:
    return str(os.getpid()).encode()


async def _asgi(scope, receive, send):
    await serve_plain(scope, receive, send, _pid_body())


def _wsgi(environ, start_response):
    return wsgi_plain(start_response, _pid_body())


def _asgi_client(scope):
    return dict(scope["headers"]).get(b"x-client", b"anonymous")


asgi = RateLimitMiddleware(_asgi, limiter, key=_asgi_client)
wsgi = WSGIRateLimitMiddleware(_wsgi, limiter, key=lambda environ: environ.get("HTTP_X_CLIENT", "anonymous"))
