"""A `limits <https://limits.readthedocs.io>`_ storage in shared memory: ``shm://NAME``.

``import shmwin.integrations.limits`` registers ``shm://`` (and ``async+shm://``, for
``limits.aio``); then Flask-Limiter, slowapi or plain ``limits`` get limits shared exactly
by every worker on the host by changing one setting::

    Limiter(get_remote_address, app=app, storage_uri="shm://myapp")     # Flask-Limiter
    Limiter(key_func=get_remote_address, storage_uri="shm://myapp")     # slowapi
    storage_from_string("async+shm://myapp")                            # limits.aio

Options, in the URI query or as storage options, checked when the storage is built
(a bad one raises :class:`StorageOptionError`, a ``ConfigurationError`` and ``ValueError``):

* ``capacity``: a hard cap on live keys per limit, with ``on_full`` deciding what a new
  key gets when it is reached; without it, shmwin's default key table.
* ``on_full``: ``allow`` (the default: admitted, uncounted), ``deny`` or ``raise``.
* ``buckets``: per period (default 20); it must divide one second into whole nanoseconds.

How limits' strategies map onto shmwin (the segments are named in
:mod:`shmwin.integrations.limits_segments`):

* **moving window** keeps each key's hit times (:mod:`shmwin.integrations.limits_moving`,
  in memory that follows the hits held): a hit is admitted only if the hits of the last
  period leave room, and it is counted in the same locked step. Never more than the limit
  in any period; exact by default, or forgotten up to a bucket late with ``buckets`` (a
  strict shmwin Limiter); the reset times reported say exactly when.
* **sliding window counter** is limits' own algorithm (windows aligned on the period, the
  previous one weighted), checked and counted in one native step per hit
  (:mod:`shmwin.integrations.limits_sliding`): limits' approximation, shared exactly.
* **fixed window** starts a key's window at its first hit and ends it one period later,
  as limits' own storages do, with one live window per key across processes
  (:mod:`shmwin.integrations.limits_fixed`). A hit past the limit is still counted.

Costs are whole numbers: ``2`` and ``2.0`` count two hits; ``1.5`` raises ``ValueError``.
"""

from __future__ import annotations

import os
from typing import Any

from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage
from limits.storage.base import TimestampedSlidingWindow

from ..backends.shm.segment import SHM_DIR
from .limits_segments import SegmentsStorage, StorageOptionError, StorageSegments


class ShmStorage(
    SegmentsStorage, Storage, MovingWindowSupport, SlidingWindowCounterSupport, TimestampedSlidingWindow
):
    """limits storage backed by shmwin segments; see the module docstring."""

    STORAGE_SCHEME = ["shm"]  # noqa: RUF012  (limits reads it as a plain class attribute)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any):
        self.segments = StorageSegments(uri, options)
        self._moving_hits = self.segments.moving_hits  # acquire_entry's hot path: one lookup
        self._foreign_get = self.segments.foreign.get  # get's: the native sum over fixed windows
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)

    # -- fixed window -----------------------------------------------------------------------

    def incr(self, key: str, expiry: int, amount: int | float = 1) -> int:
        return self.segments.incr(key, expiry, amount)  # type: ignore[return-value]  # a float: a fractional cost

    def get(self, key: str) -> int:
        # the hot path: a key limits did not build, summed natively while no fixed-window segment
        # was made or removed since this process last looked (None: look, in segments.get)
        got = self._foreign_get(key)
        return self.segments.get(key) if got is None else got  # type: ignore[return-value]  # a float: a fractional cost

    def get_expiry(self, key: str) -> float:
        return self.segments.get_expiry(key)

    # -- moving window and sliding window counter -------------------------------------------

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        # the hot path: a moving log already open for (limit, expiry) and a whole cost from 1 to
        # the limit go straight to its core; any other cost (0, above the limit, past int64, a
        # float) takes the checked path, which refuses a cost above the limit as limits does
        hit = self._moving_hits.get((limit, expiry))
        if hit is not None and amount.__class__ is int and 0 < amount <= limit:
            return hit(key, amount)
        return self.segments.acquire(key, limit, expiry, amount)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        return self.segments.moving_window(key, limit, expiry)

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self.segments.acquire_sliding(key, limit, expiry, amount)

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        return self.segments.sliding_window(key, expiry)  # type: ignore[return-value]  # floats: fractional costs

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.segments.clear_sliding(key, expiry)

    # -- housekeeping -----------------------------------------------------------------------

    def clear(self, key: str) -> None:
        """Forget ``key`` in every strategy (limits' storages return None)."""
        self.segments.clear(key)

    def reset(self) -> int | None:
        """Empty every segment of this storage; the number of keys that held counts (as
        limits' memory and Redis storages return)."""
        return self.segments.reset()

    def check(self) -> bool:
        return os.access(SHM_DIR, os.W_OK)


from . import limits_async  # noqa: E402  (registers async+shm:// whenever shm:// is)

__all__ = ["ShmStorage", "StorageOptionError", "limits_async"]
