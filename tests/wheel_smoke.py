"""Run *inside a fresh venv* where the built wheel is installed (not editable).

Checks what a ``pip install shmwin[limits,prometheus]`` user touches first: every
documented import, the ``shm://`` scheme in limits, the console script, and one
window and one limiter doing real work. Prints "wheel smoke ok" at the end.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import uuid

import shmwin

here = os.path.dirname(os.path.abspath(shmwin.__file__))
assert sys.prefix in here, f"shmwin imported from {here}, not from the venv {sys.prefix}"

for module in (
    "shmwin", "shmwin.cli", "shmwin.gunicorn", "shmwin.inspector.snapshots",
    "shmwin.integrations", "shmwin.integrations.limits", "shmwin.integrations.prometheus",
    "shmwin.backends.redis",  # reads its lua/*.lua package data on import (needs no redis package)
):  # fmt: skip
    importlib.import_module(module)
assert os.path.exists(os.path.join(here, "py.typed")), "py.typed is missing from the wheel"

tag = f"wheel-smoke-{uuid.uuid4().hex[:8]}"
names = [f"{tag}-w", f"{tag}-l"]
try:
    w = shmwin.Window(names[0], span=60, buckets=60)
    w.add(3)
    assert w.total() == 3, w.total()
    w.close()

    lim = shmwin.Limiter(names[1], "2/minute")
    assert [lim.hit("k") for _ in range(3)] == [True, True, False]
    lim.close()

    from limits import RateLimitItemPerMinute
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    storage = storage_from_string(f"shm://{tag}-s")
    limiter = MovingWindowRateLimiter(storage)
    item = RateLimitItemPerMinute(2)
    assert [limiter.hit(item, "client") for _ in range(3)] == [True, True, False]
    storage.reset()

    exe = shutil.which("shmwin", path=os.path.dirname(sys.executable))
    assert exe, "the shmwin console script was not installed"
    out = subprocess.run([exe, "ls"], capture_output=True, text=True, check=True).stdout
    assert isinstance(out, str)
finally:
    for name in shmwin.names():
        if name.startswith(tag):
            shmwin.unlink(name)
print("wheel smoke ok")
