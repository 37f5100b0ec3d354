"""What limits' fixed window and sliding window counter share on shm://: one keyed segment per
period whose rows hold per-key state (a role, ``layout_words.COUNTER_ROLES``), written by the
native core's sections (``core/counters.c``). :mod:`limits_fixed` and :mod:`limits_sliding`
say what the state means."""

from __future__ import annotations

from typing import TypeVar

from ..clock import Clock
from ..errors import GeometryMismatchError, WindowNotFoundError
from ..geometry import Geometry
from ..window import Window

S = TypeVar("S", bound="CounterSegment")


class CounterSegment:
    """One period's segment of a counter role: its window, its period and its native core."""

    role: str  # the segment's role (ROLES)

    @staticmethod
    def created_as(period_ns: int, capacity: int | None) -> Geometry:
        """The geometry a new segment of the period gets."""
        raise NotImplementedError

    def __init__(self, counts: Window, period_ns: int):
        self.counts, self.period_ns = counts, period_ns
        self._core = counts._backend._core  # type: ignore[attr-defined]  # shared memory's, always: its sections

    @classmethod
    def open(
        cls: type[S], name: str, period_ns: int, clock: Clock, capacity: int | None, create: bool
    ) -> S | None:
        """Create or attach (``create``), or attach only: None if the segment is not there."""
        if not create:
            try:
                w = Window.attach(name, clock=clock)
            except WindowNotFoundError:
                return None
            if w.geometry.role != cls.role:
                w.close()
                role = w.geometry.role
                raise GeometryMismatchError(f"{name!r} is not a {cls.role} segment (role {role!r})")
            return cls(w, w.geometry.bucket_ns)
        return cls(Window.open_geometry(name, cls.created_as(period_ns, capacity), clock=clock), period_ns)
