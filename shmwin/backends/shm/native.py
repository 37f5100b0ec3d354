"""The bridge to the native core: one core per mapped segment, of its role's type.

Every write to a segment is a method of the core built here (see
``shmwin/backends/shm/core/``): ``_core.open`` picks its type from the header's kind and role
words -- a subtype of ``_core.Core`` with the role's methods (``WindowCore``, ``LimiterCore``,
``MovingLogCore``, ...) -- and the core reads the segment's geometry from its header --
validated here first, by :func:`shmwin.backends.shm.layout.unpack_header` -- and derives every offset
itself from the same description (``layout_words.py``, which its ``layout.h`` is made from).
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import TypeVar

from ... import _core
from ...clock import Clock
from ...errors import GeometryMismatchError

C = TypeVar("C", bound=_core.Core)


def _core_enum(prefix: str) -> tuple[str, ...]:
    """The words of one of layout.h's enums (``_core.LAYOUT``'s ``PREFIX*``), in value order."""
    named = sorted((value, name.removeprefix(prefix).lower()) for name, value in _core.LAYOUT.items()
                   if name.startswith(prefix))  # fmt: skip
    return tuple(word for _, word in named)


# What the core answers a full key table with, for every role (layout.h's ON_FULL_*, generated
# from layout_words.ON_FULL): the Core is given its value, and answers by it itself.
ON_FULL = _core_enum("ON_FULL_")


def on_full_word(on_full: str) -> int:
    """The core's value of an ``on_full`` choice ("raise", "allow", "deny"): its enum, generated
    into layout.h from ``layout_words.ON_FULL`` and handed back in ``_core.LAYOUT``."""
    if on_full not in ON_FULL:
        raise ValueError(f"on_full is one of {list(ON_FULL)}, not {on_full!r}")
    return ON_FULL.index(on_full)


def open_core(
    mm: mmap.mmap,
    name: str,
    *,
    clock: Clock | None,
    lock_timeout: float,
    on_full: str,
    claim: Callable[[], tuple[int, int]] | None,
    fd: int = -1,
    role: str = "",
) -> _core.Core:
    """The native writer of a mapped segment whose header was validated, of the type its role
    has (``_core.open``: a role's methods exist on its segments' cores only). Each call reads the
    clock once, before taking any lock: CLOCK_MONOTONIC natively (``clock=None``), or the
    injected one. A keyed segment's core keeps its own duplicate of ``fd``: it reserves memory
    as keys come. ``claim`` (striped windows) names this process when it takes a stripe."""
    return _core.open(
        mm, name=name, timeout_ns=round(lock_timeout * 1e9), clock=clock, on_full=on_full_word(on_full),
        claim=claim, fd=fd,
    )  # fmt: skip


def core_as(core: _core.Core, kind: type[C]) -> C:
    """``core`` as its role's type (the one ``_core.open`` built for its header), for a caller
    that holds a segment of that role: a segment of another role is refused here, before any
    of the role's methods is looked for."""
    if not isinstance(core, kind):
        raise GeometryMismatchError(f"this segment's core is a {type(core).__name__}, not a {kind.__name__}")
    return core
