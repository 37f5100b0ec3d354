"""Load-shedding middleware: WSGI (Flask, Django, gunicorn) and ASGI (FastAPI, Starlette, uvicorn).

    app.wsgi_app = ShedderMiddleware(app.wsgi_app, "api")          # Flask
    app.add_middleware(ASGIShedderMiddleware, shedder="api")       # FastAPI / Starlette

Each request asks the shared :class:`~shmwin.overload.shedder.Shedder` first; a shed request gets
``503 Service Unavailable`` with ``Retry-After`` and never reaches the app. An admitted one
ends as a pass when the app answered anything but 503 (its time counts towards ``min_rt``),
as a failure when it answered 503 or raised -- go-zero's rule. A WSGI request ends when the
server closes the response iterable, so a streamed body is timed to its end.

Give a :class:`Shedder`, or its name (and keyword options): a name is opened lazily, in the
process that serves the first request, so it works with forking and spawning servers alike.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any

from ..overload.shedder import Shedder, Ticket

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
ASGIApp = Callable[
    [dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]
]

BODY = b"503 Service Unavailable: the server is shedding load, retry later\n"


class _Lazy:
    """The shedder, opened in the serving process on first use when given by name."""

    def __init__(self, shedder: Shedder | str, options: dict[str, Any]):
        if not isinstance(shedder, Shedder | str):
            raise TypeError(f"shedder must be a Shedder or a name, not {shedder!r}")
        if isinstance(shedder, Shedder) and options:
            raise TypeError("options are for a shedder given by name")
        self._given, self._options = shedder, options
        self._opened: Shedder | None = shedder if isinstance(shedder, Shedder) else None
        self._lock = threading.Lock()

    def get(self) -> Shedder:
        opened = self._opened
        if opened is None:
            with self._lock:  # threaded workers: one Shedder per process
                if self._opened is None:
                    assert isinstance(self._given, str)
                    self._opened = Shedder(self._given, **self._options)
                opened = self._opened
        return opened


def _retry_after(seconds: int) -> str:
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValueError(f"retry_after must be whole seconds >= 0, not {seconds!r}")
    return str(seconds)


class ShedderMiddleware:
    """WSGI middleware: ``ShedderMiddleware(app, shedder, retry_after=1, **options)``."""

    def __init__(self, app: WSGIApp, shedder: Shedder | str, *, retry_after: int = 1, **options: Any):
        self.app = app
        self._shedder = _Lazy(shedder, options)
        self._retry_after = _retry_after(retry_after)

    @property
    def shedder(self) -> Shedder:
        return self._shedder.get()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        ticket = self._shedder.get().allow()
        if ticket is None:
            headers = [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(BODY))),
                ("Retry-After", self._retry_after),
            ]
            start_response("503 Service Unavailable", headers)
            return [BODY]
        status: list[str] = []

        def recording_start_response(s: str, headers: Any, exc_info: Any = None) -> Any:
            status[:] = [s]
            return (
                start_response(s, headers, exc_info) if exc_info is not None else start_response(s, headers)
            )

        try:
            body = self.app(environ, recording_start_response)
        except BaseException:
            ticket.fail()
            raise
        return _Closing(body, ticket, status)


class _Closing:
    """The app's response iterable; ends the ticket when the server closes it (PEP 3333)."""

    def __init__(self, body: Iterable[bytes], ticket: Ticket, status: list[str]):
        self._body, self._ticket, self._status = body, ticket, status
        self._failed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._body
        except BaseException:
            self._failed = True
            raise

    def close(self) -> None:
        try:
            close = getattr(self._body, "close", None)
            if close is not None:
                close()
        finally:
            shed = bool(self._status) and self._status[0].startswith("503")
            if self._failed or shed or not self._status:
                self._ticket.fail()
            else:
                self._ticket.done()


class ASGIShedderMiddleware:
    """ASGI middleware: ``ASGIShedderMiddleware(app, shedder, retry_after=1, **options)``;
    only ``http`` requests are judged (lifespan and websockets pass straight through)."""

    def __init__(self, app: ASGIApp, shedder: Shedder | str, *, retry_after: int = 1, **options: Any):
        self.app = app
        self._shedder = _Lazy(shedder, options)
        self._retry_after = _retry_after(retry_after).encode()

    @property
    def shedder(self) -> Shedder:
        return self._shedder.get()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        ticket = self._shedder.get().allow()
        if ticket is None:
            await self._refuse(send)
            return
        status = [0]

        async def recording_send(message: Any) -> None:
            if message.get("type") == "http.response.start":
                status[0] = int(message.get("status", 0))
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        except BaseException:
            ticket.fail()
            raise
        if status[0] in (0, 503):
            ticket.fail()
        else:
            ticket.done()

    async def _refuse(self, send: Any) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(BODY)).encode()),
            (b"retry-after", self._retry_after),
        ]
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": BODY})


__all__ = ["ASGIShedderMiddleware", "ShedderMiddleware"]
