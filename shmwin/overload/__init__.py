"""Overload protection, made of windows and limiters shared by every process of the host.

:mod:`.breaker` (Breaker: a client-side adaptive circuit breaker), :mod:`.shedder` (Shedder:
load shedding by in-flight requests, response times and host CPU), :mod:`.inflight` (requests
in flight per live process), :mod:`.adaptive` (AdaptiveLimiter: rates scaled by a health
window), :mod:`.cpu` (the host's CPU use, from /proc/stat).
"""

from __future__ import annotations

from .adaptive import AdaptiveLimiter
from .breaker import Breaker, BreakerOpenError
from .shedder import OverloadedError, Shedder

__all__ = ["AdaptiveLimiter", "Breaker", "BreakerOpenError", "OverloadedError", "Shedder"]
