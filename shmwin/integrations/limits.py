"""A `limits <https://limits.readthedocs.io>`_ storage in shared memory: ``shm://NAME``.

``import shmwin.integrations.limits`` registers the scheme; then Flask-Limiter,
slowapi or plain ``limits`` get limits shared exactly by every worker on the host
by changing one setting::

    Limiter(get_remote_address, app=app, storage_uri="shm://myapp")   # Flask-Limiter
    Limiter(key_func=get_remote_address, storage_uri="shm://myapp")   # slowapi

Options (URI query or storage options): ``capacity`` (live keys per limit,
default 10000) and ``buckets`` (per window, default 20).

Each (strategy, limit, period) gets its own segment ``NAME.<kind>.<limit>.<seconds>``,
created on first use. How the strategies map onto shmwin's bucket rings:

* **moving window** and **sliding window counter** are both served by shmwin's
  strict sliding window: a hit is admitted only if the hits of the last
  period, at ``buckets`` granularity, leave room, and it is counted in the same
  locked step. Never more than the limit in any period; a hit is forgotten
  between one period and one period plus a bucket after it happened. (limits'
  own sliding window counter *approximates* with two weighted fixed windows;
  this storage answers exactly, and reports its count as the "current" window
  so limits' weighting leaves it unchanged.)
* **fixed window** counts in windows aligned to multiples of the period on the
  monotonic clock (limits' memory storage starts a window at the first hit).
  As in every limits storage, a hit past the limit is still counted.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

from limits.storage import MovingWindowSupport, SlidingWindowCounterSupport, Storage

from ..errors import ShmwinError
from ..limiter import Limiter
from ..rate import Rate
from ..segment import names
from ..window import Window

NS_PER_S = 1_000_000_000


class ShmStorage(Storage, MovingWindowSupport, SlidingWindowCounterSupport):
    """limits storage backed by shmwin segments; see the module docstring."""

    STORAGE_SCHEME = ["shm"]  # noqa: RUF012  (limits reads it as a plain class attribute)

    def __init__(self, uri: str, wrap_exceptions: bool = False, **options: Any):
        parsed = urllib.parse.urlparse(uri)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        self.prefix = (parsed.netloc + parsed.path).strip("/") or "limits"
        self.capacity = int(options.pop("capacity", query.get("capacity", 10_000)))
        self.buckets = int(options.pop("buckets", query.get("buckets", 20)))
        super().__init__(uri, wrap_exceptions=wrap_exceptions, **options)
        self._limiters: dict[tuple[str, int, int], Limiter] = {}
        self._fixed: dict[int, Window] = {}

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return ShmwinError

    # -- segments, opened lazily and kept for the life of the process ---------------------------

    def _limiter(self, kind: str, limit: int, expiry: int) -> Limiter:
        found = self._limiters.get((kind, limit, expiry))
        if found is None:
            found = Limiter(
                f"{self.prefix}.{kind}.{limit}.{expiry}",
                Rate(limit, int(expiry * NS_PER_S)),
                capacity=self.capacity,
                buckets=self.buckets,
            )
            self._limiters[(kind, limit, expiry)] = found
        return found

    def _window(self, expiry: int) -> Window:
        found = self._fixed.get(expiry)
        if found is None:
            found = Window(f"{self.prefix}.fixed.{expiry}", span=expiry, buckets=1, capacity=self.capacity)
            self._fixed[expiry] = found
        return found

    def _segments(self) -> list[str]:
        return [n for n in names() if n.startswith(self.prefix + ".")]

    # -- fixed window ---------------------------------------------------------------------------

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        return int(self._window(expiry).add_and_total(amount, key=key))

    def get(self, key: str) -> int:
        return sum(int(w.total(key=key)) for w in self._fixed_windows())

    def get_expiry(self, key: str) -> float:
        for w in self._fixed_windows():
            if w.total(key=key):
                left_ns = w.bucket_ns - time.monotonic_ns() % w.bucket_ns
                return time.time() + left_ns / NS_PER_S
        return time.time()

    def _fixed_windows(self) -> list[Window]:
        for name in self._segments():
            kind, _, seconds = name[len(self.prefix) + 1 :].partition(".")
            if kind == "fixed" and seconds.isdigit():
                self._window(int(seconds))
        return list(self._fixed.values())

    # -- moving window and sliding window counter: shmwin's strict window ----------------------

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self._limiter("moving", limit, expiry).hit(key, amount)

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        stats = self._limiter("moving", limit, expiry).stats(key)
        if not stats.used:
            return time.time(), 0
        return time.time() + stats.reset_after - expiry, stats.used

    def acquire_sliding_window_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        return self._limiter("sliding", limit, expiry).hit(key, amount)

    def get_sliding_window(self, key: str, expiry: int) -> tuple[int, float, int, float]:
        for (kind, _, period), lim in self._limiters.items():
            if kind == "sliding" and period == expiry:
                stats = lim.stats(key)
                if stats.used:
                    return 0, 0.0, stats.used, min(stats.reset_after, expiry * 0.999)
        return 0, 0.0, 0, 0.0

    def clear_sliding_window(self, key: str, expiry: int) -> None:
        self.clear(key)

    # -- housekeeping ---------------------------------------------------------------------------

    def clear(self, key: str) -> None:
        for name in self._segments():
            try:
                with Window.attach(name) as w:
                    w._keyed()  # only keyed segments hold keys
                    if w.geometry.kind == "limiter":
                        with Limiter.attach(name) as lim:
                            lim.clear(key)
                    else:
                        w.clear(key)
            except (ShmwinError, ValueError):
                continue

    def reset(self) -> int | None:
        cleared = 0
        for name in self._segments():
            try:
                with Window.attach(name) as w:
                    w.reset()
                    cleared += 1
            except ShmwinError:
                continue
        return cleared

    def check(self) -> bool:
        return True


__all__ = ["ShmStorage"]
