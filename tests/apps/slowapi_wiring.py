"""slowapi's wiring of a FastAPI app, once: its Limiter keyed by the client's address, in the
app's state, and its 429 handler. For the app served by uvicorn (fastapi_limited.py) and the
in-process apps of integration/limits/test_slowapi_fastapi.py."""

from typing import Any

from fastapi import FastAPI
from slowapi import Limiter, _rate_limit_exceeded_handler
from slowapi.errors import RateLimitExceeded
from slowapi.util import get_remote_address


def slowapi_fastapi(storage_uri: str, strategy: str, **options: Any) -> tuple[FastAPI, Limiter]:
    """A FastAPI app and its slowapi Limiter on ``storage_uri`` (``options``: the Limiter's others)."""
    limiter = Limiter(key_func=get_remote_address, storage_uri=storage_uri, strategy=strategy, **options)
    app = FastAPI()
    app.state.limiter = limiter
    app.add_exception_handler(RateLimitExceeded, _rate_limit_exceeded_handler)
    return app, limiter
