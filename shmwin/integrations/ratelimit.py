"""Rate-limit middleware with the IETF's standard headers: ASGI and WSGI.

    app = RateLimitMiddleware(app, Limiter("api", "100/minute"), key=client_of)      # ASGI
    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter, key=client_of)     # WSGI

Each HTTP request is one ``limiter.hit(key(scope or environ))``. Every response then
carries the headers of ``draft-ietf-httpapi-ratelimit-headers`` (-10):

    RateLimit-Policy: "100-per-1m";q=100;w=60, "1000-per-1h";q=1000;w=3600
    RateLimit: "100-per-1m";r=42;t=17

``RateLimit-Policy`` has one item per rate (``q`` the limit, ``w`` the period in seconds);
``RateLimit`` names the tightest rate now (least remaining), with ``r`` hits remaining and
``t`` whole seconds until its oldest counted hit is forgotten. A refused request never
reaches the app: it gets ``429 Too Many Requests`` with ``Retry-After`` and an
``application/problem+json`` body of the draft's problem type ``quota-exceeded``; its ``t``
is the ``Retry-After`` (draft section 6: the same point in time). A token bucket's policy is
its burst: ``q`` the burst, ``w`` the seconds to refill it, ``t`` until its next token. A
limiter in shadow mode never refuses, here as anywhere; its headers say what enforcement
would. ``key`` returning None lets the request through unlimited and without headers.

While a remote backend is away the limiter's ``on_error`` decides the whole request:
"allow" lets it through, "deny" answers 429 (``about:blank``, no ``Retry-After``), and such
a response carries no RateLimit fields, having no quota it could vouch for. "local" enforces
the host's share (:class:`~shmwin.Limiter`'s ``fallback``), and the headers describe that
share, the quota then in force: ``RateLimit-Policy: "50-per-1m";q=50;w=60`` for a share of
50/minute, and a refusal is a ``quota-exceeded`` 429 with its ``Retry-After``. "raise" lets
:class:`~shmwin.BackendUnavailableError` out: uvicorn answers 500, gunicorn's sync worker
takes it (a ConnectionError) for a broken socket and closes the connection.

Any limiter with ``hit(key)``, ``stats_all(key)`` (one :class:`~shmwin.rate.LimitStats`
per rate) and ``rates`` works: a :class:`~shmwin.Limiter` on any backend, or a token bucket.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends.contract import Key
from ..errors import BackendUnavailableError
from ..policy import tightest
from ..rate import NS_PER_S, LimitStats, Rate, format_ns

PROBLEM_TYPE = "https://iana.org/assignments/http-problem-types#quota-exceeded"
PROBLEM_TITLE = "Request cannot be satisfied as assigned quota has been exceeded"
UNAVAILABLE_DETAIL = "The rate limiter's store is unavailable; its on_error policy refused the request."

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


class RateLimited(Protocol):
    """What the middlewares need of a limiter."""

    rates: list[Rate]

    def hit(self, key: Key, cost: int = 1) -> bool: ...
    def stats_all(self, key: Key) -> list[LimitStats]: ...


@dataclass(frozen=True)
class Verdict:
    """One request's answer: allowed or not, and the headers every response carries."""

    allowed: bool
    headers: list[tuple[str, str]]
    retry_after_s: int  # for a refusal: whole seconds until a hit could pass (>= 1; 0: unknown)
    violated: list[str]  # names of the rates with nothing left
    unavailable: bool = False  # the backend was away: no quota known, on_error decided


def policy_name(rate: Rate) -> str:
    """A rate's name in the headers: ``"100-per-1m"``."""
    return f"{rate.limit}-per-{format_ns(rate.period_ns)}"


def _sf_string(text: str) -> str:
    """A structured-field String (RFC 8941): quoted, with ``\\`` and ``"`` escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def policy_header(rates: Sequence[Rate]) -> str:
    """``RateLimit-Policy``: one item per rate, ``q`` its limit and ``w`` its period in seconds."""
    return ", ".join(
        f"{_sf_string(policy_name(r))};q={r.limit};w={math.ceil(r.period_ns / NS_PER_S)}" for r in rates
    )


def ratelimit_header(stats: Sequence[LimitStats], reset_s: int | None = None) -> str:
    """``RateLimit``: the tightest rate, ``r`` remaining and ``t`` seconds until more quota is
    there (``reset_s`` if given: a refusal's ``Retry-After``)."""
    tight = tightest(stats)
    t = math.ceil(tight.reset_after) if reset_s is None else reset_s
    return f"{_sf_string(policy_name(tight.rate))};r={tight.remaining};t={t}"


def quotas(limiter: RateLimited) -> list[Rate]:
    """The quota policies the headers name: a limiter's rates; a token bucket's burst, refilled
    in ``burst`` emission intervals (so ``r`` never exceeds ``q``)."""
    burst: int | None = getattr(limiter, "burst", None)
    if burst is None:
        return list(limiter.rates)
    rate = limiter.rates[0]
    return [Rate(burst, burst * _interval_ns(rate))]


def decide(limiter: RateLimited, key: Key) -> Verdict:
    """Hit ``key`` once, then describe where it stands (the headers, and for a refusal the
    wait and the rates it broke). With the backend away, the hit's answer is the limiter's
    ``on_error`` (its ``BackendUnavailableError`` if "raise") and no quota is described, but
    for "local": the host's share decided the hit, and it is described."""
    allowed = limiter.hit(key)  # on_error="raise" and the backend away: raises, as asked
    local = _local_stats(limiter, key)  # the hit went to the host's share: it is the quota in force
    try:
        stats = _shown(limiter, limiter.stats_all(key)) if local is None else local
    except BackendUnavailableError:
        return Verdict(allowed, [], 0, [], unavailable=True)
    quota = quotas(limiter) if local is None else [s.rate for s in local]
    policy = ("RateLimit-Policy", policy_header(quota))
    if allowed:
        return Verdict(True, [policy, ("RateLimit", ratelimit_header(stats))], 0, [])
    spent = [s for s in stats if s.remaining < 1] or list(stats)
    retry = max(1, math.ceil(max(s.reset_after for s in spent)))
    violated = [policy_name(s.rate) for s in spent]
    headers = [policy, ("RateLimit", ratelimit_header(stats, retry)), ("Retry-After", str(retry))]
    return Verdict(False, headers, retry, violated)


def _local_stats(limiter: RateLimited, key: Key) -> list[LimitStats] | None:
    """Where ``key`` stands against the host's share, while a limiter with ``on_error="local"``
    enforces it (the backend away); None for any other limiter, or while it answers."""
    local_stats_all = getattr(limiter, "local_stats_all", None)
    return None if local_stats_all is None else local_stats_all(key)


def _interval_ns(rate: Rate) -> int:
    """A token bucket's emission interval: a token every T (ceil, as the core)."""
    return -(-rate.period_ns // rate.limit)


def _shown(limiter: RateLimited, stats: list[LimitStats]) -> list[LimitStats]:
    """``stats`` as the headers show them. A limiter's as they are; a token bucket's against its
    burst (:func:`quotas`), ``reset_after`` being until its next token (0 when it is full), not
    until it is full: in whole ns, so that a whole second stays one."""
    burst: int | None = getattr(limiter, "burst", None)
    if burst is None:
        return stats
    quota = quotas(limiter)[0]
    shown = []
    for s in stats:
        full_ns = round(s.reset_after * NS_PER_S)  # the core's ns, exactly (below 2**53 ns)
        after_next_ns = (burst - s.remaining - 1) * _interval_ns(s.rate)  # the tokens after the next one
        next_ns = 0 if s.remaining >= burst else max(full_ns - after_next_ns, 0)
        shown.append(dataclasses.replace(s, rate=quota, reset_after=next_ns / NS_PER_S))
    return shown


def problem_body(verdict: Verdict) -> bytes:
    """The ``application/problem+json`` body of a refusal."""
    if verdict.unavailable:
        plain = {"type": "about:blank", "title": "Too Many Requests", "status": 429}
        return json.dumps({**plain, "detail": UNAVAILABLE_DETAIL}).encode()
    detail = f"Rate limit exceeded ({', '.join(verdict.violated)}); retry in {verdict.retry_after_s} s."
    problem = {
        "type": PROBLEM_TYPE,
        "title": PROBLEM_TITLE,
        "status": 429,
        "detail": detail,
        "violated-policies": verdict.violated,
    }
    return json.dumps(problem).encode()


def _refusal_headers(verdict: Verdict, body: bytes) -> list[tuple[str, str]]:
    return [
        ("Content-Type", "application/problem+json"),
        ("Content-Length", str(len(body))),
        *verdict.headers,
    ]


class WSGIRateLimitMiddleware:
    """Limit a WSGI app: ``key(environ)`` names the client (None: not limited)."""

    def __init__(self, app: WSGIApp, limiter: RateLimited, *, key: Callable[[dict[str, Any]], Key | None]):
        self.app, self.limiter, self.key = app, limiter, key

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        key = self.key(environ)
        if key is None:
            return self.app(environ, start_response)
        verdict = decide(self.limiter, key)
        if not verdict.allowed:
            body = problem_body(verdict)
            start_response("429 Too Many Requests", _refusal_headers(verdict, body))
            return [body]

        def with_headers(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *verdict.headers], exc_info)

        return self.app(environ, with_headers)


class RateLimitMiddleware:
    """Limit an ASGI app's HTTP requests: ``key(scope)`` names the client (None: not
    limited). Websocket and lifespan events pass through untouched."""

    def __init__(self, app: ASGIApp, limiter: RateLimited, *, key: Callable[[dict[str, Any]], Key | None]):
        self.app, self.limiter, self.key = app, limiter, key

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        key = self.key(scope) if scope.get("type") == "http" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        verdict = decide(self.limiter, key)  # one native call and a read: well under a microsecond
        if not verdict.allowed:
            body = problem_body(verdict)
            headers = [(k.lower().encode(), v.encode()) for k, v in _refusal_headers(verdict, body)]
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        extra = [(k.lower().encode(), v.encode()) for k, v in verdict.headers]

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_with_headers)


__all__ = [
    "PROBLEM_TYPE",
    "RateLimitMiddleware",
    "RateLimited",
    "Verdict",
    "WSGIRateLimitMiddleware",
    "decide",
    "policy_header",
    "problem_body",
    "quotas",
    "ratelimit_header",
]
