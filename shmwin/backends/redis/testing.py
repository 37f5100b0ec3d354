"""A test hook: drive a Redis server's time by hand.

On ``redis://`` and ``shm+redis://`` time is the server's ``TIME`` and nowhere else: every host
then counts in one clock, and no host's clock can move a name's clock (``clock=`` is refused
there). Tests still need to step that time by hand, as they do on shared memory, so a test
wraps its clock in :class:`ServerTime` -- an explicit, named opt-in that no production
code path makes for a caller:

    clock = ManualClock(10**15)
    lim = Limiter("api", "5/minute", backend="redis://...", clock=ServerTime(clock))
    clock.advance(60)

The scripts then read ``clock() // 1000`` (µs) instead of ``TIME``. One name must be driven by
ONE such clock (every process sharing it, e.g. ``ManualClock(path=...)``): ``lua/clock.lua``
keeps one source's pace, and two sources that disagree would move the name's time by their
difference each time they alternate -- which is why a host's own clock is never sent.
"""

from __future__ import annotations

from typing import Any

from ...clock import Clock


class ServerTime:
    """``clock`` (monotonic ns) as a Redis server's time: for tests only. Calls and attribute
    reads (``advance``, ``sleep``, ``set``...) go to ``clock``; the Limiter's waits use it too."""

    def __init__(self, clock: Clock):
        if not callable(clock):
            raise TypeError(f"ServerTime drives time with a clock (a callable), not {clock!r}")
        self.clock = clock

    def __call__(self) -> int:
        return self.clock()

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") or attr == "clock":  # never recurse before __init__ set it
            raise AttributeError(attr)
        return getattr(self.clock, attr)

    def __repr__(self) -> str:
        return f"ServerTime({self.clock!r})"
