"""The rate-limit middlewares over a remote backend (tests/integration/deploy/
test_ratelimit_middleware_backend_away.py): an ASGI app and a WSGI app limited to 3/minute per
client (the X-Client header) by a Limiter -- or, with SHMWIN_RATELIMITER=token-bucket, a
TokenBucket of 3/minute with a burst of 3 -- on SHMWIN_BACKEND (a redis:// URL), with
``on_error=SHMWIN_ON_ERROR`` (and ``fallback=SHMWIN_FALLBACK`` if set, for "local") and
``shadow`` if SHMWIN_SHADOW is set. Made at import, in each
worker: with the server away and on_error "allow" or "deny" (or shadow) that does not fail."""

import os

from plain import serve_plain, wsgi_plain

from shmwin import Limiter, TokenBucket
from shmwin.integrations.ratelimit import RateLimitMiddleware, WSGIRateLimitMiddleware

_options = {
    "backend": os.environ["SHMWIN_BACKEND"],
    "on_error": os.environ["SHMWIN_ON_ERROR"],
    "shadow": bool(os.environ.get("SHMWIN_SHADOW")),
    "timeout": 0.5,
    **({"fallback": os.environ["SHMWIN_FALLBACK"]} if os.environ.get("SHMWIN_FALLBACK") else {}),
}
limiter: Limiter | TokenBucket
if os.environ.get("SHMWIN_RATELIMITER") == "token-bucket":
    limiter = TokenBucket(os.environ["SHMWIN_TEST_NAME"], "3/minute", burst=3, **_options)
else:
    limiter = Limiter(os.environ["SHMWIN_TEST_NAME"], "3/minute", **_options)

BODY = b"served by the app"


async def _asgi(scope, receive, send):
    await serve_plain(scope, receive, send, BODY)


def _wsgi(environ, start_response):
    return wsgi_plain(start_response, BODY)


asgi = RateLimitMiddleware(_asgi, limiter, key=lambda scope: dict(scope["headers"]).get(b"x-client", b"anon"))
wsgi = WSGIRateLimitMiddleware(_wsgi, limiter, key=lambda environ: environ.get("HTTP_X_CLIENT", "anon"))
