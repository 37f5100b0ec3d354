"""What ``import shmwin`` says when its native module is absent (no C in here: it must import)."""

from __future__ import annotations

import os
import sys
import sysconfig

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
    python = f"{sys.implementation.name} {sys.version.split()[0]}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    where = os.path.dirname(os.path.abspath(__file__))
    text = MISSING_CORE.format(python=python, suffix=suffix, where=where, cause=cause)
    return ImportError(text, name="shmwin._core")
