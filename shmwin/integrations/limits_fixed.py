"""limits' fixed window in shared memory: a key's window starts at its first hit.

limits' storages (memory, Redis, memcached) start a key's window at the first hit and end
it one period later, exactly; the next hit after that starts the next window. Here the same
holds across processes, with two segments per period P and only atomic native calls. Slot
``s`` is the wall clock divided by P; a window that starts in slot ``s`` ends in ``s + 1``.

``PREFIX.fixedstart.P`` records when windows start. Slot ``s`` has a record
``KEY#(s mod 4)``, a Limiter whose limit is int64's largest. A process starts a window by
adding ``BASE + 1 + t0`` to it: the add is a native check-and-count, so it succeeds only on
an empty record and exactly one process starts the window. ``BASE`` alone is a seal: "no
window starts in this slot". The window live at ``now`` (slot ``s``) started in slot
``s - 1`` or ``s``; before starting one in ``s``, a process seals an empty ``s - 1``, so
that a process whose clock read lagged cannot start an overlapping one there. So at most
one window is live per key, every process agrees on its start, and a process killed
between two calls costs at most its own hit. A record is needed for at most a period (and
a clock read's lag) after it is written: it is forgotten 1.25 to 1.57 periods after, well
before its name comes round again 4 slots later.

``PREFIX.fixed.P`` counts, under ``KEY@(s mod 2)`` for a window started in slot ``s``, in a
ring of two buckets of P. Every call on a window is made at its start ``t0`` (the counts'
clock is pinned to it), so all its hits land in one bucket whatever the clock of the
process that counts them, and its total is exactly the window's hits: the window before
it, in slot ``s - 1``, counts under the other name, and the one before that is two buckets
old. The entry goes idle two buckets after ``t0``'s, once the window is over.

Memory per key: two count entries and up to four records, with the same names from one
window to the next (two or three hold anything at a time).
"""

from __future__ import annotations

import dataclasses
import threading

from ..clock import Clock
from ..errors import ShmwinError, WindowNotFoundError
from ..geometry import limiter_geometry, window_geometry
from ..keys import Key
from ..layout import Geometry
from ..limiter import Limiter
from ..rate import MAX_LIMIT, Rate
from ..window import Window

BASE = 2**62  # a record holds 0 (empty), BASE (sealed) or BASE + 1 + t0 (a window started at t0)
_SEALED = -1
_RECORD_NAMES = 4  # record names per key, by slot: a name comes round after 4 slots
_TRIES = 16  # each retry means another process decided a record meanwhile


class FixedWindows:
    """The fixed windows of one period, for one storage (see the module docstring)."""

    def __init__(self, counts: Window, pinned: PinnedClock, starts: Limiter, period_ns: int, clock: Clock):
        self.counts, self.pinned, self.starts = counts, pinned, starts
        self.period_ns, self.clock = period_ns, clock

    @classmethod
    def open(
        cls, names: tuple[str, str], period_ns: int, clock: Clock, capacity: int | None, create: bool
    ) -> FixedWindows | None:
        """Create or attach (``create``), or attach only: None if the segments are not there.
        ``names``: the counts' and the records' segments. ``capacity`` is in keys: a key
        holds up to 2 count entries and 4 live records."""
        counts_name, starts_name = names
        pinned = PinnedClock(clock)
        if not create:
            try:
                counts = Window.attach(counts_name, clock=pinned)
            except WindowNotFoundError:
                return None
            try:
                return cls(counts, pinned, Limiter.attach(starts_name, clock=clock), period_ns, clock)
            except WindowNotFoundError:
                counts.close()
                return None
        want = _counts_geometry(period_ns, None if capacity is None else 2 * capacity)
        counts = Window.open_geometry(counts_name, want, clock=pinned)
        try:
            starts = Limiter._open_geometry(starts_name, _starts_geometry(period_ns, capacity), clock=clock)
        except BaseException:
            counts.close()
            raise
        return cls(counts, pinned, starts, period_ns, clock)

    # -- the window live now ------------------------------------------------------------------

    def _record(self, key: str, slot: int) -> int | None:
        """The start recorded in ``slot``: None (empty), _SEALED, or t0."""
        used, _ = counted(self.starts, f"{key}#{slot % _RECORD_NAMES}", detail=False)
        return None if used == 0 else _SEALED if used == BASE else used - BASE - 1

    def _decide(self, key: str, slot: int, value: int) -> bool:
        """Write ``value`` in an empty record; False if another process decided it first."""
        return bool(self.starts.hit(f"{key}#{slot % _RECORD_NAMES}", value))

    def _count_key(self, key: str, t0: int) -> str:
        return f"{key}@{t0 // self.period_ns % 2}"

    def start_of(self, key: str, create: bool) -> int | None:
        """When ``key``'s live window started (ns); with ``create``, start one now if none is."""
        now_ns = int(self.clock())
        slot = now_ns // self.period_ns
        for _ in range(_TRIES):
            before = self._record(key, slot - 1)
            if before is not None and before != _SEALED and now_ns < before + self.period_ns:
                return before  # started last slot, still live
            if before is None and create and not self._decide(key, slot - 1, BASE):
                continue  # someone started (or sealed) the last slot meanwhile: look again
            current = self._record(key, slot)
            if current == _SEALED:  # our clock read lags one who already moved past this slot
                slot += 1
                now_ns = max(now_ns, slot * self.period_ns)
                continue
            if current is not None:
                return current
            if not create:
                return None
            if self._decide(key, slot, BASE + 1 + now_ns):
                return now_ns
        raise ShmwinError(f"the fixed window of {key!r} kept changing under {_TRIES} tries; gave up")

    # -- what limits asks -----------------------------------------------------------------------

    def incr(self, key: str, amount: int) -> int:
        t0 = self.start_of(key, create=True)
        assert t0 is not None
        with self.pinned.at(t0):
            return int(self.counts.add_and_total(amount, key=self._count_key(key, t0)))

    def get(self, key: str) -> int:
        t0 = self.start_of(key, create=False)
        if t0 is None:
            return 0
        with self.pinned.at(t0):  # adding 0 reads the total in one native call
            return int(self.counts.add_and_total(0, key=self._count_key(key, t0)))

    def end_ns(self, key: str) -> int | None:
        """When ``key``'s live window ends, or None if it has none."""
        t0 = self.start_of(key, create=False)
        return None if t0 is None else t0 + self.period_ns

    def clear(self, key: str) -> None:
        """Forget the key's windows: its next hit starts a new one."""
        slot = int(self.clock()) // self.period_ns
        for s in (slot - 1, slot, slot + 1):
            t0 = self._record(key, s)
            if t0 is not None and t0 != _SEALED:
                with self.pinned.at(t0):
                    self.counts.clear(self._count_key(key, t0))
            self.starts.clear(f"{key}#{s % _RECORD_NAMES}")

    def reset(self) -> int:
        """Empty both segments; the number of keys whose live window held hits."""
        live = set()
        keys = self.counts.keys()
        for entry in keys:
            key = (entry.decode() if isinstance(entry, bytes) else entry).rpartition("@")[0]
            if key not in live and self.get(key):
                live.add(key)
        self.counts.reset()
        self.starts.window.reset()
        return len(live)

    def close(self) -> None:
        self.counts.close()
        self.starts.close()


def counted(limiter: Limiter, key: Key, detail: bool = True) -> tuple[int, int]:
    """(hits counted, ns until the oldest is forgotten) for a one-rate limiter: one native
    call, the backend contract's ``check`` (``Limiter.stats`` builds what is not needed here)."""
    _, used, reset_ns, _ = limiter._backend.check(key, 0, False, detail)
    return int(used[0]), int(reset_ns[0])


class PinnedClock:
    """The counts' clock: the window start a call is about (per thread), else ``clock``."""

    def __init__(self, clock: Clock):
        self._clock = clock
        self._pinned = threading.local()
        # the counts' header says which clock they are written with: the wrapped one's
        self.clock_kind: str = getattr(clock, "clock_kind", "monotonic")

    def __call__(self) -> int:
        pinned: int | None = getattr(self._pinned, "ns", None)
        return int(self._clock()) if pinned is None else pinned

    def at(self, ns: int) -> PinnedClock:
        """``with pinned.at(t0):`` calls inside read ``t0`` (a plain context manager: cheap)."""
        self._pinned.ns = ns
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        self._pinned.ns = None


def _starts_geometry(period_ns: int, capacity: int | None) -> Geometry:
    """The start records: a limiter whose limit is int64's largest, each record kept 1.25 to
    1.57 periods (5/4 of one, in 4 whole-nanosecond buckets), ``4 * capacity`` records at
    most (None: a growing table). Its role tells the tools its sums mean nothing."""
    record = Rate(MAX_LIMIT, -(-5 * period_ns // 16) * 4)
    g = limiter_geometry([record], 4, None if capacity is None else 4 * capacity, False)
    return dataclasses.replace(g, role="fixed-starts")


def _counts_geometry(period_ns: int, capacity: int | None) -> Geometry:
    """A keyed window of two buckets of the period: ``capacity`` keys at most, or a table
    that grows with the keys in use (None)."""
    return window_geometry(
        f"{2 * period_ns}ns", 2, None, ("hits",), "int64", None, None, capacity, keyed=True
    )
