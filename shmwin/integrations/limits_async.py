"""``async+shm://NAME``: the shm:// storage for ``limits.aio`` (slowapi, FastAPI).

Registered by ``import shmwin.integrations.limits``. Every method is the synchronous
storage's, called straight from the coroutine: each is one native call into shared memory
(sub-microsecond, nothing to wait for but a segment lock that is only ever held for a
handful of stores), so handing it to a thread would cost far more than it saves. Only
opening a limit's segment for the first time in a process does more (a create or attach,
tens of microseconds).
"""

from __future__ import annotations

import os
from typing import Any

from limits.aio.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from ..backends.shm.segment import SHM_DIR
from .limits_segments import SegmentsStorage, StorageSegments


class AsyncShmStorage(
    SegmentsStorage, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow
):
    """limits.aio storage backed by shmwin segments; the same options as ``shm://``."""

    STORAGE_SCHEME = ["async+shm"]  # noqa: RUF012  (limits reads it as a plain class attribute)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any):
        self.segments = StorageSegments(uri.removeprefix("async+"), options)
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)

    async def incr(self, key: str, expiry: int, amount: int | float = 1) -> int:
        return self.segments.incr(key, expiry, amount)  # type: ignore[return-value]  # a float: a fractional cost

    async def get(self, key: str) -> int:
        return self.segments.get(key)  # type: ignore[return-value]  # as limits' memory storage

    async def get_expiry(self, key: str) -> float:
        return self.segments.get_expiry(key)

    async def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.segments.acquire(key, limit, expiry, amount)

    async def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return self.segments.moving_window(key, limit, expiry)

    async def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.segments.acquire_sliding(key, limit, expiry, amount)

    async def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return self.segments.sliding_window(key, expiry)  # type: ignore[return-value]  # floats: fractional costs

    async def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.segments.clear_sliding(key, expiry)

    async def clear(self, key: str) -> None:
        self.segments.clear(key)

    async def reset(self) -> int | None:
        return self.segments.reset()

    async def check(self) -> bool:
        return os.access(SHM_DIR, os.W_OK)


__all__ = ["AsyncShmStorage"]
