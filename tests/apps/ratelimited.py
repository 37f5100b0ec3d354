"""An ASGI app and a WSGI app behind shmwin's rate-limit middlewares: 50/hour and
1000/day per client (the X-Client header), one limiter shared by every worker; or, with
SHMWIN_RATELIMITER=token-bucket, a token bucket of 50/hour with a burst of 50."""

import os

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
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = _pid_body()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _wsgi(environ, start_response):
    body = _pid_body()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _asgi_client(scope):
    return dict(scope["headers"]).get(b"x-client", b"anonymous")


asgi = RateLimitMiddleware(_asgi, limiter, key=_asgi_client)
wsgi = WSGIRateLimitMiddleware(_wsgi, limiter, key=lambda environ: environ.get("HTTP_X_CLIENT", "anonymous"))
