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
import time
import urllib.error
import urllib.request
from email.message import Message

import pytest
from support.servers import Server, free_port, get_as, python_module

import shmwin
from shmwin.local_share import AWAY_SUFFIX
from shmwin.local_share import SUFFIX as LOCAL_SUFFIX

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


GLOBAL_POLICY = '"3-per-1m";q=3;w=60'
SHARE_POLICY = '"2-per-1m";q=2;w=60'  # fallback="2/minute": the host's share while Redis is away


def _policy(answer: tuple[int | str, Message | None, str]) -> str | None:
    headers = answer[1]
    return None if headers is None else headers["RateLimit-Policy"]


@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
def test_on_error_local_the_middleware_enforces_and_describes_the_share(own_redis, name, tmp_path, server):
    """on_error="local": while Redis is away the two workers enforce the host's share together
    (shared memory), and the headers describe that share, the quota then in force; a refusal is
    a quota-exceeded 429 with its Retry-After. Once Redis is back, the hits admitted on the share
    were counted on the global keys first: no client gets past the global limit at the switch."""
    port = free_port()
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_LOG_DIR": str(tmp_path), "SHMWIN_BACKEND": own_redis.url,
           "SHMWIN_RATELIMITER": "limiter", "SHMWIN_ON_ERROR": "local",
           "SHMWIN_FALLBACK": "2/minute"}  # fmt: skip
    srv = Server(_server(server, port), port, env)
    try:
        up = [_get(port, "alice") for _ in range(4)]
        assert [status for status, _, _ in up] == [200, 200, 200, 429], (up, srv.output())
        assert {_policy(a) for a in up} == {GLOBAL_POLICY}, up

        own_redis.stop()
        away = [_get(port, "bob") for _ in range(4)]  # over both workers: one share for the host
        assert [status for status, _, _ in away] == [200, 200, 429, 429], (away, srv.output())
        assert {_policy(a) for a in away} == {SHARE_POLICY}, away
        for _, headers, body in away[2:]:
            assert headers is not None and headers["Content-Type"] == "application/problem+json"
            problem = json.loads(body)
            assert problem["type"].endswith("#quota-exceeded"), problem
            assert problem["violated-policies"] == ["2-per-1m"], problem
            assert 0 < int(headers["Retry-After"]) <= 63, dict(headers)  # a period and a bucket (60 s / 20)
        carol = _get(port, "carol")  # a key of its own on the share
        assert (carol[0], _policy(carol)) == (200, SHARE_POLICY), carol

        own_redis.start()  # back, empty: each worker asks again within its probe interval
        deadline = time.monotonic() + 30
        run = 0
        while run < 12:  # both workers back, with high odds: 12 answers in a row on the global rates
            assert time.monotonic() < deadline, ("a worker never went back to Redis", srv.output())
            run = run + 1 if _policy(_get(port, "dave")) == GLOBAL_POLICY else 0
            time.sleep(0.02)
        back = [_get(port, "bob") for _ in range(3)]  # bob's 2 admitted on the share were carried
        assert [status for status, _, _ in back] == [200, 429, 429], (back, srv.output())
        assert {_policy(a) for a in back} == {GLOBAL_POLICY}, back
    finally:
        code = srv.stop()
        for made in (LOCAL_SUFFIX, AWAY_SUFFIX):  # the host's share and its record, made by the workers
            shmwin.unlink(name + made)
        assert code == 0 or server == "uvicorn", srv.output()
