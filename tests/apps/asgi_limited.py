"""A bare ASGI app using shmwin's Limiter directly: 50/hour for everyone."""

import os

from plain import serve_plain

from shmwin import Limiter

_state: dict[str, Limiter] = {}


async def app(scope, receive, send):
    status = 200
    if scope["type"] != "lifespan":
        if "lim" not in _state:  # uvicorn's workers are spawned: attach by name
            _state["lim"] = Limiter(os.environ["SHMWIN_TEST_NAME"], "50/hour", capacity=100)
        status = 200 if _state["lim"].hit("client") else 429
    await serve_plain(scope, receive, send, str(os.getpid()).encode(), status)
