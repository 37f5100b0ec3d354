"""FastAPI + slowapi on the shm:// storage: 50/day for everyone."""

import os

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address

import shmwin.integrations.limits  # noqa: F401  (registers shm://)

limiter = Limiter(
    key_func=get_remote_address,
    storage_uri=f"shm://{os.environ['SHMWIN_TEST_NAME']}?capacity=100",
    strategy=os.environ["SHMWIN_STRATEGY"],
)
app = FastAPI()
app.state.limiter = limiter
app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)


@app.get("/")
@limiter.limit("50/day")
async def index(request: Request) -> PlainTextResponse:
    return PlainTextResponse(str(os.getpid()))
