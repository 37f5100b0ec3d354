"""InFlight: how many requests are running right now on the host, over live processes only.

A keyed window with one key per process, ``"<pid>.<start ticks>"``: a request adds +1 to its
process's key when it starts and -1 *into the same bucket* when it ends (``add_many(at=)``
when the end falls in a later bucket), so the two cancel exactly and never expire apart.
The count is the sum over the keys of processes that are alive:

- a SIGKILLed worker's requests never end, but its key stops counting the moment the kernel
  says it has exited -- liveness is a ``pidfd`` (``os.pidfd_open``) polled for exit, which a
  reused pid cannot fool; the start ticks of ``/proc/<pid>/stat`` are compared once, when the
  pidfd is opened. (Without pidfds: ``kill(pid, 0)`` plus the start ticks, every time.)
- a reader that finds a dead process's key clears it, freeing the entry.

A request running longer than ``span`` minus one bucket (9 minutes by default) leaves the
count when its +1 ages out; its -1 is then not written.

Costs: ``begin``/``end`` are one ``add`` each; ``count()`` is one native read and one poll per
live process, plus a scan for new processes (``keys()``) at most once per ``rescan``.
"""

from __future__ import annotations

import os
import select
import threading
from contextlib import suppress
from typing import Any

from ..clock import Clock, host_clock
from ..errors import KeyTableFullError, WindowClosedError
from ..rate import Duration, to_ns
from ..window import Window

FIELD = "flying"
_MARGIN_NS = 1_000_000_000  # a fast add must land in the bucket its stamp names: stay clear of its end


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks since boot."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return int(stat.rpartition(b")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


_self: dict[str, str] = {}


def self_key() -> str:
    """This process's key, ``"<pid>.<start ticks>"`` (recomputed in a forked child)."""
    key = _self.get("key")
    if key is None:
        pid = os.getpid()
        key = _self["key"] = f"{pid}.{_start_ticks(pid) or 0}"
    return key


os.register_at_fork(after_in_child=_self.clear)


class Liveness:
    """Is the process behind a key still the one that wrote it, and alive? Thread-safe: the
    pidfd is polled and closed under a lock (a poll object cannot be polled concurrently, and
    a closed descriptor must never be polled: its number may already name another file)."""

    def __init__(self, key: str):
        self.pid = self.ticks = 0
        self.dead = False
        self._lock = threading.Lock()
        self._poll: Any = None
        self._fd: int | None = None
        pid_text, _, ticks_text = key.partition(".")
        try:
            self.pid, self.ticks = int(pid_text), int(ticks_text)
        except ValueError:
            self.dead = True  # not a process key
            return
        try:
            self._fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self.dead = True
            return
        except (OSError, AttributeError):  # no pidfds here: kill(0) and /proc every time
            self._fd = None
        if self._reused():
            self.close()
            self.dead = True
        elif self._fd is not None:
            self._poll = select.poll()
            self._poll.register(self._fd, select.POLLIN)

    def _reused(self) -> bool:
        ticks = _start_ticks(self.pid)
        return bool(self.ticks and ticks is not None and ticks != self.ticks)

    def alive(self) -> bool:
        if self.dead:
            return False
        with self._lock:
            if self._poll is not None:
                events = self._poll.poll(0)
                if events and events[0][1] & select.POLLIN:  # the process has exited (zombie or reaped)
                    self._close()
                    self.dead = True
                return not self.dead
        try:  # no pidfd (none here, or closed by a reader that forgot this key)
            os.kill(self.pid, 0)
        except ProcessLookupError:
            self.dead = True
        except PermissionError:
            pass  # someone else's live process: leave it to the start-ticks check
        if not self.dead and (self._reused() or _is_zombie(self.pid)):
            self.dead = True
        return not self.dead

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        """Caller holds the lock."""
        if self._fd is not None:
            with suppress(OSError):
                os.close(self._fd)
            self._fd, self._poll = None, None


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


class InFlight:
    """``InFlight(name)``: create the keyed window, or attach if it exists.

    ``stamp = flying.begin()`` when a request starts, ``flying.end(stamp)`` when it ends,
    ``flying.count()`` for the host's total over live processes.
    """

    def __init__(
        self,
        name: str,
        *,
        capacity: int = 128,
        span: Duration = "10m",
        buckets: int = 10,
        rescan: Duration = "100ms",
        clock: Clock | None = None,
        perm: int = 0o600,
    ):
        window = Window._for_role(
            "in-flight", name, span, buckets, (FIELD,), capacity=capacity, clock=clock, perm=perm
        )
        self._bind(window, rescan, clock)

    @classmethod
    def attach(cls, name: str, *, rescan: Duration = "100ms", clock: Clock | None = None) -> InFlight:
        refusal = ValueError(f"{name!r} is not an in-flight window (keyed, one field {FIELD!r})")
        window = Window._attach_as(name, is_inflight, refusal, clock=clock)
        self = object.__new__(cls)
        self._bind(window, rescan, clock)
        return self

    def _bind(self, window: Window, rescan: Duration, clock: Clock | None) -> None:
        self.window = window
        self.name = window.name
        self._clock: Clock = clock or host_clock()
        self._bucket_ns = window.bucket_ns
        self._rescan_ns = to_ns(rescan, "rescan")
        self._add = window.add
        self._read = window.add_and_total
        self._others: dict[str, Liveness] = {}
        self._scan_lock = threading.Lock()
        self._key = ""  # this process's key when it last scanned
        self._mine = ""  # this process's key once it has begun a request (an inspector never does)
        self._next_scan_ns = -(2**63)

    # -- one request ------------------------------------------------------------------------------

    def begin(self) -> int | None:
        """Count one more request of this process; returns the stamp ``end()`` needs
        (None: not counted, the table being full of live processes)."""
        key = self._mine = self_key()
        now_ns = self._clock()
        for attempt in range(2):
            try:
                if now_ns % self._bucket_ns < self._bucket_ns - _MARGIN_NS:
                    self._add(1, FIELD, key)
                else:  # near a bucket's end: place the +1 by its stamp (add_many's numpy: only here)
                    import numpy as np

                    self.window.add_many(np.array([1]), FIELD, np.array([now_ns]), key)
                return now_ns
            except KeyTableFullError:
                if attempt:
                    return None
                self._scan(now_ns)  # frees the entries of dead processes
        return None

    def end(self, stamp: int | None) -> None:
        """The request begun at ``stamp`` is over: -1 in the bucket its +1 went to."""
        if stamp is None:
            return
        key = self_key()
        now_ns = self._clock()
        bucket_ns = self._bucket_ns
        if now_ns // bucket_ns == stamp // bucket_ns and now_ns % bucket_ns < bucket_ns - _MARGIN_NS:
            self._add(-1, FIELD, key)
            return
        import numpy as np  # only past the fast path above, as in begin()

        with suppress(ValueError):  # older than the span: its +1 has aged out already
            self.window.add_many(np.array([-1]), FIELD, np.array([stamp]), key)

    # -- reading ----------------------------------------------------------------------------------

    def count(self, rescan: bool = False) -> int:
        """Requests running now in live processes (this one included). ``rescan`` looks for
        new processes now instead of at most once per ``rescan`` interval."""
        now_ns = self._clock()
        key = self_key()
        if rescan or now_ns >= self._next_scan_ns or key != self._key:
            self._scan(now_ns)
        total = 0
        for other, process in list(self._others.items()):
            if not process.alive():
                self._forget(other, clear=True)
                continue
            with suppress(KeyTableFullError):  # cleared meanwhile, and no room to read it back
                total += max(0, int(self._read(0, FIELD, other)))
        if self._mine == key:
            total += max(0, int(self._read(0, FIELD, key)))
        return total

    def processes(self) -> list[tuple[int, int]]:
        """``(pid, requests in flight)`` for every live process with a key (rescans first)."""
        self._scan(self._clock())
        out = []
        own = self_key()
        for key in self._keys():
            process = self._others.get(key)
            if key == own or (process is not None and process.alive()):
                out.append((int(key.partition(".")[0]), max(0, int(self.window.total(FIELD, key=key)))))
        return sorted(out)

    def _scan(self, now_ns: int) -> None:
        """Meet the keys of processes not seen yet; forget (and clear) those of dead ones."""
        with self._scan_lock:  # threads: one pidfd per process key
            self._scan_locked(now_ns)

    def _scan_locked(self, now_ns: int) -> None:
        self._key = self_key()
        self._next_scan_ns = now_ns + self._rescan_ns
        present = set(self._keys())
        for key in present - self._others.keys() - {self._key}:
            self._others[key] = Liveness(key)
        for key in list(self._others):
            if key not in present or key == self._key:
                self._forget(key, clear=False)
            elif not self._others[key].alive():
                self._forget(key, clear=True)

    def _keys(self) -> list[str]:
        """The keys in the window (process keys are text)."""
        found = self.window.keys()  # a Window, not a dict: keys() reads the segment
        return [k for k in found if isinstance(k, str)]

    def _forget(self, key: str, clear: bool) -> None:
        process = self._others.pop(key, None)
        if process is not None:
            process.close()
        if clear:
            with suppress(WindowClosedError):
                self.window.clear(key)

    # -- lifecycle --------------------------------------------------------------------------------

    def close(self) -> None:
        for key in list(self._others):
            self._forget(key, clear=False)
        self.window.close()

    def unlink(self) -> bool:
        return self.window.unlink()


def live_counts(window: Any) -> list[tuple[int, int]]:
    """``(pid, requests in flight)`` of every live process with a key in the in-flight
    ``window``, read only: a dead process's key is skipped, not cleared (what an inspector
    uses; :meth:`InFlight.processes` clears them)."""
    out = []
    found = window.keys()  # a Window, not a dict: keys() reads the segment
    for key in found:
        if not isinstance(key, str):
            continue
        process = Liveness(key)
        try:
            if process.alive():
                out.append((process.pid, max(0, int(window.total(FIELD, key=key)))))
        finally:
            process.close()
    return sorted(out)


def is_inflight(window: Any) -> bool:
    return bool(window.geometry.role == "in-flight")  # recorded by InFlight() when it made it


__all__ = ["InFlight", "Liveness", "is_inflight", "live_counts", "self_key"]
