"""Worker bodies for the adapters' multiprocess tests (importable by spawned children)."""

from __future__ import annotations


def pyrate_acquire(name: str, limit: int, offered: int) -> int:
    """Attach the bucket by name (limit per hour) and offer ``offered`` non-blocking acquires
    through pyrate's own Limiter: how many it admitted."""
    from pyrate_limiter import Duration, Limiter, Rate

    from shmwin.integrations.pyrate import ShmwinBucket

    bucket = ShmwinBucket([Rate(limit, Duration.HOUR)], name)
    try:
        acquire = Limiter(bucket).try_acquire
        return sum(bool(acquire("client", blocking=False)) for _ in range(offered))
    finally:
        bucket.close()
