"""shmwin: sliding time-window counters in POSIX shared memory, exact across processes."""

from __future__ import annotations

try:  # first: every write is a call into it, and without it the next import's error misleads
    from . import _core  # noqa: F401
except ImportError as _missing:  # a checkout never built, or a build for another Python
    from ._platform import missing_core_error

    raise missing_core_error(_missing) from _missing
else:  # on a free-threaded CPython: say that _core turned the GIL on, or refuse it forced off
    from ._platform import GILRequiredWarning, check_gil

    check_gil()

from .backends.shm.segment import names, on_behalf_of, unlink, unlink_prefix
from .clock import ManualClock
from .concurrency import Concurrency
from .distribution import Distribution
from .errors import (
    BackendUnavailableError,
    ConcurrencyLimitError,
    CorruptSegmentError,
    ForeignFileError,
    GeometryMismatchError,
    IncompatibleVersionError,
    KeyTableFullError,
    LockTimeoutError,
    NotHeldError,
    NotSupportedError,
    OutOfSpaceError,
    SegmentError,
    SegmentNotReadyError,
    ShmwinError,
    TotalOverflowError,
    UnknownFieldError,
    UntrustedSegmentError,
    WindowClosedError,
    WindowExistsError,
    WindowNotFoundError,
    WindowPermissionError,
)
from .front import Decisions
from .limiter import Limiter, LimitStats
from .overload.adaptive import AdaptiveLimiter
from .overload.breaker import Breaker, BreakerOpenError
from .overload.shedder import OverloadedError, Shedder
from .rate import Rate
from .token_bucket import TokenBucket
from .window import Window

__version__ = "0.1.0"

__all__ = [
    "AdaptiveLimiter",
    "BackendUnavailableError",
    "Breaker",
    "BreakerOpenError",
    "Concurrency",
    "ConcurrencyLimitError",
    "CorruptSegmentError",
    "Decisions",
    "Distribution",
    "ForeignFileError",
    "GILRequiredWarning",
    "GeometryMismatchError",
    "IncompatibleVersionError",
    "KeyTableFullError",
    "LimitStats",
    "Limiter",
    "LockTimeoutError",
    "ManualClock",
    "NotHeldError",
    "NotSupportedError",
    "OutOfSpaceError",
    "OverloadedError",
    "Rate",
    "SegmentError",
    "SegmentNotReadyError",
    "Shedder",
    "ShmwinError",
    "TokenBucket",
    "TotalOverflowError",
    "UnknownFieldError",
    "UntrustedSegmentError",
    "Window",
    "WindowClosedError",
    "WindowExistsError",
    "WindowNotFoundError",
    "WindowPermissionError",
    "names",
    "on_behalf_of",
    "unlink",
    "unlink_prefix",
]
