"""shmwin: sliding time-window counters in POSIX shared memory, exact across processes."""

from __future__ import annotations

from .adaptive import AdaptiveLimiter
from .breaker import Breaker, BreakerOpenError
from .clock import ManualClock
from .errors import (
    BackendUnavailableError,
    CorruptSegmentError,
    ForeignFileError,
    GeometryMismatchError,
    IncompatibleVersionError,
    KeyTableFullError,
    LockTimeoutError,
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
from .limiter import Limiter, LimitStats
from .rate import Rate
from .segment import names, unlink
from .shedder import OverloadedError, Shedder
from .window import Window

__version__ = "0.1.0"

__all__ = [
    "AdaptiveLimiter",
    "BackendUnavailableError",
    "Breaker",
    "BreakerOpenError",
    "CorruptSegmentError",
    "ForeignFileError",
    "GeometryMismatchError",
    "IncompatibleVersionError",
    "KeyTableFullError",
    "LimitStats",
    "Limiter",
    "LockTimeoutError",
    "ManualClock",
    "NotSupportedError",
    "OutOfSpaceError",
    "OverloadedError",
    "Rate",
    "SegmentError",
    "SegmentNotReadyError",
    "Shedder",
    "ShmwinError",
    "TotalOverflowError",
    "UnknownFieldError",
    "UntrustedSegmentError",
    "Window",
    "WindowClosedError",
    "WindowExistsError",
    "WindowNotFoundError",
    "WindowPermissionError",
    "names",
    "unlink",
]
