"""Host CPU usage in millicpu (0 idle .. 1000 every core busy), sampled from ``/proc/stat``.

What the shedder asks "is the machine overloaded?". go-zero's ``stat.CpuUsage()`` samples
every 250 ms in a goroutine and smooths with an exponential moving average; here a sample
is taken lazily, when a caller asks and ``interval`` has passed on the clock, so there is no
thread. The first reading is taken as it is (no ramp up from 0), later ones are smoothed:
``usage = previous * beta + sample * (1 - beta)``. go-zero uses beta = 0.95 (about 5 s of
memory); the default here, 0.8, remembers about 1 s, so a freshly recycled worker is in
step with the others soon.

Limitations: the whole host (every core), not a cgroup's quota; a process's first reading
comes one ``interval`` after its first call (until then usage is 0, i.e. not overloaded).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..clock import Clock
from ..rate import Duration, to_ns

MILLICPU = 1000


def read_proc_stat() -> str:
    """The first line of ``/proc/stat`` (the sum over every core)."""
    with open("/proc/stat", encoding="ascii") as f:
        return f.readline()


def busy_and_total(line: str) -> tuple[int, int]:
    """``(busy, total)`` clock ticks from the ``cpu`` line of ``/proc/stat``.

    Idle is ``idle + iowait``; busy is ``user + nice + system + irq + softirq + steal``
    (guest time is already inside user and nice, so it is not added again).
    """
    parts = line.split()
    if not parts or parts[0] != "cpu" or len(parts) < 5:
        raise ValueError(f"not the 'cpu' line of /proc/stat: {line[:80]!r}")
    ticks = [int(p) for p in parts[1:9]] + [0] * (9 - len(parts))
    user, nice, system, idle, iowait, irq, softirq, steal = ticks[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


class HostCpu:
    """``HostCpu()()`` -> host CPU usage in millicpu, sampled at most every ``interval``.

    ``read_stat`` returns the ``cpu`` line of ``/proc/stat`` (tests pass their own);
    ``clock`` is monotonic ns (a ``ManualClock`` in tests).
    """

    def __init__(
        self,
        *,
        interval: Duration = "250ms",
        beta: float = 0.8,
        clock: Clock | None = None,
        read_stat: Callable[[], str] | None = None,
    ):
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 <= beta < 1:
            raise ValueError(f"beta must be in [0, 1), not {beta!r}")
        self.interval_ns = to_ns(interval, "interval")
        self.beta = float(beta)
        self._clock: Clock = clock or time.monotonic_ns
        self._read = read_stat or read_proc_stat
        self._last: tuple[int, int] | None = None
        self._next_ns = 0
        self._usage: float | None = None

    def __call__(self) -> int:
        now_ns = self._clock()
        if self._last is None or now_ns >= self._next_ns:
            self._sample(now_ns)
        return 0 if self._usage is None else round(self._usage)

    @property
    def known(self) -> bool:
        """Has a usage been measured yet (two samples, one interval apart)?"""
        return self._usage is not None

    def _sample(self, now_ns: int) -> None:
        busy, total = busy_and_total(self._read())
        last, self._last = self._last, (busy, total)
        self._next_ns = now_ns + self.interval_ns
        if last is None or total <= last[1]:
            return  # a first sample, or no tick has passed: nothing measured
        sample = MILLICPU * max(0, busy - last[0]) / (total - last[1])
        sample = min(float(MILLICPU), sample)
        if self._usage is None:
            self._usage = sample
        else:
            self._usage = self._usage * self.beta + sample * (1 - self.beta)


__all__ = ["MILLICPU", "HostCpu", "busy_and_total", "read_proc_stat"]
