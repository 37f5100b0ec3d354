"""The shared-memory backend: a window or limiter is a named segment in ``/dev/shm``, every
write one call into the native core (``shmwin/backends/shm/core/``), every read lock-free numpy.

Modules: :mod:`.window` (ShmWindow: the segment, its core, its rows), :mod:`.limiter`
(ShmLimiter: a limiter-kind ShmWindow and its core's ``hit``/``check``), :mod:`.token_bucket`
(ShmTokenBucket: a token-bucket-role ShmWindow and its core's ``token_hit``/``token_check``).
"""

from __future__ import annotations

from .limiter import ShmLimiter
from .token_bucket import ShmTokenBucket
from .window import ShmWindow

# what only this backend honours, beyond the geometry (mode and stripes are in it already)
SHM_OPTIONS = frozenset({"perm", "lock_timeout", "ready_timeout", "mode", "stripes", "on_change", "hash_key"})

__all__ = ["SHM_OPTIONS", "ShmLimiter", "ShmTokenBucket", "ShmWindow"]
