"""A pyrate-limiter (4.x) bucket in shared memory: :class:`ShmwinBucket`.

pyrate-limiter's seam is its bucket class (``AbstractBucket``: ``put``, ``leak``, ``flush``,
``count``, ``peek``). Its ``MultiprocessBucket`` is shared only by the children of one parent,
through a ``multiprocessing`` lock and list; this bucket is a key of an exact shmwin
:class:`~shmwin.Limiter` (``exact=``: each rate keeps the key's hit times), so every process
of the host that opens the same name -- forked, spawned, or started on its own -- shares it,
and ``put`` checks and counts every rate in one native section under the key's lock.

What differs from pyrate's list-backed buckets, by design:

- A hit is forgotten exactly one period (of the longest rate) after it, by the core itself:
  ``leak`` has nothing left to remove and returns 0, and ``count`` is the hits of the
  longest period (not the items put since the last ``leak``).
- The log keeps hit *times*, not items: ``peek`` answers ``RateItem(key, time, 1)``, one per
  hit, newest first (an item of weight 3 shows as three).
- Only pyrate's default algorithm, the sliding-window log, is offered.
- Time is the host's ``CLOCK_MONOTONIC`` in milliseconds (the bucket's ``now()``, which the
  limiter stamps items with): the same for every process of the host.
- A rate above 4,096 hits keeps 4,096 times a key; past them its oldest two merge into the
  later time (forgotten later, never sooner: strict, never over).
"""

from __future__ import annotations

import threading
from inspect import isawaitable
from typing import Any

from pyrate_limiter import AbstractBucket, AbstractClock, Decision, Rate, RateItem
from pyrate_limiter.abstracts.algorithm import ADMITTED, LogAlgorithm, SlidingWindowLog

from ..clock import host_clock
from ..geometry import MAX_LOG_ENTRIES
from ..limiter import Limiter
from ..rate import NS_PER_S
from ..rate import Rate as ShmRate

NS_PER_MS = 1_000_000


class HostClock(AbstractClock):
    """The host's CLOCK_MONOTONIC in ms, as shmwin reads it in every process."""

    def __init__(self) -> None:
        self._ns = host_clock()

    def now(self) -> int:
        return int(self._ns()) // NS_PER_MS


class ShmwinBucket(AbstractBucket):
    """``ShmwinBucket(rates, "api")``: create the bucket (its shmwin limiter ``"api"``), or attach
    to it if it exists with the same rates. ``key`` picks the bucket within the limiter (one
    per user, say, from a ``BucketFactory``); ``capacity`` caps its keys (default: grows)."""

    is_async = False

    def __init__(
        self, rates: list[Rate], name: str, *, key: str = "bucket", capacity: int | None = None,
        algorithm: LogAlgorithm | None = None,
    ):  # fmt: skip
        super().__init__()
        if algorithm is not None and type(algorithm) is not SlidingWindowLog:
            raise ValueError(
                f"ShmwinBucket keeps pyrate's sliding-window log only, not {type(algorithm).__name__}: "
                "its hit times live in shared memory and are counted over each rate's last interval"
            )
        self.rates = rates  # pyrate's setter: sorted by interval and validated
        self._algorithm = SlidingWindowLog()
        self._clock = HostClock()
        self.name, self.key, self._capacity = name, key, capacity
        self._at = threading.local()  # at_ns: what the limiter's clock reads, per thread: an
        # item's time (put) or the bucket's now (count, peek), set right before each call
        self._skew_ns = 0  # the last item's time less the clock's then: the bucket's now runs from it
        self._last_ns = 0  # the last item's time: the bucket's now under a clock read only by awaiting
        shm_rates: list[str | ShmRate] = [ShmRate(r.limit, r.interval * NS_PER_MS) for r in self.rates]
        entries = min(max(r.limit for r in self.rates), MAX_LOG_ENTRIES)
        self._limiter = Limiter(
            name, shm_rates, exact=entries, capacity=capacity, on_full="deny", clock=self._instant,
            decisions=False,
        )  # fmt: skip
        # the limiter's rings, in its order (shortest period first, as pyrate's rates)
        self._ring_of = {r.period_ns: i for i, r in enumerate(self._limiter.rates)}

    def _instant(self) -> int:
        at_ns = getattr(self._at, "at_ns", None)  # None: a call of this thread's before any read
        return self._clock_now_ns() if at_ns is None else int(at_ns)

    def _clock_ms(self) -> int | None:
        """The clock's ms, or None for a clock that answers only when awaited (pyrate's async
        clocks: its limiter awaits it to stamp items; a sync put cannot)."""
        now = self._clock.now()
        if isawaitable(now):
            close = getattr(now, "close", None)  # a coroutine never awaited: closed, no warning
            if close is not None:
                close()
            return None
        return int(now)

    def _clock_now_ns(self) -> int:
        """The bucket's now: the clock shifted by the last item's skew, or under a clock read
        only by awaiting, the last item's time."""
        clock_ms = self._clock_ms()
        return self._last_ns if clock_ms is None else clock_ms * NS_PER_MS + self._skew_ns

    def _read_now(self) -> None:
        """Readers (``count``, ``peek``) read at the bucket's time: the clock, shifted as far as
        the last item put here was from it (0 for items stamped by ``now()``, as pyrate's
        limiter stamps them; an item of a made-up time moves the readers with it)."""
        self._at.at_ns = self._clock_now_ns()

    # -- pyrate's bucket contract ----------------------------------------------------------

    def put(self, item: RateItem) -> bool:
        """Count ``item.weight`` hits at ``item.timestamp`` if every rate leaves room for them;
        a refusal records which rate refused and when the item fits (pyrate 4.5's contract:
        ``waiting`` then reads no storage)."""
        if item.weight == 0:
            return self._record(item, ADMITTED)
        self._at.at_ns = at_ns = item.timestamp * NS_PER_MS
        clock_ms, self._last_ns = self._clock_ms(), at_ns
        self._skew_ns = 0 if clock_ms is None else at_ns - clock_ms * NS_PER_MS
        if self._limiter.hit(self.key, item.weight):
            return self._record(item, ADMITTED)
        return self._record(item, self._refusal(item))

    def _refusal(self, item: RateItem) -> Decision:
        """Which rate refused, and when ``item`` would fit (read after the refusal, lock-free:
        advice for a waiting limiter, as pyrate's own buckets give it)."""
        stats = self._limiter.stats_all(self.key)
        short = ((r, s) for r, s in zip(self.rates, stats, strict=True) if s.remaining < item.weight)
        rate, stat = next(short, (self.rates[-1], stats[-1]))
        if item.weight > rate.limit:
            return Decision(failing_rate=rate)
        offset = rate.limit - item.weight  # the hit whose leaving makes room (pyrate's offset)
        if offset == stat.used - 1:  # the oldest counted: its time is in the stats (leaves 1 ns past P)
            reset_ns = round(stat.reset_after * NS_PER_S)
            blocking: int | None = (self._at.at_ns + reset_ns - 1) // NS_PER_MS - rate.interval
        else:
            blocking = self._newest_ms(rate, offset)
        wait_ms = self._algorithm.retry_after(rate, item.timestamp, blocking)
        return Decision(failing_rate=rate, retry_after_ms=wait_ms)

    def _newest_ms(self, rate: Rate, index: int) -> int | None:
        """The time (ms) of the ``index``-th newest hit under ``rate`` (0: the newest), or None:
        walked from the newest entry, each entry ``hits`` hits at one time."""
        entries = self._limiter.window.hit_times(self.key, self._ring_of[rate.interval * NS_PER_MS])
        for at_ns, hits in reversed(entries):
            if index < hits:
                return at_ns // NS_PER_MS
            index -= hits
        return None

    def leak(self, current_timestamp: int | None = None) -> int:
        """Nothing to leak: the core forgets each hit exactly one period after it."""
        return 0

    def flush(self) -> None:
        self._limiter.clear(self.key)
        self.failing_rate = None
        self._last_wait = None

    def count(self) -> int:
        """The hits of the longest period, now."""
        self._read_now()
        return sum(hits for _, hits in self._limiter.window.hit_times(self.key, len(self.rates) - 1))

    def peek(self, index: int) -> RateItem | None:
        """The ``index``-th newest hit (0: the newest), or None."""
        if index < 0:
            return None
        self._read_now()
        at_ms = self._newest_ms(self.rates[-1], index)
        return None if at_ms is None else RateItem(self.key, at_ms)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._limiter.close()

    def unlink(self) -> bool:
        """Remove the bucket's limiter for every process: True if it was there."""
        return self._limiter.unlink()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled as its name: a process that unpickles it attaches to the same segment."""
        return {"rates": self.rates, "name": self.name, "key": self.key, "capacity": self._capacity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        rates, name, key, capacity = state["rates"], state["name"], state["key"], state["capacity"]
        ShmwinBucket.__init__(self, rates, name, key=key, capacity=capacity)

    def __repr__(self) -> str:
        return f"ShmwinBucket({self.name!r}, key={self.key!r}, rates={self.rates!r})"


__all__ = ["HostClock", "ShmwinBucket"]
