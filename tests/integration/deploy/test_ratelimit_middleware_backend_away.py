"""The rate-limit middlewares while their Redis is away: ``on_error`` decides the whole request.

Under real uvicorn and gunicorn (two workers each, tests/apps/ratelimited_remote.py), a limiter
or token bucket on a real redis-server that the test stops and starts again. While it is away,
``on_error="allow"`` lets every request through to the app and ``"deny"`` answers 429, a shadow
limiter (even with ``on_error="raise"``) lets them through -- never a 500, never a dropped
connection -- and no response carries RateLimit fields, having no quota to vouch for. When the
server is back the headers are back. At 4ed36b0 ``decide()`` called ``stats_all()`` after the
hit and it raised: uvicorn answered 500 and gunicorn's sync worker closed the connection.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.request
from email.message import Message

import pytest
from support.servers import Server, free_port, get_as, python_module

pytestmark = pytest.mark.integration

RATELIMIT = re.compile(r'^"(?P<name>[^"]+)";r=(?P<r>\d+);t=(?P<t>\d+)$')
BODY = "served by the app"  # ratelimited_remote.BODY
NO_QUOTA_FIELDS = ("RateLimit", "RateLimit-Policy", "Retry-After")


def _get(port: int, client: str) -> tuple[int | str, Message | None, str]:
    """Status (or how the connection failed), headers, body."""
    try:
        return get_as(port, client)
    except (urllib.error.URLError, http.client.HTTPException, ConnectionError) as exc:
        return f"dropped: {exc!r}", None, ""


def _server(server: str, port: int) -> list[str]:
    if server == "uvicorn":
        return python_module("uvicorn", "ratelimited_remote:asgi", "--workers", "2", "--port", str(port),
                             "--log-level", "warning")  # fmt: skip
    return python_module("gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "ratelimited_remote:wsgi")


@pytest.mark.parametrize("kind", ["limiter", "token-bucket"])
@pytest.mark.parametrize("policy", ["allow", "deny", "shadow"])
@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
def test_the_middleware_follows_on_error_while_redis_is_away(own_redis, name, tmp_path, server, policy, kind):
    port = free_port()
    env = {
        "SHMWIN_TEST_NAME": name, "SHMWIN_LOG_DIR": str(tmp_path), "SHMWIN_BACKEND": own_redis.url,
        "SHMWIN_RATELIMITER": kind, "SHMWIN_ON_ERROR": "raise" if policy == "shadow" else policy,
        **({"SHMWIN_SHADOW": "1"} if policy == "shadow" else {}),
    }  # fmt: skip
    srv = Server(_server(server, port), port, env)
    try:
        up = [_get(port, "alice") for _ in range(4)]
        want_up = [200] * 4 if policy == "shadow" else [200, 200, 200, 429]
        assert [status for status, _, _ in up] == want_up, (up, srv.output())
        for _, headers, _ in up:
            assert headers is not None and RATELIMIT.match(headers["RateLimit"]), headers

        own_redis.stop()
        away = [_get(port, client) for client in ("alice", "bob", "carol", "dave", "erin", "frank")]
        for status, headers, body in away:
            if policy == "deny":
                assert status == 429, (status, body, srv.output())
                assert headers is not None and headers["Content-Type"] == "application/problem+json"
                problem = json.loads(body)
                assert problem["status"] == 429 and problem["type"] == "about:blank", problem
                assert "unavailable" in problem["detail"], problem
            else:  # allow, and shadow whatever on_error says: the app answers
                assert (status, body) == (200, BODY), (status, body, srv.output())
            assert headers is not None
            assert [f for f in NO_QUOTA_FIELDS if headers[f] is not None] == [], dict(headers)

        own_redis.start()  # back, empty (no persistence): the headers are back
        status, headers, body = _get(port, "grace")
        assert status == 200 and body == BODY, (status, body, srv.output())
        assert headers is not None and RATELIMIT.match(headers["RateLimit"])["r"] == "2", dict(headers)  # type: ignore[index]
    finally:
        assert srv.stop() == 0 or server == "uvicorn", srv.output()
