"""The bridge to the native core: one ``_core.Core`` per mapped segment.

Every write to a segment is a method of the Core built here (see
``shmwin/backends/shm/core/``). The Core reads the segment's geometry from its header --
validated here first, by :func:`shmwin.backends.shm.layout.unpack_header` -- and derives every offset
itself from the same description (``layout_words.py``, which its ``layout.h`` is made from).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable

from ... import _core
from ...clock import Clock

ON_FULL = ("raise", "allow", "deny")


def open_core(
    mm: mmap.mmap,
    name: str,
    *,
    clock: Clock | None,
    lock_timeout: float,
    on_full: str,
    claim: Callable[[], tuple[int, int]] | None,
    fd: int = -1,
) -> _core.Core:
    """The native writer of a mapped segment whose header was validated. Each call reads the
    clock once, before taking any lock: CLOCK_MONOTONIC natively (``clock=None``), or the
    injected one. A keyed segment's core keeps its own duplicate of ``fd``: it reserves memory
    as keys come. ``claim`` (striped windows) names this process when it takes a stripe."""
    return _core.Core(
        mm, name=name, timeout_ns=round(lock_timeout * 1e9), clock=clock, on_full=ON_FULL.index(on_full),
        claim=claim, fd=fd,
    )  # fmt: skip

