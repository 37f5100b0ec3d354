"""Shedder: adaptive load shedding in the manner of go-zero's ``core/load/adaptiveshedder.go``,
over windows every worker on the host shares.

A request is dropped when the host is *hot* and the host is running more requests than it
has shown it can turn around:

    hot        = cpu >= cpu_threshold                    (and then overload_ns = now)
                 or (dropped_recently and now - overload_ns < cool_off)
    max_flight = max(1, max_pass * min_rt_ms * buckets_per_second / 1000)
                 * clamp((1000 - cpu) / (1000 - cpu_threshold), 0.1, 1)
    drop       = hot and avg_flying > max_flight and flying > max_flight

- ``max_pass``: the most requests that finished well in one bucket, ``min_rt_ms``: the shortest
  response time of a request served (1000 ms if none), exact -- both over the completed
  buckets of the shared windows (the current, partial bucket ignored, as go-zero does);
- ``flying``: requests in flight on the whole host, over live processes only
  (:class:`~shmwin.overload.inflight.InFlight`: a SIGKILLed worker's requests stop counting);
- ``avg_flying``: a moving average (beta = 0.9) of ``flying``, updated when a request ends;
- ``cpu``: host CPU in millicpu (:class:`~shmwin.overload.cpu.HostCpu`, or any callable).

Where this differs from go-zero, and why: ``min_rt`` is the real minimum response time, kept
by a :class:`~shmwin.Distribution` of the response times (go-zero takes the lowest mean of a
bucket, because its window keeps only sums: a bucket of 1 ms and 9 ms requests then says
5 ms, and max_flight comes out 5x too high); response times are kept in microseconds (go-zero
rounds up to whole milliseconds, which makes sub-millisecond handlers look 1 ms long);
``avg_flying``, the cool-off and the CPU reading are each process's own (each samples the
same host-wide values); ``max_pass``/``min_rt`` are read once per bucket (they only change
when a bucket completes).

Segments: ``NAME`` (passes, rt_us, drops), ``NAME.flying`` (in flight per process) and
``NAME.rt`` (each served request's response time, µs: a Distribution of the same buckets; a
shedder made without one, by an older shmwin, falls back to the lowest bucket mean).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ..backends.options import spelled_out
from ..clock import Clock, host_clock
from ..distribution import Distribution
from ..errors import GeometryMismatchError, ShmwinError, WindowNotFoundError
from ..geometry import resolution_name
from ..rate import NS_PER_S, Duration, to_ns
from ..window import Window
from .cpu import MILLICPU, HostCpu
from .described import described, window_facts
from .inflight import InFlight

if TYPE_CHECKING:
    from typing_extensions import Unpack

FIELDS = ("passes", "rt_us", "drops")
FLYING_SUFFIX = ".flying"
RT_SUFFIX = ".rt"
RT_RANGE_US = (1.0, 1e8)  # response times, 1 us .. 100 s, 1 %: the min is exact whatever its bin
FLYING_BETA = 0.9
DEFAULT_MIN_RT_MS = 1000.0
DEFAULT_CPU_THRESHOLD = 900  # millicpu
DEFAULT_COOL_OFF: Duration = "1s"
OVERLOAD_FACTOR_FLOOR = 0.1


class OverloadedError(ShmwinError):
    """The shedder dropped this request: the host is overloaded (answer 503)."""


class Sensing(TypedDict, total=False):
    """A shedder's keywords beyond its windows, each process's own (so ``attach`` takes them
    too): when the host is hot (``cpu_threshold``, millicpu), how long it stays so after an
    overloaded reading (``cool_off``), the CPU reading and the clock."""

    cpu_threshold: int
    cool_off: Duration
    cpu: Callable[[], int] | None
    clock: Clock | None


SENSING_DEFAULTS: dict[str, Any] = {"cpu_threshold": DEFAULT_CPU_THRESHOLD, "cool_off": DEFAULT_COOL_OFF}


@dataclass(frozen=True)
class ShedderStats:
    """The shedder's inputs and verdict, as read now."""

    cpu: int  # millicpu, this process's reading
    cpu_threshold: int
    hot: bool  # overloaded now, or within the cool-off after a drop (this process)
    in_flight: int  # the host, live processes only
    avg_in_flight: float  # this process's moving average
    max_pass: int
    min_rt_ms: float
    max_flight: float  # with the overload factor of the current cpu
    passes: int  # over the window
    drops: int  # over the window


def is_shedder(window: Any) -> bool:
    """Does this window hold a shedder's passes and response times?"""
    return bool(window.geometry.role == "shedder")  # recorded by Shedder() when it made it


def capacity(counts: Any) -> tuple[int, float | None]:
    """``(max_pass, min_rt_ms)`` from the completed buckets of a shedder's window ``counts``
    (the current, partial bucket is left out): the most requests served in one bucket (at
    least 1), and the lowest per-bucket mean response time (None: no request served)."""
    passes = counts.series("passes")[:-1]
    rt_us = counts.series("rt_us")[:-1]
    served = passes > 0
    max_pass = max(1, int(passes.max(initial=0)))
    if not served.any():
        return max_pass, None
    return max_pass, float((rt_us[served] / passes[served]).min()) / 1000


def min_rt_ms_of(rt: Distribution) -> float | None:
    """The shortest response time (ms) served in the completed buckets of ``rt``; None: none."""
    m = rt.summary((), completed=True)
    return None if m.count == 0 else m.min / 1000


def max_flight_of(max_pass: int, min_rt_ms: float | None, bucket_ns: int) -> float:
    """go-zero's ``maxFlight``: ``max(1, max_pass * min_rt_ms * buckets per ms)`` (before the
    overload factor); ``min_rt_ms`` None is its default, 1000 ms."""
    min_rt = DEFAULT_MIN_RT_MS if min_rt_ms is None else min_rt_ms
    return max(1.0, max_pass * min_rt * (NS_PER_S / bucket_ns / 1000))


def overload_factor(cpu: int, cpu_threshold: int) -> float:
    """go-zero's: the share of ``max_flight`` still let in, 1 at the threshold, 0.1 at most."""
    factor = (MILLICPU - cpu) / (MILLICPU - cpu_threshold)
    return min(1.0, max(OVERLOAD_FACTOR_FLOOR, factor))


class Ticket:
    """One admitted request: ``done()`` when it was served, ``fail()`` when it was not (go-zero's
    ``Pass``/``Fail``). Either ends it; later calls do nothing. A context manager: ``done()``
    on a normal exit, ``fail()`` on an exception."""

    __slots__ = ("_shedder", "_stamp", "open", "start_ns")

    def __init__(self, shedder: Shedder, start_ns: int, stamp: int | None):
        self._shedder, self.start_ns, self._stamp, self.open = shedder, start_ns, stamp, True

    def done(self) -> None:
        if self.open:
            self.open = False
            self._shedder._finish(self.start_ns, self._stamp, True)

    def fail(self) -> None:
        if self.open:
            self.open = False
            self._shedder._finish(self.start_ns, self._stamp, False)

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.done()
        else:
            self.fail()


class Shedder:
    """``Shedder("api")``: create the shared windows, or attach if they exist.

    ``ticket = shedder.allow()`` is None when the request must be shed, else a
    :class:`Ticket` to end with ``done()`` or ``fail()``; ``with shedder.admit():`` raises
    :class:`OverloadedError` instead. ``cpu`` is a callable returning millicpu (0..1000;
    default: :class:`~shmwin.overload.cpu.HostCpu` on ``clock``); ``clock`` is monotonic ns.
    """

    @spelled_out(Sensing, SENSING_DEFAULTS)
    def __init__(
        self,
        name: str,
        *,
        window: Duration = "5s",
        buckets: int = 50,
        max_processes: int = 128,
        flying_span: Duration = "10m",
        perm: int = 0o600,
        **options: Unpack[Sensing],
    ):
        cpu_threshold, cool_off_ns, cpu, clock = _sensing(options)
        _check_flying(max_processes, flying_span)  # before anything is created
        counts = Window._for_role("shedder", name, window, buckets, FIELDS, clock=clock, perm=perm)
        try:
            flying = InFlight(
                name + FLYING_SUFFIX, capacity=max_processes, span=flying_span, clock=clock, perm=perm,
                rescan=counts.bucket_ns / NS_PER_S,
            )  # fmt: skip
        except BaseException:  # all or none: the counts go if this call made them
            counts._discard()
            raise
        try:
            rt = Distribution(
                name + RT_SUFFIX, resolution_name(counts.geometry.rings[0]), value_range=RT_RANGE_US,
                clock=clock, perm=perm,
            )  # fmt: skip
        except BaseException:
            counts._discard()
            flying.window._discard()
            raise
        self._bind(counts, flying, cpu_threshold, cool_off_ns, cpu, clock, rt)

    @classmethod
    @spelled_out(Sensing, SENSING_DEFAULTS)
    def attach(cls, name: str, **options: Unpack[Sensing]) -> Shedder:
        """Attach to an existing shedder (for inspection: thresholds are each process's own)."""
        cpu_threshold, cool_off_ns, cpu, clock = _sensing(options)
        refusal = GeometryMismatchError(f"{name!r} is not a shedder's window (fields {FIELDS})")
        counts = Window._attach_as(name, is_shedder, refusal, clock=clock)
        try:
            flying = InFlight.attach(name + FLYING_SUFFIX, rescan=counts.bucket_ns / NS_PER_S, clock=clock)
        except BaseException:
            counts.close()
            raise
        try:
            rt: Distribution | None = Distribution.attach(name + RT_SUFFIX, clock=clock)
        except WindowNotFoundError:  # an older shmwin's shedder: the lowest bucket mean
            rt = None
        self = object.__new__(cls)
        self._bind(counts, flying, cpu_threshold, cool_off_ns, cpu, clock, rt)
        return self

    def _bind(
        self,
        counts: Window,
        flying: InFlight,
        cpu_threshold: int,
        cool_off_ns: int,
        cpu: Callable[[], int] | None,
        clock: Clock | None,
        rt: Distribution | None,
    ) -> None:
        self.window, self.flying, self.rt = counts, flying, rt
        self.name = counts.name
        self.cpu_threshold = cpu_threshold
        self.cool_off_ns = cool_off_ns
        self._clock: Clock = clock or host_clock()
        self._cpu: Callable[[], int] = cpu or HostCpu(clock=clock)
        self._add = counts.add
        self._bucket_ns = counts.bucket_ns
        self._buckets_per_ms = NS_PER_S / self._bucket_ns / 1000  # go-zero's windowScale
        self._avg_flying = 0.0
        self._overload_ns: int | None = None
        self._dropped_recently = False
        self._epoch = -1  # the bucket max_pass and min_rt were read in
        self._max_pass, self._min_rt_ms = 1, DEFAULT_MIN_RT_MS

    # -- the decision -----------------------------------------------------------------------------

    def allow(self) -> Ticket | None:
        """A :class:`Ticket` for a request let in, or None when it must be shed."""
        now_ns = self._clock()
        if self._should_drop(now_ns):
            self._dropped_recently = True
            self._add(1, "drops")
            return None
        return Ticket(self, now_ns, self.flying.begin())

    def admit(self) -> Ticket:
        """:meth:`allow`, raising :class:`OverloadedError` when the request must be shed."""
        ticket = self.allow()
        if ticket is None:
            raise OverloadedError(f"shedder {self.name!r} is shedding load")
        return ticket

    def _should_drop(self, now_ns: int) -> bool:
        cpu = self._cpu()
        if cpu >= self.cpu_threshold:
            self._overload_ns = now_ns
        elif not self._still_hot(now_ns):
            return False
        max_flight = self._max_flight(now_ns) * overload_factor(cpu, self.cpu_threshold)
        return self._avg_flying > max_flight and self.flying.count() > max_flight

    def _still_hot(self, now_ns: int) -> bool:
        """Within ``cool_off`` of the last overloaded reading, and this process has dropped since."""
        if not self._dropped_recently or self._overload_ns is None:
            return False
        if now_ns - self._overload_ns < self.cool_off_ns:
            return True
        self._dropped_recently = False
        return False

    def _max_flight(self, now_ns: int) -> float:
        """``max(1, max_pass * min_rt_ms * buckets per ms)``, the completed buckets read once each."""
        epoch = now_ns // self._bucket_ns
        if epoch != self._epoch:
            self._epoch = epoch
            self._max_pass, min_rt_ms = capacity(self.window)
            if self.rt is not None:  # the real minimum, not the lowest bucket mean
                min_rt_ms = min_rt_ms_of(self.rt)
            self._min_rt_ms = DEFAULT_MIN_RT_MS if min_rt_ms is None else min_rt_ms
        return max(1.0, self._max_pass * self._min_rt_ms * self._buckets_per_ms)

    def _finish(self, start_ns: int, stamp: int | None, passed: bool) -> None:
        """End a request: out of flight, the moving average, and (served) its pass and time."""
        now_ns = self._clock()
        self.flying.end(stamp)
        self._avg_flying = self._avg_flying * FLYING_BETA + self.flying.count() * (1 - FLYING_BETA)
        if passed:
            rt_us = math.ceil(max(0, now_ns - start_ns) / 1000)
            self._add(rt_us, "rt_us")
            self._add(1, "passes")
            if self.rt is not None:
                self.rt.record(float(rt_us))

    # -- visibility -------------------------------------------------------------------------------

    def stats(self) -> ShedderStats:
        now_ns = self._clock()
        cpu = self._cpu()
        hot = cpu >= self.cpu_threshold or (
            self._dropped_recently
            and self._overload_ns is not None
            and now_ns - self._overload_ns < self.cool_off_ns
        )
        max_flight = self._max_flight(now_ns) * overload_factor(cpu, self.cpu_threshold)
        totals = self.window.totals()
        return ShedderStats(
            cpu, self.cpu_threshold, hot, self.flying.count(rescan=True), self._avg_flying,
            self._max_pass, self._min_rt_ms, max_flight, int(totals["passes"]), int(totals["drops"]),
        )  # fmt: skip

    def describe(self) -> dict[str, Any]:
        """Everything an inspector or an exporter shows, as plain values."""
        return {
            **window_facts("shedder", self.window),
            **asdict(self.stats()),
            "processes": self.flying.processes(),
        }

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        """Detach this process; the windows live on for everyone else."""
        self.window.close()
        self.flying.close()
        if self.rt is not None:
            self.rt.close()

    def unlink(self) -> bool:
        """Remove both windows for everyone (idempotent)."""
        first = self.window.unlink()
        rt = self.rt.unlink() if self.rt is not None else False
        return bool(self.flying.unlink() or first or rt)

    def __repr__(self) -> str:
        return f"<shmwin.Shedder {self.name!r} cpu_threshold={self.cpu_threshold}>"


def describe(name: str) -> dict[str, Any] | None:
    """``Shedder.attach(name).describe()``, or None if ``name`` is not a shedder."""
    return described(lambda: Shedder.attach(name))


def _sensing(options: Sensing) -> tuple[int, int, Callable[[], int] | None, Clock | None]:
    """(cpu_threshold, cool_off ns, cpu, clock) of a shedder's keywords, checked."""
    cpu_threshold = options.get("cpu_threshold", DEFAULT_CPU_THRESHOLD)
    _check_threshold(cpu_threshold)
    cool_off_ns = to_ns(options.get("cool_off", DEFAULT_COOL_OFF), "cool_off")
    return cpu_threshold, cool_off_ns, options.get("cpu"), options.get("clock")


def _check_flying(max_processes: int, flying_span: Duration) -> None:
    if isinstance(max_processes, bool) or not isinstance(max_processes, int) or max_processes < 1:
        raise ValueError(f"max_processes must be an int >= 1, not {max_processes!r}")
    if to_ns(flying_span, "flying_span") % 10:
        raise ValueError(f"flying_span must be a whole number of 10 ns (10 buckets), not {flying_span!r}")


def _check_threshold(cpu_threshold: int) -> None:
    if (
        isinstance(cpu_threshold, bool)
        or not isinstance(cpu_threshold, int)
        or not 0 <= cpu_threshold < MILLICPU
    ):
        raise ValueError(f"cpu_threshold is millicpu, an int in 0..{MILLICPU - 1}, not {cpu_threshold!r}")


__all__ = [
    "FIELDS",
    "OverloadedError",
    "Shedder",
    "ShedderStats",
    "Ticket",
    "capacity",
    "describe",
    "is_shedder",
    "max_flight_of",
    "min_rt_ms_of",
    "overload_factor",
]
