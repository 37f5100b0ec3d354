"""FastAPI with limits.aio on async+shm:// (no slowapi): 50/day for everyone."""

import os

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import PlainTextResponse
from limits import parse
from limits.aio.strategies import STRATEGIES
from limits.storage import storage_from_string

import shmwin.integrations.limits  # noqa: F401  (registers shm:// and async+shm://)

storage = storage_from_string(f"async+shm://{os.environ['SHMWIN_TEST_NAME']}")
limiter = STRATEGIES[os.environ["SHMWIN_STRATEGY"]](storage)
fifty_a_day = parse("50/day")


async def rate_limited() -> None:
    if not await limiter.hit(fifty_a_day, "everyone"):
        raise HTTPException(429, "slow down")


app = FastAPI()


@app.get("/", dependencies=[Depends(rate_limited)])
async def index() -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))
