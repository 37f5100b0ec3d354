"""shmwin's free-threading stance: it needs the GIL, and says so on import.

A striped window gives each *process* a stripe of its own, and a stripe's writes are plain
adds, serialised by the GIL among that process's threads (module.c declares
``Py_MOD_GIL_USED``). On a free-threaded CPython (3.13t, 3.14t) importing shmwin therefore
turns the GIL back on for the whole process -- CPython's own RuntimeWarning says only that --
unless the user forced it off (``PYTHON_GIL=0``, ``-X gil=0``): then threads sharing a stripe
lose adds. Both cases get shmwin's own words here: the first a warning, the second an error.
"""

from __future__ import annotations

import sys
import sysconfig
import warnings

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
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def gil_enabled() -> bool:
    """Whether the GIL is on now; always on before 3.13 (no ``sys._is_gil_enabled``)."""
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def check_gil() -> None:
    """Run right after the native module's import, which turns the GIL back on unless forced off."""
    if not free_threaded_build():
        return
    if not gil_enabled():
        raise ImportError(FORCED_OFF, name="shmwin")
    warnings.warn(RE_ENABLED, GILRequiredWarning, stacklevel=2)
