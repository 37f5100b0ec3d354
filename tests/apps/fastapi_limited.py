"""FastAPI + slowapi on the shm:// storage: 50/day for everyone."""

import os

from fastapi import Request
from fastapi.responses import PlainTextResponse
from slowapi_wiring import slowapi_fastapi

import shmwin.integrations.limits  # noqa: F401  (registers shm://)

app, limiter = slowapi_fastapi(
    f"shm://{os.environ['SHMWIN_TEST_NAME']}?capacity=100", os.environ["SHMWIN_STRATEGY"]
)


@app.get("/")
@limiter.limit("50/day")
async def index(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))
