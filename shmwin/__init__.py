"""shmwin: sliding time-window counters in POSIX shared memory, exact across processes.

What this install and this interpreter must give shmwin is checked first, at ``import shmwin``,
and said in shmwin's own words: its native module, built for this Python (without it, what is
missing, for which Python, and how to build it, instead of a bare "cannot import name '_core'
from partially initialized module"); and the GIL. A striped window gives each *process* a
stripe of its own, and a stripe's writes are plain adds, serialised by the GIL among that
process's threads (module.c declares ``Py_MOD_GIL_USED``). On a free-threaded CPython (3.13t,
3.14t) importing shmwin therefore turns the GIL back on for the whole process -- CPython's own
RuntimeWarning says only that -- unless the user forced it off (``PYTHON_GIL=0``,
``-X gil=0``): then threads sharing a stripe lose adds. The first case gets a warning, the
second an error.
"""

from __future__ import annotations

import os as _os
import sys as _sys
import sysconfig as _sysconfig
import warnings as _warnings
from importlib import import_module as _import_module
from typing import TYPE_CHECKING, Any

# -- the native module ----------------------------------------------------------------------
MISSING_CORE = """\
shmwin's native module (shmwin._core) is not built for this Python ({python}, looked for \
_core{suffix} in {where}).
In a checkout, build it in place (it needs a C compiler and Python's headers, \
for example apt-get install gcc python3-dev):
  pip install -e .                          # or: python setup.py build_ext --inplace
  scripts/demo, scripts/test                # each builds it into .venv for you
Or install a built wheel, which needs no compiler: pip install dist/shmwin-*.whl \
(scripts/wheels builds one). The import said: {cause}"""


def missing_core_error(cause: ImportError) -> ImportError:
    """The ImportError that replaces a bare one (such as "cannot import name '_core' from
    partially initialized module"): what is missing, for which Python, and how to build it."""
    python = f"{_sys.implementation.name} {_sys.version.split()[0]}"
    suffix = _sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    where = _os.path.dirname(_os.path.abspath(__file__))
    text = MISSING_CORE.format(python=python, suffix=suffix, where=where, cause=cause)
    return ImportError(text, name="shmwin._core")


# -- the GIL --------------------------------------------------------------------------------
WHY = ("shmwin needs the GIL: a process's threads share its stripe of each window, and the GIL "
       "is what keeps their adds from being lost (docs/limitations.md)")  # fmt: skip

RE_ENABLED = (
    WHY + ". On this free-threaded CPython, importing shmwin turned the GIL back on for the whole "
    "process: every thread runs as on a default CPython, and counts stay exact. To run other code "
    "without the GIL, keep shmwin in processes of their own (a worker, a sidecar), or use a "
    "default (GIL) build of CPython; PYTHON_GIL=1 silences CPython's own warning."
)
FORCED_OFF = (
    WHY + ". This free-threaded CPython was told to keep the GIL off (PYTHON_GIL=0 or -X gil=0), "
    "so threads of this process would lose adds and a limiter could admit too many. Unset "
    "PYTHON_GIL (or set PYTHON_GIL=1), drop -X gil=0, or use a default (GIL) build of CPython."
)


class GILRequiredWarning(RuntimeWarning):
    """Importing shmwin on a free-threaded CPython turned the GIL back on."""


def free_threaded_build() -> bool:
    """Whether this CPython was built free-threaded (3.13t, 3.14t), whatever the GIL does now."""
    return bool(_sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled() -> bool:
    """Whether the GIL is on now; always on before 3.13 (no ``sys._is_gil_enabled``)."""
    probe = getattr(_sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def check_gil() -> None:
    """Run right after the native module's import, which turns the GIL back on unless forced off."""
    if not free_threaded_build():
        return
    if not gil_enabled():
        raise ImportError(FORCED_OFF, name="shmwin")
    _warnings.warn(RE_ENABLED, GILRequiredWarning, stacklevel=2)


try:  # first: every write is a call into it, and without it the next import's error misleads
    from . import _core  # noqa: F401
except ImportError as _missing:  # a checkout never built, or a build for another Python
    raise missing_core_error(_missing) from _missing
else:  # on a free-threaded CPython: say that _core turned the GIL on, or refuse it forced off
    check_gil()

from .backends.shm.segment import names, on_behalf_of, unlink, unlink_prefix
from .clock import ManualClock
from .concurrency import Concurrency
from .errors import (
    BackendUnavailableError,
    ConcurrencyLimitError,
    CorruptSegmentError,
    ForeignFileError,
    GeometryMismatchError,
    IncompatibleVersionError,
    KeyTableFullError,
    LockTimeoutError,
    MetricMismatchError,
    NotHeldError,
    NotSupportedError,
    OutOfSpaceError,
    SegmentError,
    SegmentNotReadyError,
    SeriesIdentityError,
    SeriesTableFullError,
    ShmwinError,
    TotalOverflowError,
    UnknownFieldError,
    UntrustedSegmentError,
    WindowClosedError,
    WindowExistsError,
    WindowMovedError,
    WindowNotFoundError,
    WindowPermissionError,
)
from .front import Decisions
from .limiter import Limiter, LimitStats, TokenBucket
from .rate import Rate
from .window import Window

if TYPE_CHECKING:  # imported at their first use (__getattr__ below); the type checker sees them here
    from .distribution import Distribution
    from .overload.adaptive import AdaptiveLimiter
    from .overload.breaker import Breaker, BreakerOpenError
    from .overload.shedder import OverloadedError, Shedder

# What a process that only counts never touches, imported when first named: the overload tools
# and Distribution, 5 ms of the start of every process (thousands of them in a test run).
_ON_FIRST_USE = {
    "AdaptiveLimiter": ".overload.adaptive", "Breaker": ".overload.breaker",
    "BreakerOpenError": ".overload.breaker", "Distribution": ".distribution",
    "OverloadedError": ".overload.shedder", "Shedder": ".overload.shedder",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_import_module(module, __name__), name)
    globals()[name] = value  # from now on a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_ON_FIRST_USE})

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
    "MetricMismatchError",
    "NotHeldError",
    "NotSupportedError",
    "OutOfSpaceError",
    "OverloadedError",
    "Rate",
    "SegmentError",
    "SegmentNotReadyError",
    "SeriesIdentityError",
    "SeriesTableFullError",
    "Shedder",
    "ShmwinError",
    "TokenBucket",
    "TotalOverflowError",
    "UnknownFieldError",
    "UntrustedSegmentError",
    "Window",
    "WindowClosedError",
    "WindowExistsError",
    "WindowMovedError",
    "WindowNotFoundError",
    "WindowPermissionError",
    "names",
    "on_behalf_of",
    "unlink",
    "unlink_prefix",
]
