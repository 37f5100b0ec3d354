"""What limits' fixed window and sliding window counter share on shm://: one keyed segment per
period whose rows hold per-key state (a role, ``format.COUNTER_ROLES``), written by the
native core's sections (``core/counters.c``). :mod:`limits_fixed` and :mod:`limits_sliding`
say what the state means.

Their counts are kept in thousandths of a hit (:data:`UNIT`, as nginx keeps its excess), so a
fractional cost -- slowapi's callable costs may return 7.5 -- is counted exactly to 1/1000
(a finer one rounded up: strict), as limits' memory storage counts floats. What they return
is in hits: an int when whole, else a float.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

from .. import backends
from ..backends.shm.roles import RoleEngine
from ..backends.shm.roles.counters import UNIT as UNIT  # the core's units, for the tests
from ..backends.shm.roles.counters import to_hits as to_hits
from ..clock import Clock
from ..errors import GeometryMismatchError, WindowNotFoundError
from ..geometry import Geometry
from ..policy import WINDOW_ON_FULL
from ..window import Window

S = TypeVar("S", bound="CounterSegment")
MAX_UNITS = 2**63 - 1  # counts are int64


def to_units(hits: Any) -> int:
    """``hits`` (an int, or a float: slowapi's costs) in units, rounded up to a whole unit."""
    if isinstance(hits, bool) or not isinstance(hits, int | float):
        raise TypeError(f"a cost is a number of hits, not {hits!r} ({type(hits).__name__})")
    if isinstance(hits, float) and not math.isfinite(hits):
        raise ValueError(f"a cost must be finite, not {hits!r}")
    if hits < 0:
        raise ValueError(f"a cost cannot be negative, not {hits!r}")
    units = hits * UNIT if isinstance(hits, int) else math.ceil(round(hits * UNIT, 6))
    return min(units, MAX_UNITS)


def attach_segment(
    name: str, role: str, clock: Clock, on_full: str, ready_timeout: float | None = None
) -> Window | None:
    """Attach to the segment ``name`` of ``role`` (a limits counter's, or a moving log's): None
    if it is not there, :class:`GeometryMismatchError` if it was made for another role;
    ``ready_timeout``: how long it waits for its creator (None: the default)."""
    try:
        w = Window.attach(name, clock=clock, on_full=on_full, ready_timeout=ready_timeout)
    except WindowNotFoundError:
        return None
    if w.geometry.role != role:
        found = w.geometry.role
        w.close()
        raise GeometryMismatchError(f"{name!r} is not a {role} segment (role {found!r})")
    return w


class CounterSegment:
    """One period's segment of a counter role: its window, its period and its role's engine."""

    role: str  # the segment's role (ROLES)
    engine: type[RoleEngine]  # the role's native sections, in the shared-memory backend

    @staticmethod
    def created_as(period_ns: int, capacity: int | None) -> Geometry:
        """The geometry a new segment of the period gets."""
        raise NotImplementedError

    def __init__(self, counts: Window, period_ns: int):
        self.counts, self.period_ns = counts, period_ns
        self._engine = self.engine(counts)  # shared memory's, always

    @classmethod
    def open(
        cls: type[S], name: str, period_ns: int, clock: Clock, capacity: int | None, create: bool,
        on_full: str = WINDOW_ON_FULL, ready_timeout: float | None = None, hash_key: bytes | None = None,
    ) -> S | None:
        """Create or attach (``create``), or attach only: None if the segment is not there.
        ``on_full``: what the core answers a key that finds the table full (core/counters.c);
        ``ready_timeout``: how long an attach waits for its creator (None: the default);
        ``hash_key``: the SipHash key it is created with (None: its own, random)."""
        if not create:
            w = attach_segment(name, cls.role, clock, on_full, ready_timeout)
            return None if w is None else cls(w, w.geometry.bucket_ns)
        want = cls.created_as(period_ns, capacity)
        if hash_key is None:
            return cls(Window.open_geometry(name, want, clock=clock, on_full=on_full), period_ns)
        # shared memory's own option, past the public open_geometry (its signature is held as it is)
        opened = backends.open("window", name, want, clock=clock, on_full=on_full, hash_key=hash_key)
        return cls(Window._over(opened, clock), period_ns)
