"""FastAPI with slowapi on shm://, and with limits.aio on async+shm://.

slowapi's sdist ships no tests, so these cover what its users rely on: sync and async
endpoints, a callable cost, the X-RateLimit-* headers and Retry-After (a client that waits
that long gets in), for every strategy. Time is a ManualClock read through ``time.time``.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("slowapi")
pytest.importorskip("httpx")

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse

with warnings.catch_warnings():  # newer Starlette asks for httpx2 instead of httpx: not our concern
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient
from apps.slowapi_wiring import slowapi_fastapi
from limits import parse
from limits.aio.strategies import STRATEGIES as AIO_STRATEGIES
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES as SYNC_STRATEGIES

import shmwin
import shmwin.integrations.limits  # registers shm:// and async+shm://
from shmwin import ManualClock

S = 1_000_000_000
START_S = 1_800_000_000
STRATEGIES = ["fixed-window", "moving-window", "sliding-window-counter"]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    c = ManualClock(START_S * S + 7 * S // 10)  # 0.7 s into a minute: not a bucket boundary
    monkeypatch.setattr(time, "time", lambda: c() / S)
    return c


@pytest.fixture
def uri(name: str) -> Iterator[str]:
    yield f"shm://{name}"
    for n in shmwin.names():
        if n.startswith(name + "."):
            shmwin.unlink(n)


def slowapi_app(uri: str, strategy: str) -> FastAPI:
    app, limiter = slowapi_fastapi(uri, strategy, headers_enabled=True)

    @app.get("/async")
    @limiter.limit("3/minute")
    async def async_endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/sync")
    @limiter.limit("3/minute")
    def sync_endpoint(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    @app.get("/costly")
    @limiter.limit("5/minute", cost=lambda request: float(request.query_params.get("cost", "1")))
    async def costly(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    return app


@pytest.mark.parametrize("path", ["/async", "/sync"])
def test_slowapi_sliding_window_counter_answers_as_memory_does(uri, clock, path):
    """limits' sliding window counter (windows aligned on the period, the previous one
    weighted) answers on shm:// what it answers on memory://, moment by moment."""
    shm, memory = (TestClient(slowapi_app(u, "sliding-window-counter")) for u in (uri, "memory://"))

    def answer(client: TestClient) -> tuple[int, str]:
        response = client.get(path)
        return response.status_code, response.headers["X-RateLimit-Remaining"]

    for step_s in (0, 0, 0, 0, 17.5, 43.25, 0, 0, 14.125, 0, 15.5, 0, 0, 61, 0, 0, 0, 0, 120, 0):
        clock.advance(step_s)
        assert answer(shm) == answer(memory), f"at {clock() / S:.3f} s"


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window"])  # the sliding counter: above
@pytest.mark.parametrize("path", ["/async", "/sync"])
def test_slowapi_headers_and_retry_after_are_exact(uri, clock, strategy, path):
    client = TestClient(slowapi_app(uri, strategy))
    seen = []
    for _ in range(4):
        response = client.get(path)
        seen.append((response.status_code, response.headers["X-RateLimit-Remaining"]))
    assert seen == [(200, "2"), (200, "1"), (200, "0"), (429, "0")]
    assert response.headers["X-RateLimit-Limit"] == "3"
    reset_s = float(response.headers["X-RateLimit-Reset"]) - 1  # slowapi adds a second
    retry_after_s = int(response.headers["Retry-After"])
    assert reset_s > clock() / S and retry_after_s == int(reset_s + 1 - clock() / S)
    clock.set(round(reset_s * S) - 2_000)  # just before the reset: still refused
    assert client.get(path).status_code == 429
    clock.set(round(reset_s * S))  # at it: in
    assert client.get(path).status_code == 200


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_client_that_waits_retry_after_gets_in(uri, clock, strategy):
    client = TestClient(slowapi_app(uri, strategy))
    for _ in range(3):
        assert client.get("/async").status_code == 200
    refused = client.get("/async")
    assert refused.status_code == 429
    clock.advance(int(refused.headers["Retry-After"]))
    assert client.get("/async").status_code == 200


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_slowapi_callable_costs_count_as_on_memory(uri, clock, strategy):
    """Whole costs everywhere; fractional ones (slowapi's suite uses 7.5) in thousandths of a hit
    on the fixed window and the sliding counter, as memory:// counts them; the moving window
    keeps hit times, whole ones, and refuses a fraction as memory:// does (with an error)."""
    client = TestClient(slowapi_app(uri, strategy))
    assert client.get("/costly?cost=2.0").headers["X-RateLimit-Remaining"] == "3"
    assert client.get("/costly?cost=3").status_code == 200
    assert client.get("/costly?cost=1").status_code == 429
    other = TestClient(slowapi_app(uri, strategy), client=("198.51.100.9", 50000))
    if strategy == "moving-window":
        with pytest.raises(ValueError, match="whole number"):
            other.get("/costly?cost=1.5")
        return
    on_memory = TestClient(slowapi_app("memory://", strategy), client=("198.51.100.9", 50000))
    costs = ["1.5", "1.5", "1.5", "1.5", "0.5", "0.25", "7.5"]
    answers = [other.get(f"/costly?cost={c}").status_code for c in costs]
    assert answers == [on_memory.get(f"/costly?cost={c}").status_code for c in costs]
    assert answers[:4] == [200, 200, 200, 429]  # 4.5 of 5 counted, then 6 would be over


# -- limits.aio on async+shm://, in a FastAPI dependency ------------------------------------------


def aio_app(uri: str, strategy: str) -> FastAPI:
    limiter = AIO_STRATEGIES[strategy](storage_from_string("async+" + uri))
    item = parse("3/minute")

    async def rate_limited(request: Request) -> None:
        key = request.client.host if request.client else "?"
        if not await limiter.hit(item, key):
            stats = await limiter.get_window_stats(item, key)
            retry_after = max(0, int(stats.reset_time - time.time()) + 1)
            raise HTTPException(429, "slow down", headers={"Retry-After": str(retry_after)})

    app = FastAPI()

    @app.get("/", dependencies=[Depends(rate_limited)])
    async def index() -> PlainTextResponse:
        return PlainTextResponse("ok")

    return app


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_limits_aio_on_async_shm_in_fastapi(uri, clock, strategy):
    client = TestClient(aio_app(uri, strategy))
    assert [client.get("/").status_code for _ in range(4)] == [200, 200, 200, 429]
    refused = client.get("/")
    clock.advance(int(refused.headers["Retry-After"]))
    assert client.get("/").status_code == 200
    # the same counts, seen through the sync storage of the same name (limits' sliding
    # counter still weighs the previous window's 3 hits: what the async storage says too)
    sync = SYNC_STRATEGIES[strategy](storage_from_string(uri))
    aio = AIO_STRATEGIES[strategy](storage_from_string("async+" + uri))
    said = asyncio.run(aio.get_window_stats(parse("3/minute"), "testclient")).remaining
    assert sync.get_window_stats(parse("3/minute"), "testclient").remaining == said
    assert said == (2 if strategy != "sliding-window-counter" else 0)
