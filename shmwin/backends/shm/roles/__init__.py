"""One engine per segment role: the only callers of the native core's role sections outside the
shared-memory backend's own window and limiter. Each class owns its role's native methods and
its reader (``values(now_ns)``: what the tools show of each key, read without writing).

    fixed-window     FixedEngine        core/counters.c: fixed_incr, fixed_get
    sliding-counter  SlidingEngine      core/counters.c: sliding_hit, sliding_get
    moving-log       MovingEngine       core/moving.c: moving_hit, moving_get, moving_chunks
    token-bucket     TokensEngine       core/counters.c (token_hit/token_check: ShmTokenBucket)
    concurrency      ConcurrencyEngine  core/concurrency.c: conc_acquire, conc_release, ...
    lease            LeaseEngine        core/lease.c: lease_spend, lease_install, ...
    distribution     DistributionEngine core/distribution.c: record, record_many
    counter-cache    CounterCacheEngine core/cache.c: counter_add, counter_set, counter_incr, ...

The inspector finds a reader by role (:func:`engine_for`).
"""

from __future__ import annotations

from typing import Any

from .base import RoleEngine
from .cache import CounterCacheEngine
from .concurrency import ConcurrencyEngine
from .distribution import DistributionEngine
from .fixed import FixedEngine
from .lease import LeaseEngine
from .moving import MovingEngine
from .sliding import SlidingEngine
from .tokens import TokensEngine

ENGINES: dict[str, type[RoleEngine]] = {
    engine.role: engine
    for engine in (FixedEngine, SlidingEngine, MovingEngine, TokensEngine, ConcurrencyEngine, LeaseEngine,
                   DistributionEngine, CounterCacheEngine)
}  # fmt: skip


def engine_for(window: Any) -> RoleEngine | None:
    """The engine of ``window``'s recorded role, or None if no engine serves that role."""
    engine = ENGINES.get(str(window.geometry.role))
    return None if engine is None else engine(window)


__all__ = [
    "ENGINES", "ConcurrencyEngine", "CounterCacheEngine", "DistributionEngine",
    "FixedEngine", "LeaseEngine", "MovingEngine", "RoleEngine",
    "SlidingEngine", "TokensEngine", "engine_for",
]  # fmt: skip
