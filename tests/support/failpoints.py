"""The fail-point harness: a victim process struck after the n-th store of a section, by
SIGKILL or by an exception, and the readers that check the invariants from other processes
(tests/integration/core/failpoints/, one file per critical section of the native core).

Fail points at every store of every native critical section, in real processes.

"Faults are tested at every point, not at random." Each critical section of the native core
(its ``SECTION()``, in ``shmwin/backends/shm/core/``) is stopped right after its 1st store,
then its 2nd, 3rd, ... until a run completes without the fail point firing (the victim
reports ``_core.failpoint_fired()``).
Every point is struck twice:

- by SIGKILL: the victim dies holding whatever it held, mid-section;
- by an exception: the fail point raises SIGALRM, whose Python handler raises as soon as
  the (uninterruptible) call returns, so the section must have completed whole, and
  nothing it held may stay held. These checks run while the victim is still alive.

The victims are forked children (one test arms a ``python -c`` process through
SHMWIN_FAILPOINT). Fail points exist only in the core's test build (-DSHMWIN_TEST): the main
run skips this file, and scripts/checks.d/10-failpoints.sh runs it against that build. After
each strike the invariants are checked from other processes --
this one, and fresh forked children that never saw the victim's keys:

- a limit never admits more than its rate in any interval: an exact model of the limiter's
  buckets predicts every later hit, with time driven by hand (a ManualClock in a file);
- no key or lock hangs: the next call on the same key or lock returns at once (every
  lock_timeout is 5 s), and the dead holder's section was repaired (a limiter's running
  totals equal the sum of its live buckets, read from the segment);
- every call that had returned before the kill is counted, the call in flight at most once,
  and once a fail point at store n leaves it counted, so does every later n;
- a key whose inserter (or whose rollback) died is usable at once and counts exactly, no
  entry keeps a negative generation after the next insert, no key is in the table twice,
  other keys are unaffected.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import struct
import time
import traceback
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import shmwin
from shmwin import Limiter, ManualClock, Window, _core
from shmwin.backends.shm import layout

CTX = mp.get_context("fork")
S = 1_000_000_000
T0 = 1_000 * S  # every test's clock starts here (idle keys are those unwritten for a span)
LOCK_TIMEOUT = 5.0
HUNG_S = 30.0  # a call this long spun: load alone never made one take it (the worst seen: 2.04 s)
MAX_STORES = 200
KILL, RAISE = signal.SIGKILL, signal.SIGALRM
SIGNALS = [pytest.param(KILL, id="sigkill"), pytest.param(RAISE, id="exception")]
EMPTY = layout.EMPTY_EPOCH
LIMITER_RING_HEAD, LIMITER_RING_TOTAL = layout.LIMITER_RING_HEAD, layout.LIMITER_RING_TOTAL
LIMITER_RING_ZEROED = layout.LIMITER_RING_ZEROED

# the words of a victim's report (a shared array)
PROGRESS, FIRED, RAISED, ARMED, PID = range(5)


# ---- the victim ----------------------------------------------------------------------------


class Interrupted(Exception):
    """What the victim's SIGALRM handler raises: a KeyboardInterrupt, a request timeout."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted


def _counting_waits(fn: Callable[..., Any]) -> Callable[..., tuple[Any, int]]:
    """fn, made to answer (its result, how many times its process slept on a held lock)."""

    def counted(*args: Any, **kwargs: Any) -> tuple[Any, int]:
        before = _core.lock_waits()
        result = fn(*args, **kwargs)
        return result, _core.lock_waits() - before

    return counted


def promptly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), which must not wait on any lock: what a dead or struck victim held
    is repaired or free at once. Proved by the core's own count of sleeps on a held lock (the
    test build's ``lock_waits()``), in this process or in ``in_child``'s survivor: a loaded
    machine cannot fail it, nor a lucky one pass it. The bound in time only catches a spin."""
    started = time.monotonic()
    if fn is in_child:  # the survivor counts its own sleeps
        result, waits = in_child(_counting_waits(args[0]), *args[1:])
    else:
        result, waits = _counting_waits(fn)(*args, **kwargs)
    took = time.monotonic() - started
    what = getattr(args[0] if fn is in_child else fn, "__name__", fn)
    assert waits == 0, f"{what} slept {waits} time(s) on a lock another process held"
    assert took < HUNG_S, f"{what} took {took:.2f}s: a lookup spun"
    return result


@dataclass
class Strike:
    section: str
    n: int
    sig: int
    fired: bool
    report: Any

    @property
    def died(self) -> bool:
        """The victim was killed inside the section."""
        return self.fired and self.sig == KILL

    @property
    def completed(self) -> bool:
        """The struck call's section ran to its end (whether or not the call then raised)."""
        return not self.died


def _victim(conn, section, n, sig, before, op, again, report) -> None:  # type: ignore[no-untyped-def]
    try:
        report[PID] = os.getpid()
        if sig == RAISE:
            signal.signal(RAISE, _interrupt)
        state = before(report)
        _core.failpoint(section, n, sig)
        report[ARMED] = 1
        try:
            op(state)
            # the handler's exception surfaces where the interpreter next checks for signals:
            # 3.10-3.13 as the struck call returns, 3.14 a statement later. failpoint_fired()
            # runs pending handlers first (PyErr_CheckSignals), so it lands in this try anyway
            fired = _core.failpoint_fired()
        except Interrupted:
            report[RAISED] = 1
            fired = _core.failpoint_fired()
        report[FIRED] = fired
        _core.failpoint()  # disarmed: `again` must not fire it
        if again is not None:
            promptly(again, state)  # the same lock again, from the struck process itself
        conn.send(("ready", ""))
        conn.recv()  # parked until the parent has checked: anything it still held would show
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        raise


@contextmanager
def strike(
    section: str,
    n: int,
    sig: int,
    before: Callable[[Any], Any],
    op: Callable[[Any], Any],
    again: Callable[[Any], Any] | None = None,
) -> Iterator[Strike]:
    """Fork a victim that runs ``state = before(report)`` (reporting what returned), arms
    ``section:n:sig`` and runs ``op(state)``; then ``again(state)`` if it is still alive.
    Yields once the victim died (SIGKILL) or is parked alive (exception, or never fired)."""
    report = CTX.Array("q", 8, lock=False)
    mine, theirs = CTX.Pipe()
    p = CTX.Process(target=_victim, args=(theirs, section, n, sig, before, op, again, report), daemon=True)
    p.start()
    theirs.close()
    where = f"victim of {section}:{n}:{signal.Signals(sig).name}"
    try:
        assert mp.connection.wait([mine, p.sentinel], timeout=60), f"{where} hung"
        try:
            kind, detail = mine.recv()
        except EOFError:
            kind, detail = "died", ""
        if kind == "died":
            p.join(60)
            assert sig == KILL and p.exitcode == -KILL, f"{where} exited {p.exitcode}"
            assert report[ARMED], f"{where} died before the fail point was armed"
            fired = True
        else:
            assert kind == "ready", f"{where} failed:\n{detail}"
            fired = bool(report[FIRED])
            assert sig == RAISE or not fired, f"{where} survived its SIGKILL"
            # the exception surfaced right after the uninterruptible call returned, and only then
            assert report[RAISED] == fired, f"{where}: fired={fired} but raised={report[RAISED]}"
        yield Strike(section, n, sig, fired, report)
    finally:
        if p.is_alive():
            with suppress(OSError):
                mine.send("go")
            p.join(60)
        mine.close()
    assert p.exitcode in (0, -KILL), f"{where} exited {p.exitcode}"


def hits_then_strike(
    open_mine: Callable[[ManualClock], Any], clock_path: str | Path, hits_at: Sequence[int], struck_at: int
) -> Callable[[Any], Any]:
    """A strike's ``before`` for a hit on "k": the victim opens its front on the shared
    ManualClock of ``clock_path`` (``open_mine(clock)``), counts a hit at each of ``hits_at``
    (PROGRESS counts them), sets the clock to ``struck_at`` and hands the front over."""

    def before(report: Any) -> Any:
        clock = ManualClock(path=Path(clock_path))
        mine = open_mine(clock)
        for at in hits_at:
            clock.set(at)
            assert mine.hit("k")
            report[PROGRESS] += 1
        clock.set(struck_at)
        return mine

    return before


def drop(front: Any, name: str) -> None:
    """A strike's end, in its ``finally``: the test's own front closed, its segment unlinked."""
    front.close()
    shmwin.unlink(name)


@contextmanager
def dropped(front: Any, name: str) -> Iterator[Any]:
    """The test's own front for one strike, dropped (:func:`drop`) at the end however it ends."""
    try:
        yield front
    finally:
        drop(front, name)


def every_store(strike_at: Callable[[int], bool], section: str = "", at_least: int = 0) -> int:
    """strike_at(1), strike_at(2), ... (each True if its fail point fired) until a run
    completes without firing; returns how many stores the section made, checked to be
    ``at_least`` (a section that made fewer was not struck where the test means to)."""
    for n in range(1, MAX_STORES + 1):
        if not strike_at(n):
            assert n - 1 >= at_least, f"section {section!r} made only {n - 1} stores"
            return n - 1
    raise AssertionError(f"the section still had stores after {MAX_STORES}")


def every_store_unbroken(strike_at: Callable[[int], bool], broken: dict[int, str], who: str) -> None:
    """:func:`every_store`, then no store after which a strike broke something (``broken``, that
    ``strike_at`` fills: the store's number -> what went wrong)."""
    every_store(strike_at)
    assert not broken, f"{who} killed after store n (n: what went wrong): {broken}"


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) run in a fresh forked process (a survivor); its (picklable) result."""
    mine, theirs = CTX.Pipe(duplex=False)

    def body() -> None:
        try:
            theirs.send(("ok", fn(*args)))
        except BaseException:
            theirs.send(("error", traceback.format_exc()))

    p = CTX.Process(target=body, daemon=True)
    p.start()
    theirs.close()
    try:
        assert mine.poll(60), "a survivor process hung"
        kind, value = mine.recv()
    finally:
        p.join(60)
        mine.close()
    assert kind == "ok", f"a survivor process failed:\n{value}"
    return value


def assert_monotone(seen: dict[int, Any], what: str) -> None:
    """``seen[n]`` (tuples of 0/1, or bools) only grows with n: a store, once made, stays made."""
    ns = sorted(seen)
    for a, b in itertools.pairwise(ns):
        assert all(x <= y for x, y in zip(_flags(seen[a]), _flags(seen[b]), strict=True)), (
            f"{what}: the fail point after store {a} left {seen[a]}, after store {b} {seen[b]}"
        )


def _flags(v: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in v) if isinstance(v, tuple) else (int(v),)


# ---- reading the segment -----------------------------------------------------------------


def ring_rows(lim: Limiter, key: str, at_rest: bool = False) -> list[tuple[int, int]]:
    """Per ring of ``key``'s row: (running total, sum of its clean counts), read from the
    segment by the layout's offsets -- what a repair makes equal. A compact ring (layout.py,
    "Limiter rings"): slot s holds the count of the epoch e == s (mod n) in (head - n, head],
    clean iff e <= zeroed; ``at_rest``: assert zeroed == head (what "hit" and the repair leave)."""
    w = lim.window
    found = w._backend._core.find(key)
    assert found is not None, f"{key!r} is not in the key table"
    g, lay, q = w._backend._g, w._backend._lay, w._backend._q
    row_bytes = lay.rows_off + found[0] * lay.row_bytes
    row = row_bytes // 8
    out = []
    for i, (ring, header, first) in enumerate(zip(g.rings, lay.ring_words, lay.bucket_words, strict=True)):
        head, total, zeroed = (int(q[row + header + w]) for w in (LIMITER_RING_HEAD, LIMITER_RING_TOTAL,
                                                                   LIMITER_RING_ZEROED))  # fmt: skip
        width, n = lay.count_bytes[i], ring.n_buckets
        code = "<i" if width == 4 else "<q"
        live = 0
        if head != EMPTY:
            assert not at_rest or zeroed == head, f"ring {i} of {key!r}: head {head}, zeroed {zeroed}"
            for e in range(max(head - n + 1, 0), min(zeroed, head) + 1 if zeroed != EMPTY else 0):
                live += struct.unpack_from(code, w._backend._buf, row_bytes + first * 8 + e % n * width)[0]
        out.append((total, live))
    return out


def assert_repaired(lim: Limiter, key: str) -> None:
    for i, (total, live) in enumerate(ring_rows(lim, key, at_rest=True)):
        assert total == live, f"ring {i} of {key!r}: running total {total}, live buckets {live}: not repaired"


def generations(w: Window) -> list[int]:
    """Every index entry's generation, then every handed-out row's (what writers check)."""
    keys = w._backend._keys
    assert keys is not None
    return [g for g, _, _ in keys.index_entries()] + [keys.generation(r) for r in range(keys.rows_top())]


def assert_key_table_sound(w: Window) -> None:
    gens = generations(w)
    assert min(gens) >= 0, f"an entry is still half-written (negative generation): {gens}"
    assert w._backend._keys is not None
    keys = [key for _, key, _ in w._backend._keys.entries()]
    assert len(keys) == len(set(keys)), f"a key is in the table twice: {keys}"


class Model:
    """The limiter's rule, exactly: per rate, a hit counts while its bucket is one of the
    newest ``buckets + 1`` (the current one and ``buckets`` whole ones)."""

    def __init__(self, lim: Limiter):
        self.rings = [(r.limit, r.bucket_ns, r.n_buckets) for r in lim.window.geometry.rings]
        self.counted: list[list[int]] = [[] for _ in self.rings]

    def used(self, now: int) -> list[int]:
        return [
            sum(1 for t in times if t // b > now // b - n)
            for (_, b, n), times in zip(self.rings, self.counted, strict=True)
        ]

    def count(self, now: int, rings: list[int] | None = None) -> None:
        for i in range(len(self.rings)) if rings is None else rings:
            self.counted[i].append(now)

    def hit(self, now: int) -> bool:
        allowed = all(u < limit for u, (limit, _, _) in zip(self.used(now), self.rings, strict=True))
        if allowed:
            self.count(now)
        return allowed

    def reset_ns(self, now: int) -> list[int]:
        """Per rate, how long until its oldest counted hit is forgotten (0: none counted)."""
        out = []
        for (_, b, n), times in zip(self.rings, self.counted, strict=True):
            live = [t // b for t in times if t // b > now // b - n]
            out.append(max(0, (min(live) + n) * b - now) if live else 0)
        return out


def assert_stats(lim: Limiter, key: str, model: Model, now: int) -> None:
    """Limiter.stats_all (running totals; reset times scanned from each ring's oldest bucket
    holding hits) says what the model says, and the row's totals match its buckets."""
    stats = promptly(lim.stats_all, key)
    assert [st.used for st in stats] == model.used(now), "running totals differ from the rule"
    resets = [round(st.reset_after * S) for st in stats]
    assert resets == model.reset_ns(now), f"reset_after {resets} ns, the rule says {model.reset_ns(now)}"
    assert_repaired(lim, key)


def assert_never_over(lim: Limiter, admitted: list[int]) -> None:
    """No rate admitted more than its limit in any closed interval of its period."""
    times = sorted(admitted)
    for rate in lim.rates:
        for i, t in enumerate(times):
            inside = bisect_right(times, t + rate.period_ns) - i
            assert inside <= rate.limit, f"{inside} hits admitted within {rate} from t={t / S}s"


class Keyed:
    """A "10/minute" limiter or a keyed window (span 60 s, 60 buckets), asked the same things."""

    def __init__(self, kind: str, name: str, clock_path: Path, capacity: int = 16, on_full: str = "raise"):
        self.args = (kind, name, clock_path, capacity, on_full)
        self.clock = ManualClock(T0, path=clock_path)  # or the clock already in that file
        self.lim: Limiter | None = None
        if kind == "limiter":
            self.lim = Limiter(
                name, "10/minute", capacity=capacity, on_full=on_full, clock=self.clock,
                lock_timeout=LOCK_TIMEOUT,
            )  # fmt: skip
            self.w = self.lim.window
        else:
            self.w = Window(
                name, span=60, buckets=60, capacity=capacity, clock=self.clock, lock_timeout=LOCK_TIMEOUT
            )

    def write(self, key: str, times: int = 1) -> int:
        """``times`` hits (how many were admitted), or adds of 1 (all of them)."""
        if self.lim is not None:
            return sum(bool(self.lim.hit(key)) for _ in range(times))
        for _ in range(times):
            self.w.add(1, key=key)
        return times

    def units(self, key: str) -> int:
        """What ``key`` counts now: a limiter's running total (its row repaired), a window's sum."""
        if self.lim is not None:
            used = int(self.lim.stats_all(key)[0].used)  # takes the key's lock: repairs
            if self.w._backend._core.find(key) is not None:
                assert_repaired(self.lim, key)
            return used
        return int(self.w.total(key=key))

    def peek(self, key: str) -> None:
        """Take ``key``'s row lock, counting nothing."""
        if self.lim is not None:
            self.lim.test(key)
        else:
            self.w.add(0, key=key)

    def clear(self, key: str) -> None:
        (self.lim or self.w).clear(key)

    def close(self) -> None:
        (self.lim or self.w).close()


def assert_usable(t: Keyed, key: str, counted: int) -> None:
    """``key`` counts exactly ``counted`` now, and takes exactly what it should next."""
    assert promptly(t.units, key) == counted
    if t.lim is not None:
        got = promptly(t.write, key, 12)
        assert got == 10 - counted, f"{key!r} admitted {got} more after {counted}: the limit is 10/minute"
        assert t.units(key) == 10
    else:
        promptly(t.write, key, 5)
        assert t.units(key) == counted + 5


def _survive_keyed(args: tuple[Any, ...], key: str, insert: bool) -> tuple[int, int, list[int]]:
    """A fresh process (nothing cached): one more write to ``key``, one insert of its own."""
    t = Keyed(*args)
    got = promptly(t.write, key)
    fresh = promptly(t.write, f"fresh-{os.getpid()}") if insert else 1
    gens = generations(t.w)
    t.close()
    return got, fresh, gens


def check_survivor_keyed(t: Keyed, key: str, insert: bool = True) -> None:
    before = t.units(key)
    got, fresh, gens = in_child(_survive_keyed, t.args, key, insert)
    assert min(gens) >= 0, f"an entry is still half-written after another insert: {gens}"
    assert fresh == 1
    if t.lim is not None:
        assert got == int(before < 10), f"{key!r} at {before} of 10/minute: a fresh process got {got}"
    else:
        assert got == 1
    assert t.units(key) == before + got
