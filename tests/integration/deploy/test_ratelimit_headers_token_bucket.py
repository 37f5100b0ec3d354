"""A token bucket's RateLimit headers agree with themselves and with Retry-After (#33).

The draft (-10, section 6): when a response carries both ``Retry-After`` and ``RateLimit``, ``t``
names the same point in time; ``r`` is what is left of the quota ``q`` of ``w`` seconds. A token
bucket's quota is its burst, refilled in ``burst`` emission intervals, and ``t`` is until its next
token (0 when full). At 4ed36b0 a bucket of 1/second with a burst of 3 said ``q=1;w=1`` while
``r`` was 2, and refused with ``Retry-After: 1`` and ``t=3`` (until full).

Driven in process through the ASGI middleware with a manual clock, every response checked.
"""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from shmwin import Limiter, ManualClock, TokenBucket
from shmwin.integrations.ratelimit import RateLimitMiddleware

pytestmark = pytest.mark.integration

RATELIMIT = re.compile(r'^"(?P<name>[^"]+)";r=(?P<r>\d+);t=(?P<t>\d+)$')
POLICY = re.compile(r'^"(?P<name>[^"]+)";q=(?P<q>\d+);w=(?P<w>\d+)$')


async def _ok(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _answers(app, clock: ManualClock, steps: list[float]) -> list[httpx.Response]:
    """One request per step, the clock advanced by the step's seconds before it."""

    async def run() -> list[httpx.Response]:
        got = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
            for step in steps:
                clock.advance(step)
                got.append(await c.get("/", headers={"x-client": "k"}))
        return got

    return asyncio.run(run())


Seen = tuple[int, int, int, int, int, "str | None"]


def _check(answers: list[httpx.Response], bucket: bool = True) -> list[Seen]:
    """(status, q, w, r, t, Retry-After) of each answer, after checking what must always hold
    (a limiter's t may pass w: its oldest hit leaves between P and P + a bucket after it)."""
    seen = []
    for a in answers:
        policies = {m["name"]: m for m in map(POLICY.match, a.headers["ratelimit-policy"].split(", "))}
        now = RATELIMIT.match(a.headers["ratelimit"])
        assert now is not None and now["name"] in policies, a.headers
        policy = policies[now["name"]]
        q, w, r, t = int(policy["q"]), int(policy["w"]), int(now["r"]), int(now["t"])
        assert 0 <= r <= q, a.headers  # never more left than the quota holds
        assert t >= 0 and (t <= w or not bucket), a.headers
        retry = a.headers.get("retry-after")
        if a.status_code == 429:
            assert retry is not None and int(retry) == t >= 1, a.headers  # the same point in time
            assert r == 0, a.headers
        else:
            assert a.status_code == 200 and retry is None, a.headers
        seen.append((a.status_code, q, w, r, t, retry))
    return seen


def test_a_token_bucket_says_its_burst_and_its_next_token(name):
    clock = ManualClock(10**12)
    with TokenBucket(name, "1/second", burst=3, clock=clock) as bucket:
        app = RateLimitMiddleware(_ok, bucket, key=lambda scope: "k")
        seen = _check(_answers(app, clock, [0, 0, 0, 0, 0.5, 0.5, 0, 10, 0]))
        assert seen == [
            (200, 3, 3, 2, 1, None),  # a token taken: the next back in 1 s
            (200, 3, 3, 1, 1, None),
            (200, 3, 3, 0, 1, None),
            (429, 3, 3, 0, 1, "1"),  # was Retry-After 1 with t=3 (until full)
            (429, 3, 3, 0, 1, "1"),  # 0.5 s to go: whole seconds, rounded up
            (200, 3, 3, 0, 1, None),  # the token came and was taken
            (429, 3, 3, 0, 1, "1"),
            (200, 3, 3, 2, 1, None),  # full again after 10 s, one taken
            (200, 3, 3, 1, 1, None),
        ]
        assert bucket.rates[0].limit == 1  # the bucket's own rate is unchanged: only the headers
        bucket.unlink()


RUNS = [("7/minute", 5), ("50/hour", 50), ("10/second", 1), ("2/second", 40)]


@pytest.mark.parametrize("rate, burst", RUNS)
def test_token_bucket_headers_hold_over_a_run(name, rate, burst):
    clock = ManualClock(10**12)
    with TokenBucket(name, rate, burst=burst, clock=clock) as bucket:
        app = RateLimitMiddleware(_ok, bucket, key=lambda scope: "k")
        steps = [0.0] * (burst + 2) + [0.3, 1.7, 4.1, 0.05, 9.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0]
        seen = _check(_answers(app, clock, steps))
        assert {s[0] for s in seen} == {200, 429}
        bucket.unlink()


def test_a_limiter_refusal_names_the_retry_after_too(name):
    clock = ManualClock(10**12)
    with Limiter(name, "2/second;3/minute", clock=clock) as lim:
        app = RateLimitMiddleware(_ok, lim, key=lambda scope: "k")
        seen = _check(_answers(app, clock, [0, 0, 0, 1.2, 0, 0.01, 65, 0]), bucket=False)
        assert [s[0] for s in seen] == [200, 200, 429, 200, 429, 429, 200, 200]
        lim.unlink()
