"""The rate-limit middlewares over a remote backend (tests/integration/deploy/
test_ratelimit_middleware_backend_away.py): an ASGI app and a WSGI app limited to 3/minute per
client (the X-Client header) by a Limiter -- or, with SHMWIN_RATELIMITER=token-bucket, a
TokenBucket of 3/minute with a burst of 3 -- on SHMWIN_BACKEND (a redis:// URL), with
``on_error=SHMWIN_ON_ERROR`` and ``shadow`` if SHMWIN_SHADOW is set. Made at import, in each
worker: with the server away and on_error "allow" or "deny" (or shadow) that does not fail."""

import os

from shmwin import Limiter, TokenBucket
from shmwin.integrations.ratelimit import RateLimitMiddleware, WSGIRateLimitMiddleware

_options = {
    "backend": os.environ["SHMWIN_BACKEND"],
    "on_error": os.environ["SHMWIN_ON_ERROR"],
    "shadow": bool(os.environ.get("SHMWIN_SHADOW")),
    "timeout": 0.5,
}
limiter: Limiter | TokenBucket
if os.environ.get("SHMWIN_RATELIMITER") == "token-bucket":
    limiter = TokenBucket(os.environ["SHMWIN_TEST_NAME"], "3/minute", burst=3, **_options)
else:
    limiter = Limiter(os.environ["SHMWIN_TEST_NAME"], "3/minute", **_options)

BODY = b"served by the app"


async def _asgi(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": BODY})


def _wsgi(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))])
    return [BODY]


asgi = RateLimitMiddleware(_asgi, limiter, key=lambda scope: dict(scope["headers"]).get(b"x-client", b"anon"))
wsgi = WSGIRateLimitMiddleware(_wsgi, limiter, key=lambda environ: environ.get("HTTP_X_CLIENT", "anon"))
