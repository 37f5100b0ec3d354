"""What the bare test apps share (imported from tests/apps, the servers' working directory):
ASGI's lifespan protocol and a text/plain answer, for ASGI and for WSGI."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


async def serve_plain(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
    body: bytes,
    status: int = 200,
) -> None:
    """One ASGI call: the lifespan's startup and shutdown, or an HTTP answer of ``body``."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def wsgi_plain(start_response: Callable[..., Any], body: bytes) -> list[bytes]:
    """One WSGI answer: 200 and ``body`` as text/plain."""
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
