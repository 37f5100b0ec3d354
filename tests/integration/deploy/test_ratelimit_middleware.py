"""The rate-limit middlewares: the IETF RateLimit headers on every response, 429 with
Retry-After and a problem+json body on a refusal -- in process (an ASGI client, a WSGI
call) with a manual clock, and under real uvicorn and gunicorn workers sharing one limit."""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from email.message import Message

import httpx
import pytest
from support.servers import Server, free_port, get_as, python_module

import shmwin
from shmwin import Limiter, ManualClock, TokenBucket
from shmwin.integrations.ratelimit import (
    PROBLEM_TYPE,
    RateLimitMiddleware,
    WSGIRateLimitMiddleware,
    policy_header,
)
from shmwin.rate import parse_many

pytestmark = pytest.mark.integration

RATELIMIT = re.compile(r'^"(?P<name>[^"]+)";r=(?P<r>\d+);t=(?P<t>\d+)$')


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def _client_of(scope):
    client = dict(scope["headers"]).get(b"x-client")
    return None if client is None else client.decode()


def _asgi_get(app, client: str | None, n: int) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
            headers = {} if client is None else {"x-client": client}
            return [await c.get("/", headers=headers) for _ in range(n)]

    return asyncio.run(run())


def test_policy_header_lists_every_rate():
    expected = '"10-per-1s";q=10;w=1, "1000-per-1h";q=1000;w=3600'
    assert policy_header(parse_many("10/second;1000/hour")) == expected


def test_asgi_headers_refusal_and_retry_after(name):
    clock = ManualClock(10**12)
    with Limiter(name, "3/minute;100/day", clock=clock) as lim:
        app = RateLimitMiddleware(_ok, lim, key=_client_of)
        answers = _asgi_get(app, "alice", 5)
        assert [r.status_code for r in answers] == [200, 200, 200, 429, 429]
        for i, r in enumerate(answers):
            assert r.headers["ratelimit-policy"] == '"3-per-1m";q=3;w=60, "100-per-1d";q=100;w=86400'
            m = RATELIMIT.match(r.headers["ratelimit"])
            assert m and m["name"] == "3-per-1m" and int(m["r"]) == max(2 - i, 0), r.headers["ratelimit"]
            assert 1 <= int(m["t"]) <= 66  # a hit leaves between P and P + one bucket (6 s) after it
        assert answers[0].text == "ok" and "retry-after" not in answers[0].headers
        refused = answers[3]
        assert refused.headers["content-type"] == "application/problem+json"
        assert 1 <= int(refused.headers["retry-after"]) <= 66
        problem = refused.json()
        assert problem["type"] == PROBLEM_TYPE and problem["type"].endswith("#quota-exceeded")
        assert problem["status"] == 429 and problem["violated-policies"] == ["3-per-1m"]
        assert lim.stats("alice").used == 3  # refusals count nothing
        assert [r.status_code for r in _asgi_get(app, "bob", 1)] == [200]  # per key
        no_key = _asgi_get(app, None, 5)  # not limited, no headers
        assert {r.status_code for r in no_key} == {200} and "ratelimit" not in no_key[0].headers
        clock.advance(67)  # P and one bucket: every hit forgotten
        assert [r.status_code for r in _asgi_get(app, "alice", 1)] == [200]
        lim.unlink()


def _wsgi_call(app, client: str) -> tuple[str, dict[str, str], bytes]:
    seen: dict[str, object] = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_X_CLIENT": client}, start_response))
    return str(seen["status"]), dict(seen["headers"]), body  # type: ignore[arg-type]


def test_wsgi_headers_and_refusal(name):
    clock = ManualClock(10**12)

    def inner(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    with Limiter(name, "2/second", clock=clock) as lim:
        app = WSGIRateLimitMiddleware(inner, lim, key=lambda env: env["HTTP_X_CLIENT"])
        answers = [_wsgi_call(app, "carol") for _ in range(3)]
        assert [a[0][:3] for a in answers] == ["200", "200", "429"]
        assert answers[0][1]["RateLimit"].startswith('"2-per-1s";r=1;t=')
        assert answers[0][2] == b"ok" and answers[0][1]["Content-Type"] == "text/plain"
        _, headers, body = answers[2]
        assert headers["Content-Type"] == "application/problem+json"
        assert headers["Retry-After"] in ("1", "2")  # the oldest hit leaves 1 s to 1.1 s after it
        assert json.loads(body)["type"] == PROBLEM_TYPE
        assert int(headers["Content-Length"]) == len(body)
        lim.unlink()


def _get(port: int, client: str) -> tuple[int, Message, str]:
    """Status, headers (looked up case-insensitively), body."""
    return get_as(port, client)


POLICIES = {
    "limiter": '"50-per-1h";q=50;w=3600, "1000-per-1d";q=1000;w=86400',
    "token-bucket": '"50-per-1h";q=50;w=3600',
}


@pytest.mark.parametrize("kind", ["limiter", "token-bucket"])
@pytest.mark.parametrize("server", ["uvicorn", "gunicorn"])
def test_one_limit_across_real_workers(name, tmp_path, server, kind):
    port = free_port()
    if server == "uvicorn":
        args = python_module("uvicorn", "ratelimited:asgi", "--workers", "2", "--port", str(port),
                             "--log-level", "warning")  # fmt: skip
    else:
        args = python_module("gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}", "ratelimited:wsgi")
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_LOG_DIR": str(tmp_path), "SHMWIN_RATELIMITER": kind}
    srv = Server(args, port, env)
    try:
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: _get(port, "dave"), range(80)))
        statuses = Counter(status for status, _, _ in answers)
        assert statuses == {200: 50, 429: 30}, srv.output()  # a token every 72 s: none back meanwhile
        for status, headers, body in answers:
            assert headers["RateLimit-Policy"] == POLICIES[kind]
            assert RATELIMIT.match(headers["RateLimit"]), headers
            if status == 429:
                assert headers["Content-Type"] == "application/problem+json"
                assert 1 <= int(headers["Retry-After"]) <= (72 if kind == "token-bucket" else 3780)
                assert json.loads(body)["violated-policies"] == ["50-per-1h"]
        assert _get(port, "erin")[0] == 200  # another client has its own quota
    finally:
        assert srv.stop() == 0 or server == "uvicorn", srv.output()
        shmwin.unlink(name)


def test_a_shadow_limiter_never_refuses_and_its_headers_say_what_enforcement_would(name):
    clock = ManualClock(10**12)
    with Limiter(name, "2/minute", clock=clock, shadow=True) as lim:
        app = RateLimitMiddleware(_ok, lim, key=_client_of)
        answers = _asgi_get(app, "dave", 4)
        assert [r.status_code for r in answers] == [200] * 4
        assert [RATELIMIT.match(r.headers["ratelimit"])["r"] for r in answers] == ["1", "0", "0", "0"]
        assert "retry-after" not in answers[3].headers and answers[3].text == "ok"
        assert lim.decisions() == (2, 2, 1)  # what enforcement would have done
        lim.unlink()


def test_a_token_bucket_behind_the_middleware(name):
    clock = ManualClock(10**12)
    with TokenBucket(name, "1/second", burst=3, clock=clock) as bucket:
        app = RateLimitMiddleware(_ok, bucket, key=_client_of)
        answers = _asgi_get(app, "erin", 4)
        assert [r.status_code for r in answers] == [200, 200, 200, 429]
        assert [RATELIMIT.match(r.headers["ratelimit"])["r"] for r in answers[:3]] == ["2", "1", "0"]
        assert answers[3].headers["retry-after"] == "1"  # one token back in 1 s
        assert answers[3].headers["content-type"] == "application/problem+json"
        clock.advance(1)
        assert [r.status_code for r in _asgi_get(app, "erin", 2)] == [200, 429]
        bucket.unlink()
