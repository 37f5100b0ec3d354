"""What the ``shm://`` and ``async+shm://`` limits storages do, over shmwin segments.

One :class:`StorageSegments` per storage instance; the sync and the async storage classes
are thin shells over it. Every answer is read from shared memory, so a process that has
never used a limit (a fresh worker) answers exactly like the one that counted it: a
segment is found by the name it must have, and opened on first use.

Segments, under the storage's prefix::

    PREFIX.fixed.PERIOD           fixed window: each key's window start and count (limits_fixed)
    PREFIX.moving.LIMIT.PERIOD    moving window: each key's hit times, exactly (limits_moving)
    PREFIX.sliding.PERIOD         sliding window counter: limits' own, weighted (limits_sliding)

(PERIOD spelled the shortest exact way: ``1m``, ``30s``, ``1d``.) limits' keys end in
``/LIMIT/MULTIPLES/GRANULARITY``, so the one segment a key lives in is known from the key
alone; keys of another shape (direct storage calls) are looked for in every segment.

A key limits did not build ("user:42"; bytes apart from the equal str, as memory://) is summed
over the fixed windows natively while the board holds (boards.py, core/fixedsum.c); a listing
lets go of the segments removed or replaced since. One whose creator has not finished (or died
before sizing it) holds no counts yet: a get counts it 0 at once; an incr waits as ever.

Time is the wall clock, read through ``time.time()`` at each call exactly as limits'
memory storage does: reset times agree with the ones limits computes, and hiro, freezegun,
time-machine or a patched ``time.time`` move shm:// exactly as they move memory://.

The moving window is exact, like memory://: each key keeps its hit times (role
"moving-log", :mod:`limits_moving`), up to ``?times=`` of them (default 1024; a limit at or
under it is always exact), and a hit is forgotten exactly one period after it. Memory
follows the hits held: a key's row holds two hit times (96 bytes with its key), and further
ones take 16 bytes each from a chunk heap shared by the segment's keys, given back once they
have left. ``?buckets=N`` trades exactness for buckets (a strict shmwin Limiter): fixed
memory and O(1) hits, a hit then forgotten up to P/N late.
"""

from __future__ import annotations

import functools
import math
import os
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, TypeVar

from limits.errors import ConfigurationError

from ..backends.contract import Key
from ..backends.shm import boards
from ..backends.shm.segment import PREFIX as SEGMENT_PREFIX
from ..backends.shm.segment import SHM_DIR, check_name, listed_names, namespace, path_of
from ..clock import Clock
from ..errors import (
    GeometryMismatchError,
    OutOfSpaceError,
    SegmentNotReadyError,
    ShmwinError,
    WindowNotFoundError,
)
from ..geometry import DEFAULT_LOG_ENTRIES, MAX_BUCKETS, MAX_CAPACITY, MAX_LOG_ENTRIES
from ..limiter import ON_FULL, Limiter
from ..policy import DEFAULT_ON_FULL
from ..rate import MAX_LIMIT, MAX_NS, NS_PER_S, Rate, format_ns, to_ns
from .limits_counters import to_units
from .limits_fixed import FixedWindows
from .limits_moving import MovingLogs
from .limits_sliding import SlidingCounters

OPTIONS = ("capacity", "buckets", "times", "on_full")
_KINDS = {
    None: ("fixed", "moving", "sliding"),
    "fixed": ("fixed",),
    "moving": ("moving",),
    "sliding": ("sliding",),
}
DEFAULT_BUCKETS = 20
_GRANULARITY_S = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "month": 2592000, "year": 31104000}
T = TypeVar("T")
_NEVER = 2**62  # a count that is over any limit: what on_full="deny" answers for a fixed window
MARGIN_NS = 1_000  # reported reset times are this much late, never early (see later_s)


Segments = Limiter | MovingLogs | FixedWindows | SlidingCounters  # what one segment name opens as
Moving = Limiter | MovingLogs  # a moving window's segment: hit times (MovingLogs), or buckets (?buckets=)


class StorageOptionError(ConfigurationError, ValueError):
    """A bad ``shm://`` URI or storage option: raised when the storage is built."""


class WallClock:
    """Now, as limits' storages see it: ``time.time()``, looked up at each call so that
    time-mocking libraries reach it (hiro's is a float). Segments written with it say so in
    their header (``clock_kind``), so that ``shmwin show`` reads them with the wall clock."""

    clock_kind = "wall"

    def __call__(self) -> int:
        return int(time.time() * NS_PER_S)


wall_ns = WallClock()


def whole_cost(amount: Any) -> int:
    """limits' ``amount`` for a moving window: an int, or a float holding one (the moving window
    keeps hit times, and limits' memory storage takes whole costs there only)."""
    if isinstance(amount, bool) or not isinstance(amount, int | float):
        raise TypeError(f"a cost is a whole number, not {amount!r} ({type(amount).__name__})")
    if isinstance(amount, float) and not amount.is_integer():
        raise ValueError(f"a cost is a whole number of hits, not {amount!r} (shm:// counts whole hits)")
    if amount < 0:
        raise ValueError(f"a cost cannot be negative, not {amount!r}")
    return int(amount)


def hits_cost(amount: Any) -> int | float:
    """limits' ``amount`` for a fixed window or a sliding counter: an int, or a float (slowapi's
    callable costs), counted to 1/1000 of a hit (limits_counters.UNIT)."""
    to_units(amount)  # the checks: a number, finite, not negative
    return amount  # type: ignore[no-any-return]


def later_s(ns: float) -> float:
    """A time or delay in ns, as the seconds reported to limits: a microsecond later, which
    covers every float rounding on the way (a client waiting until then is never early)."""
    return (ns + MARGIN_NS) / NS_PER_S


class StorageSegments:
    """The segments of one storage; see the module docstring."""

    def __init__(self, uri: str, options: dict[str, Any]):
        parsed = urllib.parse.urlparse(uri)
        prefix = (parsed.netloc + parsed.path).strip("/") or "limits"
        try:
            check_name(f"{prefix}.fixed.1s")
        except ValueError as err:
            raise StorageOptionError(f"{uri!r}: the storage name {prefix!r} is not usable: {err}") from None
        try:
            query = urllib.parse.parse_qs(
                parsed.query, keep_blank_values=True, strict_parsing=bool(parsed.query)
            )
        except ValueError as err:
            raise StorageOptionError(f"{uri!r}: cannot read the query: {err}") from None
        given = {k: v[-1] for k, v in query.items()} | {k: options.pop(k) for k in OPTIONS if k in options}
        unknown = sorted(set(given) - set(OPTIONS)) + sorted(options)
        if unknown:
            raise StorageOptionError(f"{uri!r}: unknown option(s) {unknown}; shm:// takes {list(OPTIONS)}")
        self.prefix = prefix
        self._names: tuple[tuple[str, ...] | None, list[str]] = (None, [])  # listed_names(), ours
        # a foreign key's fixed windows (_foreign_fixed), the board's value read before listing them,
        # the board; their sum in one native call (foreign.get: None once the board moved, get lists)
        self._fixed_seen: tuple[int | None, list[FixedWindows]] = (None, [])
        self.foreign = boards.ForeignSum()
        self._board: boards.Board | None = None
        self.capacity = _int_option(uri, given, "capacity", None, 1, MAX_CAPACITY)
        self.buckets = _int_option(uri, given, "buckets", DEFAULT_BUCKETS, 1, MAX_BUCKETS - 1)
        self.times = _int_option(uri, given, "times", DEFAULT_LOG_ENTRIES, 1, MAX_LOG_ENTRIES)
        if "buckets" in given and "times" in given:
            raise StorageOptionError(f"{uri!r}: buckets= (bucketed) and times= (exact) exclude each other")
        self.exact: bool | int = False if "buckets" in given else self.times
        if NS_PER_S % self.buckets:
            raise StorageOptionError(
                f"{uri!r}: buckets={self.buckets} must divide one second (1,000,000,000 ns) into whole "
                "nanoseconds, so that it divides every period: e.g. 10, 20, 50, 100"
            )
        self.on_full = str(given.get("on_full", DEFAULT_ON_FULL))
        if self.on_full not in ON_FULL:
            raise StorageOptionError(f"{uri!r}: on_full must be one of {list(ON_FULL)}, not {self.on_full!r}")
        self.clock: Clock = wall_ns
        self._open: dict[str, Segments] = {}  # by segment name
        self._by_spec: dict[tuple[str, int, float], Segments] = {}  # (kind, limit, expiry)
        # limits' moving-window hot path (ShmStorage.acquire_entry): (limit, expiry) -> the
        # core's own moving_hit(key, cost) of a moving log opened here, no Python frame between
        self.moving_hits: dict[tuple[int, float], Callable[[str, int], bool]] = {}

    # -- naming and opening -----------------------------------------------------------------

    def _name(self, kind: str, expiry: float, limit: int | None = None) -> str:
        period = format_ns(_expiry_ns(expiry))
        return f"{self.prefix}.{kind}.{period}" if limit is None else f"{self.prefix}.{kind}.{limit}.{period}"

    def _limiter(self, kind: str, limit: int, expiry: float, create: bool) -> Moving | None:
        """The moving window of (limit, period): hit times (MovingLogs), or a bucketed
        Limiter (``?buckets=``); created if asked, else None if there is none."""
        hot = self._by_spec.get((kind, limit, expiry))
        if hot is not None:  # the hot path: no name to build
            assert isinstance(hot, Limiter | MovingLogs)
            return hot
        name = self._name(kind, expiry, limit)
        found: Segments | None = self._open.get(name)
        if found is None:
            if create and self.exact:
                found = MovingLogs.open(
                    name, limit, _expiry_ns(expiry), int(self.exact), self.clock, self.capacity, create=True,
                    on_full=self.on_full,
                )  # fmt: skip
            elif create:
                extra = {} if self.capacity is None else {"capacity": self.capacity}
                found = Limiter(  # decisions: none for limits, which counts its own
                    name, Rate(limit, _expiry_ns(expiry)), buckets=self.buckets, exact=False,
                    on_full=self.on_full, clock=self.clock, decisions=False, **extra,
                )  # fmt: skip
            else:
                try:
                    found = MovingLogs.open(
                        name, limit, 0, 0, self.clock, None, create=False, on_full=self.on_full
                    )
                except GeometryMismatchError:  # ?buckets=: a limiter's
                    found = Limiter.attach(name, on_full=self.on_full, clock=self.clock)
                except WindowNotFoundError:
                    return None
            if found is None:
                return None
            self._open[name] = found
        assert isinstance(found, Limiter | MovingLogs)
        self._by_spec[kind, limit, expiry] = found
        if isinstance(found, MovingLogs):
            self.moving_hits[limit, expiry] = found.native_hit
        return found

    def _fixed(self, expiry: float, create: bool) -> FixedWindows | None:
        """The fixed windows of a period: created if asked, else None if there are none."""
        found = self._per_period(FixedWindows, "fixed", expiry, create)
        return found if isinstance(found, FixedWindows) else None

    def _sliding(self, expiry: float, create: bool) -> SlidingCounters | None:
        """The sliding window counters of a period: created if asked, else None if there are none."""
        found = self._per_period(SlidingCounters, "sliding", expiry, create)
        return found if isinstance(found, SlidingCounters) else None

    def _per_period(
        self, kind: type[FixedWindows] | type[SlidingCounters], name: str, expiry: float, create: bool
    ) -> FixedWindows | SlidingCounters | None:
        found = self._by_spec.get((name, 0, expiry))
        if found is not None:  # the hot path: no name to build
            assert isinstance(found, kind)
            return found
        segment, hash_key = self._name(name, expiry), None
        found = self._open.get(segment)
        fresh = found is None and create and kind is FixedWindows  # made (or first opened) here
        if fresh:  # the storage's fixed windows share one hash key (its listing may open this one)
            hash_key = boards.shared_hash_key(lambda: [w.hash_key_named for w in self._foreign_fixed()])
            found = self._open.get(segment)
        if found is None:
            ns, clock = _expiry_ns(expiry), self.clock
            found = kind.open(segment, ns, clock, self.capacity, create, self.on_full, hash_key=hash_key)
            if found is None:
                return None
            self._open[segment] = found
        if fresh:  # after it exists: readers of foreign keys look again (this one too, board or none)
            boards.touch(self.prefix)
            self.foreign.forget()
        assert isinstance(found, kind)
        self._by_spec[name, 0, expiry] = found
        return found

    def _by_name(self, name: str) -> Segments | None:
        """The segment(s) behind one of this storage's names (a limits key of another shape
        is looked for in them all); None if it went away."""
        kind, limit, expiry = _name_parts(self.prefix, name)
        if kind == "fixed":
            return self._fixed(expiry, create=False)
        if kind == "sliding":
            return self._sliding(expiry, create=False)
        return self._limiter(kind, limit, expiry, create=False)

    def _segments_of(self, key: str, kind: str | None = None) -> list[Segments]:
        """Every segment ``key`` may live in (of ``kind``, if given): from the key if limits
        built it, else every segment of this storage."""
        parsed = _limit_of_key(key)
        found: list[Segments | None] = []
        if parsed is None:
            kinds = _KINDS[kind]
            found = [self._by_name(n) for n in self._listed() if _name_parts(self.prefix, n)[0] in kinds]
        else:
            limit, expiry = parsed
            if "fixed" in _KINDS[kind]:
                found.append(self._fixed(expiry, create=False))
            if "sliding" in _KINDS[kind]:
                found.append(self._sliding(expiry, create=False))
            if "moving" in _KINDS[kind] and limit >= 1:
                found.append(self._limiter("moving", limit, expiry, create=False))
        return [f for f in found if f is not None]

    @property
    def where(self) -> str:
        """Where the segments live: ``/dev/shm/shmwin.PREFIX.*`` (no spaces: a table cell)."""
        return f"{SHM_DIR}/{SEGMENT_PREFIX}{namespace()}{self.prefix}.*"

    def names(self) -> list[str]:
        """This storage's segments on the host."""
        return list(self._listed())

    def _listed(self) -> list[str]:
        """:meth:`names`, worked out again only when /dev/shm changed (segment.listed_names)."""
        listed = listed_names()
        if self._names[0] is not listed:
            self._names = (listed, [n for n in listed if _kind_of(self.prefix, n) is not None])
        return self._names[1]

    # -- on_full: answered by the core for every key; here only for a segment that finds no room --

    def _full_answer(self, allowed: T, denied: T) -> T:
        """What ``on_full`` answers for a limit's segment that found no room on /dev/shm
        (OutOfSpaceError before any core exists): called only from an ``except OutOfSpaceError``,
        so "raise" re-raises what was caught. A key that finds its segment's table full is the
        core's to answer (every segment has this storage's ``on_full``): fixed_incr answers a
        count of 0 ("allow") or over any limit ("deny"), sliding_hit and moving_hit a bool."""
        if self.on_full == "raise":
            raise
        return allowed if self.on_full == "allow" else denied

    # -- fixed window: starts at a key's first hit (see limits_fixed) ---------------------------

    def incr(self, key: str, expiry: float, amount: Any) -> int | float:
        cost = hits_cost(amount)
        try:
            windows = self._fixed(expiry, create=True)
        except OutOfSpaceError:  # no room for the period's segment itself (its keys: the core's on_full)
            return self._full_answer(allowed=0, denied=_NEVER)
        assert windows is not None
        return windows.incr(key, cost)

    def get(self, key: str) -> int | float:
        """limits' ``get``: a key limits built is read in its period's segment; any other
        ("user:42") is summed over every fixed-window segment of the storage (one native call,
        after a listing if a segment was made or removed since the last: _foreign_fixed).
        ShmStorage.get asks ``foreign.get`` first, which answers without this frame while the
        board holds."""
        if _limit_of_key(key) is not None:  # else not limits' (bytes never are: limits builds str)
            return sum(w.get(key) for w in self._segments_of(key, "fixed") if isinstance(w, FixedWindows))
        self._foreign_fixed()
        return self.foreign.sum(key)  # the clock read once, in hits as memory:// counts them

    def _fixed_of(self, key: str) -> list[Segments] | list[FixedWindows]:
        """The fixed windows ``key`` may live in: the one of its period if limits built it, else
        every one of the storage (_foreign_fixed)."""
        return self._segments_of(key, "fixed") if _limit_of_key(key) is not None else self._foreign_fixed()

    def _foreign_fixed(self) -> list[FixedWindows]:
        """Every fixed-window segment of this storage, for a key limits did not build. While the
        board (boards.py) holds the value read before they were listed, none was made or removed
        since: a load. Else list again: the board opened (made if missing while the last listing
        found a fixed window), its value read, checked to be the file at its path (a remover's is
        gone), /dev/shm listed (one stat if unchanged), the segments held checked against their files."""
        if self.foreign.holds():  # the board, and the once-a-second recheck (fixedsum.c)
            return self._fixed_seen[1]
        # made again if missing while the last listing found a fixed window (whose removal will
        # take it): the fast path comes back, and no board is left behind for a storage with none
        board = boards.Board.open(self.prefix, create=bool(self._fixed_seen[1]))
        seen = board.value() if board is not None else None  # read before listing (see boards.py)
        if board is not None and not board.is_current():  # removed meanwhile: no board, look each call
            board = seen = None
        self._drop_removed()
        found = []
        for name in self._listed():
            if _kind_of(self.prefix, name) == "fixed":
                windows = self._fixed_if_ready(name)
                if windows is not None:
                    found.append(windows)
        self._board, self._fixed_seen = board, (seen, found)
        clock = None if self.clock is wall_ns else self.clock  # None: time.time(), read natively
        self.foreign.found(board, seen, [w.fixed_engine for w in found], clock)
        return found

    def _fixed_if_ready(self, name: str) -> FixedWindows | None:
        """A fixed-window segment for a foreign key's sum, not waited for: one whose creator has
        not finished (or died before sizing it) holds no counts yet, so it counts 0 (not kept:
        the next listing looks again; incr still waits for it, and repairs it, as ever)."""
        _, _, expiry = _name_parts(self.prefix, name)
        found = self._by_spec.get(("fixed", 0, expiry)) or self._open.get(name)
        if found is None:
            try:
                found = FixedWindows.open(
                    name, _expiry_ns(expiry), self.clock, self.capacity, False, self.on_full, ready_timeout=0
                )
            except SegmentNotReadyError:
                return None
            if found is None:
                return None
            self._open[name] = found
            self._by_spec["fixed", 0, expiry] = found
        return found if isinstance(found, FixedWindows) else None

    def _drop_removed(self) -> None:
        """Let go of every segment held here whose file was removed or replaced since it was
        opened (another process's ``shmwin.unlink``, ``shmwin rm``, a new one made under the
        name): the next use opens the one at its name, so no count goes where nobody reads. One
        stat() a segment, at a listing only (when the board moved)."""
        for name, segment in list(self._open.items()):
            inode = _inode_of(segment)
            try:
                current = os.stat(path_of(name), follow_symlinks=False).st_ino
            except OSError:
                current = None
            if inode and current == inode:
                continue
            del self._open[name]
            for spec, held in list(self._by_spec.items()):
                if held is segment:
                    del self._by_spec[spec]
                    if spec[0] == "moving":
                        self.moving_hits.pop((spec[1], spec[2]), None)

    def get_expiry(self, key: str) -> float:
        for w in self._fixed_of(key):
            end_ns = w.end_ns(key) if isinstance(w, FixedWindows) else None
            if end_ns is not None:
                return later_s(end_ns)
        return self.clock() / NS_PER_S

    # -- moving window: shmwin's strict limiter ---------------------------------------------------

    def acquire(self, key: str, limit: int, expiry: float, amount: Any) -> bool:
        cost = whole_cost(amount)
        if cost > limit:
            return False  # as limits' storages answer
        if limit < 1:
            return True  # a cost of 0 against a limit of 0: no segment for a limit that admits nothing
        try:
            limiter = self._limiter("moving", limit, expiry, create=True)
        except OutOfSpaceError:  # no room for the limit's segment itself (its keys: the core's on_full)
            return self._full_answer(allowed=True, denied=False)
        assert limiter is not None  # a full table: its core answers on_full (Limiter, MovingLogs alike)
        return limiter.test(key, 0) if cost == 0 else limiter.hit(key, cost)

    def moving_window(self, key: str, limit: int, expiry: float) -> tuple[float, int]:
        """limits' (window start, hits): limits reports ``start + expiry`` as the reset."""
        used, reset_ns, now_ns = self._used_and_reset(key, limit, expiry)
        if not used:
            return now_ns / NS_PER_S, 0
        reset_s = later_s(reset_ns)
        start_s = reset_s - expiry
        while start_s + expiry < reset_s:
            start_s = math.nextafter(start_s, math.inf)
        return start_s, used

    def _used_and_reset(self, key: str, limit: int, expiry: float) -> tuple[int, float, float]:
        """(hits counted, when the oldest is forgotten, now), in ns; no hits: (0, _, now)."""
        lim = self._limiter("moving", limit, expiry, create=False) if limit >= 1 else None
        if lim is not None:
            used, reset_in_ns = lim.used_and_reset(key) if isinstance(lim, MovingLogs) else counted(lim, key)
            now_ns = self.clock()  # read after the core's own reading: the reset is never early
            if used:
                return used, now_ns + reset_in_ns, now_ns
        return 0, 0.0, self.clock()

    # -- sliding window counter: limits' own (limits_sliding) ------------------------------------

    def acquire_sliding(self, key: str, limit: int, expiry: float, amount: Any) -> bool:
        cost = hits_cost(amount)
        if cost > limit:
            return False  # as limits' storages answer
        try:
            counters = self._sliding(expiry, create=True)
        except OutOfSpaceError:  # no room for the period's segment itself (its keys: the core's on_full)
            return self._full_answer(allowed=True, denied=False)
        assert counters is not None
        return counters.hit(key, limit, cost)

    def sliding_window(self, key: str, expiry: float) -> tuple[int | float, float, int | float, float]:
        """limits' (previous count, previous ttl, current count, current ttl), as its memory
        storage computes them: windows aligned on now // expiry, the previous ttl the rest of
        the current window (0.0 with no previous count), the current ttl one period more."""
        period_ns = _expiry_ns(expiry)
        counters = self._sliding(expiry, create=False)
        previous: int | float
        current: int | float
        if counters is None:
            previous, current, elapsed_ns = 0, 0, self.clock() % period_ns
        else:
            previous, current, elapsed_ns = counters.window(key)
        left_s = (period_ns - elapsed_ns) / NS_PER_S
        return previous, left_s if previous else 0.0, current, left_s + period_ns / NS_PER_S

    def clear_sliding(self, key: str, expiry: float) -> None:
        counters = self._sliding(expiry, create=False)
        if counters is not None:
            counters.clear(key)

    # -- housekeeping ---------------------------------------------------------------------------

    def clear(self, key: str, kind: str | None = None) -> None:
        for segment in self._segments_of(key, kind):
            segment.clear(key)

    def reset(self) -> int:
        """Empty every segment of this storage; the number of keys that held counts."""
        cleared = 0
        for name in self.names():
            segment = self._by_name(name) if _kind_of(self.prefix, name) in _KINDS[None] else None
            if isinstance(segment, FixedWindows | SlidingCounters | MovingLogs):
                cleared += segment.reset()
            elif isinstance(segment, Limiter):
                keys = segment.window.keys()
                cleared += len([key for key in keys if counted(segment, key, detail=False)[0] > 0])
                segment.window.reset()
        return cleared

    def close(self) -> None:
        for segment in self._open.values():
            segment.close()
        self._open.clear()
        self._by_spec.clear()
        self.moving_hits.clear()
        self._board, self._fixed_seen = None, (None, [])  # closed cores: a next get lists again
        self.foreign.forget()


def _inode_of(segment: Segments) -> int:
    """The inode of the file a segment was opened from (0: not known, e.g. a closed one)."""
    window = segment.window if isinstance(segment, Limiter) else segment.counts
    return int(getattr(getattr(window, "_backend", None), "_ino", 0))


def counted(limiter: Limiter, key: Key, detail: bool = True) -> tuple[int, int]:
    """(hits counted, ns until the oldest is forgotten) for a one-rate limiter: one native
    call, the backend contract's ``check`` (``Limiter.stats`` builds what is not needed here)."""
    _, used, reset_ns, _ = limiter._backend.check(key, 0, False, detail)
    return int(used[0]), int(reset_ns[0])


def _int_option(
    uri: str, given: dict[str, Any], option: str, default: int | None, low: int, high: int
) -> Any:
    if option not in given:
        return default
    value = given[option]
    try:
        number = int(value)
        if isinstance(value, bool) or (isinstance(value, float) and value != number):
            raise ValueError(value)
    except (TypeError, ValueError):
        raise StorageOptionError(f"{uri!r}: {option} must be a whole number, not {value!r}") from None
    if not low <= number <= high:
        raise StorageOptionError(f"{uri!r}: {option} must be {low}..{high}, not {number}")
    return number


def _expiry_ns(expiry: float) -> int:
    if isinstance(expiry, bool) or not isinstance(expiry, int | float) or not 0 < expiry * NS_PER_S <= MAX_NS:
        raise ValueError(f"an expiry is a positive number of seconds, not {expiry!r}")
    return to_ns(expiry, "expiry")


def _limit_of_key(key: str) -> tuple[int, int] | None:
    """(limit, expiry in seconds) from a key limits built: ``.../LIMIT/MULTIPLES/GRANULARITY``
    (None for any other key, and for bytes: limits builds str keys)."""
    if not isinstance(key, str) or "/" not in key:  # a quick no
        return None
    parts = key.rsplit("/", 3)
    if len(parts) != 4:
        return None
    _, limit, multiples, granularity = parts
    if not (limit.isdigit() and multiples.isdigit() and granularity in _GRANULARITY_S):
        return None
    if int(limit) > MAX_LIMIT or int(multiples) < 1:
        return None
    return int(limit), int(multiples) * _GRANULARITY_S[granularity]


@functools.lru_cache(maxsize=4096)
def _name_parts(prefix: str, name: str) -> tuple[str, int, float]:
    """One of this prefix's segment names (``_kind_of`` said so), read: its kind, its limit (a
    moving window's; 0 for the others) and its period in seconds (limits' expiry)."""
    kind, *rest = name[len(prefix) + 1 :].split(".")
    return kind, int(rest[0]) if len(rest) == 2 else 0, to_ns(rest[-1], "period") / NS_PER_S


def _kind_of(prefix: str, name: str) -> str | None:
    """The kind ("fixed", "moving", "sliding") of one of this prefix's segments, else None
    (``fixedstart`` and ``sliding.LIMIT``: an older shmwin's, no longer read)."""
    if not name.startswith(prefix + "."):
        return None
    kind, *rest = name[len(prefix) + 1 :].split(".")
    shape = {"fixed": 1, "moving": 2, "sliding": 1}
    return kind if shape.get(kind) == len(rest) else None


class SegmentsStorage:
    """What ``shm://`` and ``async+shm://`` (limits.py, limits_async.py) say about
    themselves, from their :class:`StorageSegments`; first among their bases, before limits'
    ``Storage``, whose abstract ``base_exceptions`` it answers."""

    segments: StorageSegments

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return ShmwinError

    @property
    def storage(self) -> str:
        """Where the counts live (what ``flask limiter config`` shows as the backend)."""
        return self.segments.where

    @property
    def prefix(self) -> str:
        return self.segments.prefix
