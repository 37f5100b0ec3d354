"""A bare ASGI app using shmwin's Limiter directly: 50/hour for everyone."""

import os

from shmwin import Limiter

_state: dict[str, Limiter] = {}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if "lim" not in _state:  # uvicorn's workers are spawned: attach by name
        _state["lim"] = Limiter(os.environ["SHMWIN_TEST_NAME"], "50/hour", capacity=100)
    allowed = _state["lim"].hit("client")
    body = str(os.getpid()).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200 if allowed else 429,
            "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
