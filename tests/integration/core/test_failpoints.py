"""Fail points at every store of every native critical section, in real processes.

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
import subprocess
import sys
import textwrap
import time
import traceback
from bisect import bisect_right
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.helpers import ROOT

import shmwin
from shmwin import KeyTableFullError, Limiter, ManualClock, Window, _core
from shmwin.backends.redis.testing import ServerTime
from shmwin.backends.shm import layout

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]

CTX = mp.get_context("fork")
S = 1_000_000_000
T0 = 1_000 * S  # every test's clock starts here (idle keys are those unwritten for a span)
LOCK_TIMEOUT = 5.0
PROMPT = 1.0  # seconds: "at once", next to a lock_timeout of 5 s
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


def promptly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs), which must return well before any lock_timeout."""
    started = time.monotonic()
    result = fn(*args, **kwargs)
    took = time.monotonic() - started
    assert took < PROMPT, f"{getattr(fn, '__name__', fn)} took {took:.2f}s: a lock or a lookup hung"
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
        except Interrupted:
            report[RAISED] = 1
        report[FIRED] = _core.failpoint_fired()
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


def every_store(strike_at: Callable[[int], bool]) -> int:
    """strike_at(1), strike_at(2), ... (each True if its fail point fired) until a run
    completes without firing; returns how many stores the section made."""
    for n in range(1, MAX_STORES + 1):
        if not strike_at(n):
            return n - 1
    raise AssertionError(f"the section still had stores after {MAX_STORES}")


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


# ---- hit ------------------------------------------------------------------------------------


def _hits(name: str, rates: list[str], clock_path: Path, key: str, count: int) -> list[bool]:
    lim = Limiter(name, rates, capacity=16, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT)
    got = [bool(promptly(lim.hit, key)) for _ in range(count)]
    lim.close()
    return got


PRE_HITS = [T0, T0, T0 + 60 * S, T0 + 60 * S]  # the victim's hits that return
# 63 s = 21 buckets of "10/minute" (3 s each): the struck hit recycles the bucket of the first
# hits (still holding them), and advances every head: every store is made
STRUCK_AT = T0 + 63 * S
# and a head moved by 4 of 21 buckets (10/minute): 4 counts leave the total and are zeroed
SCATTERED = ([T0 + 3 * S * i for i in range(5)] + [T0 + 60 * S], T0 + 72 * S)
PRES = [pytest.param((PRE_HITS, STRUCK_AT), id="recycled"), pytest.param(SCATTERED, id="scattered")]
# survivors after the strike: (seconds to advance first, who hits, how many hits)
SCHEDULE = [(0, "here", 4), (0, "child", 4), (0.5, "here", 3), (2, "child", 3), (30, "here", 6),
            (31, "child", 12), (4, "here", 12), (64, "here", 12)]  # fmt: skip


@pytest.mark.parametrize("pre", PRES)
@pytest.mark.parametrize("rates", [["10/minute"], ["3/second", "10/minute"]], ids=["one-rate", "two-rates"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_hit(make_name, tmp_path, rates, sig, pre):
    """Limiter.hit struck at every store: the limit holds in every interval afterwards. The
    struck hit moves each compact ring's head: by a lap or more (every count zeroed), or by
    a few buckets (the counts that leave taken out of the total, then zeroed)."""
    pre_hits, struck_at = pre
    inflights: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"hit{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, rates, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            other, model = Model(lim), Model(lim)
            for _ in range(2):
                assert lim.hit("other")
                other.count(T0)

            def before(report):
                mine = Limiter(name, rates, capacity=16, clock=ManualClock(path=clock_path), lock_timeout=5)
                clock = ManualClock(path=clock_path)
                for at in pre_hits:
                    clock.set(at)
                    assert mine.hit("k")
                    report[PROGRESS] += 1
                clock.set(struck_at)
                return mine

            with strike("hit", n, sig, before, lambda mine: mine.hit("k"), lambda mine: mine.test("k")) as s:
                assert s.report[PROGRESS] == len(pre_hits)
                for at in pre_hits:
                    model.count(at)
                now = clock()
                used = [st.used for st in promptly(lim.stats_all, "k")]  # the dead holder's lock
                assert_repaired(lim, "k")
                inflight = tuple(u - p for u, p in zip(used, model.used(now), strict=True))
                assert set(inflight) <= {0, 1}, f"returned hits lost, or the one in flight twice: {inflight}"
                assert list(inflight) == sorted(inflight, reverse=True), "rates are counted in order"
                if s.completed:
                    assert inflight == (1,) * len(rates), "the hit completed: it is counted in every rate"
                inflights[n] = inflight
                model.count(now, [i for i, x in enumerate(inflight) if x])
                assert_stats(lim, "k", model, now)
                admitted = [*pre_hits, *([now] if s.completed else [])]
                assert [st.used for st in lim.stats_all("other")] == other.used(now), "another key moved"
                for advance, who, count in SCHEDULE:
                    now = clock.advance(advance)
                    if who == "here":
                        got = [bool(promptly(lim.hit, "k")) for _ in range(count)]
                    else:
                        got = in_child(_hits, name, rates, clock_path, "k", count)
                    want = [model.hit(now) for _ in range(count)]
                    assert got == want, f"{who} at T0+{(now - T0) / S}s: admitted {got}, the rule says {want}"
                    admitted += [now] * sum(got)
                    assert_stats(lim, "k", model, now)
                assert_never_over(lim, admitted)
            return s.fired
        finally:
            lim.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= 1 + 3 * len(rates), f"section 'hit' made only {stores} stores"
    assert_monotone(inflights, "the in-flight hit")


def stale_counts(lim: Limiter, key: str) -> int:
    """How many counts of ``key``'s row are stale and not 0: in a compact ring's slots of the
    epochs (zeroed, head], left by a hit torn before it zeroed them (the repair must)."""
    w = lim.window
    found = w._backend._core.find(key)
    assert found is not None
    g, lay, q = w._backend._g, w._backend._lay, w._backend._q
    row_bytes = lay.rows_off + found[0] * lay.row_bytes
    out = 0
    for i, ring in enumerate(g.rings):
        header, n, width = row_bytes // 8 + lay.ring_words[i], ring.n_buckets, lay.count_bytes[i]
        head, zeroed = int(q[header + LIMITER_RING_HEAD]), int(q[header + LIMITER_RING_ZEROED])
        if head == EMPTY:
            continue
        top = head - n if zeroed == EMPTY else max(min(zeroed, head), head - n)
        for e in range(max(top + 1, 0), head + 1):
            at = row_bytes + lay.bucket_words[i] * 8 + e % n * width
            out += struct.unpack_from("<i" if width == 4 else "<q", w._backend._buf, at)[0] != 0
    return out


# where the struck repair starts: a hit torn with every running total raised (its counts not
# yet written), or torn with a stale count still in a ring (its head moved, the count not zeroed)
TEARS = [pytest.param("totals", id="totals"), pytest.param("stale", id="stale")]


@pytest.mark.parametrize("tear_kind", TEARS)
@pytest.mark.parametrize("sig", SIGNALS)
def test_repair(make_name, tmp_path, sig, tear_kind):
    """The repair of a dead hit's row, itself struck at every store: a second death mid-repair
    is repaired by the next locker; totals come back to the buckets' sums, stale counts to 0."""
    rates = ["3/second", "10/minute"]

    def torn_as_wanted(lim: Limiter) -> bool:
        if tear_kind == "stale":
            return stale_counts(lim, "k") > 0
        return all(total > live for total, live in ring_rows(lim, "k"))

    def victim_limiter(clock_path: Path, name: str) -> Limiter:
        return Limiter(name, rates, capacity=16, clock=ManualClock(path=clock_path), lock_timeout=5)

    def torn_hit(name: str, clock_path: Path, tear: int) -> bool:
        """Kill a hit at store ``tear``; is the row left as the test wants it?"""

        def before(report):
            mine = victim_limiter(clock_path, name)
            assert mine.hit("k") and mine.hit("k")
            ManualClock(path=clock_path).advance(3)
            return mine

        with Limiter.attach(name) as lim, strike("hit", tear, KILL, before, lambda m: m.hit("k")) as s:
            assert s.died
            return torn_as_wanted(lim)

    # where a dead hit leaves every running total torn (raised, its bucket not yet written)
    probe_name, probe_clock = make_name("probe"), tmp_path / "probe"
    tear = 0
    for tear in range(1, MAX_STORES):
        Limiter(probe_name, rates, capacity=16, clock=ManualClock(T0, path=probe_clock)).close()
        wanted = torn_hit(probe_name, probe_clock, tear)
        shmwin.unlink(probe_name)
        probe_clock.unlink()
        if wanted:
            break
    else:
        raise AssertionError(f"no store of section 'hit' leaves the row torn as {tear_kind!r} wants")

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"repair{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, rates, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            assert torn_hit(name, clock_path, tear)
            with strike(
                "repair", n, sig, lambda report: victim_limiter(clock_path, name), lambda m: m.test("k")
            ) as s:
                now = clock()
                model = Model(lim)
                model.count(T0)
                model.count(T0)  # the torn hit never reached its buckets
                assert_stats(lim, "k", model, now)
                assert stale_counts(lim, "k") == 0, "the repair left a stale count"
                got = [bool(promptly(lim.hit, "k")) for _ in range(12)]
                assert got == [model.hit(now) for _ in range(12)]
                assert_stats(lim, "k", model, now)
            return s.fired
        finally:
            lim.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= len(rates)


# ---- keys: insert and rollback ---------------------------------------------------------


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_insert(make_name, tmp_path, kind, sig):
    """The first hit (limiter) or add (keyed window) of a new key, struck while inserting it."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"insert{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path)
        try:
            for i in range(4):
                assert t.write(f"old{i}", i + 1) == i + 1
            with strike(
                "insert", n, sig, lambda report: Keyed(kind, name, clock_path),
                lambda mine: mine.write("new"), lambda mine: mine.peek("new"),
            ) as s:  # fmt: skip
                found = promptly(t.w._backend._core.find, "new")  # lock-free: never spins on a torn entry
                assert found is not None or s.died, "the insert completed but the key is not found"
                assert promptly(t.w._backend._core.find, "absent") is None
                assert promptly(t.w.total, key="new") == int(s.completed) or t.lim is not None
                # the victim's own hit/add came after its insert: counted iff the insert completed
                assert_usable(t, "new", int(s.completed))
                assert promptly(t.write, "fresh") == 1  # an insert: takes the key-table lock
                assert_key_table_sound(t.w)
                for i in range(4):
                    assert t.units(f"old{i}") == i + 1, "another key was changed"
                assert "new" in t.w.keys()
                check_survivor_keyed(t, "new")
                if t.lim is not None:  # and the limit comes round again
                    t.clock.advance(64)
                    assert t.write("new", 12) == 10
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 5


def _die_inserting(kind: str, name: str, clock_path: Path, tear: int, key: str) -> bool:
    """Kill an inserter of ``key`` after store ``tear``; False if the insert had fewer stores."""
    with strike(
        "insert", tear, KILL, lambda report: Keyed(kind, name, clock_path), lambda mine: mine.write(key)
    ) as s:
        return s.died


_TEARS: dict[str, list[int]] = {}


def half_published_tears(kind: str, make_name: Callable[[str], str], tmp_path: Path) -> list[int]:
    """Every insert store after which a killed inserter leaves its entry half-published (the
    entry's generation or its row's copy negative): what a rollback has to undo."""
    if kind not in _TEARS:
        tears, tear = [], 0
        while True:
            tear += 1
            name, clock_path = make_name(f"tears{tear}"), tmp_path / f"tears{tear}"
            t = Keyed(kind, name, clock_path)
            try:
                if not _die_inserting(kind, name, clock_path, tear, "first"):
                    break
                if min(generations(t.w)) < 0:
                    tears.append(tear)
            finally:
                t.close()
                shmwin.unlink(name)
        assert tears, "no insert store leaves a half-published entry"
        _TEARS[kind] = tears
    return _TEARS[kind]


@pytest.mark.parametrize("tear", ["first", "last"])
@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_rollback(make_name, tmp_path, kind, sig, tear):
    """An inserter dies after the first (or the last) of its stores that leave the entry half
    published; the process rolling it back (the next key-table locker) is then struck at every
    store of the rollback."""
    tears = half_published_tears(kind, make_name, tmp_path)
    at = tears[0] if tear == "first" else tears[-1]

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"rollback{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path)
        try:
            assert t.write("old", 3) == 3
            assert _die_inserting(kind, name, clock_path, at, "first")
            assert min(generations(t.w)) < 0, f"insert store {at} no longer leaves a half-published entry"
            with strike(
                "rollback", n, sig, lambda report: Keyed(kind, name, clock_path),
                lambda mine: mine.write("second"), lambda mine: mine.peek("second"),
            ) as s:  # fmt: skip
                assert promptly(t.w._backend._core.find, "first") is None, "a half-written key was found"
                assert_usable(t, "first", 0)  # rolls back again if the rollback died
                assert_key_table_sound(t.w)
                assert_usable(t, "second", int(s.completed))
                assert_key_table_sound(t.w)
                assert t.units("old") == 3, "another key was changed"
                check_survivor_keyed(t, "first")
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 5


def _writes_counted(kind: str, name: str, clock_path: Path, key: str) -> int:
    t = Keyed(kind, name, clock_path, capacity=2, on_full="deny")
    try:
        return promptly(t.write, key, 5 if t.lim is None else 10)
    except KeyTableFullError:
        return 0
    finally:
        t.close()


@pytest.mark.parametrize("kind", ["limiter", "window"])
def test_insert_over_a_reused_entry_keeps_what_cached_writers_counted(make_name, tmp_path, kind):
    """An idle key's entry is reused for a new key, and the inserter dies at each store: what a
    process that had the old key cached writes meanwhile must not be lost by the rollback.
    (Before 0e670d2 the row's copy of the generation stayed the old key's until the insert's
    8th store: 'A' got 10 + 10 hits in a minute, and returned adds were lost.)"""
    broken: dict[int, str] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reuse{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path, capacity=2, on_full="deny")  # 2 keys
        try:
            t.write("A")  # cached by this process
            t.write("F")
            t.clock.advance(120)  # both idle
            t.write("F")  # F live again: the victim's new key can only take A's entry
            with strike(
                "insert", n, KILL, lambda report: Keyed(kind, name, clock_path, capacity=2, on_full="deny"),
                lambda mine: mine.write("B"),
            ) as s:  # fmt: skip
                try:
                    here = promptly(t.write, "A", 5 if t.lim is None else 10)  # through the cache
                except KeyTableFullError:
                    here = 0
                there = in_child(_writes_counted, kind, name, clock_path, "A")  # rolls the entry back
                if t.lim is not None:
                    if here + there > 10:
                        broken[n] = f"{here} + {there} hits admitted for 'A' within one minute"
                elif t.units("A") < here + there:
                    broken[n] = f"{here} + {there} adds to 'A' returned, {t.units('A')} counted"
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    every_store(strike_at)
    assert not broken, f"inserter killed after store n (n: what went wrong): {broken}"


# ---- adds: keyed, locked, striped -----------------------------------------------------------

ADD_WINDOW: dict[str, Any] = {"resolutions": ("1m/1s", "1h/1m"), "fields": ("count", "bytes")}
ADD_MODES: dict[str, dict[str, Any]] = {
    "add_keyed": {"capacity": 16}, "add_locked": {"mode": "locked"}, "add_striped": {"stripes": 3},
}  # fmt: skip


def _add(name: str, section: str, clock_path: Path, n: int, key: str | None) -> tuple[int, list[int]]:
    """A survivor's add: (its pid, the pids owning stripes just after it)."""
    w = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=ManualClock(path=clock_path), lock_timeout=5)
    promptly(w.add, n, key=key)
    owners = [pid for _, pid, alive in w.stripe_owners() if alive]
    w.close()  # hands its stripe back
    return os.getpid(), owners


@pytest.mark.parametrize(
    ("section", "call"),
    [("add_keyed", "add"), ("add_keyed", "add_and_total"), ("add_locked", "add"), ("add_striped", "add")],
)
@pytest.mark.parametrize("sig", SIGNALS)
def test_add(make_name, tmp_path, sig, section, call):
    """Window.add (two resolutions, two fields) struck at every store: every add that returned
    is counted, the one in flight at most once per resolution, and the next writer is not held up."""
    key = "k" if section == "add_keyed" else None
    inflights: dict[int, tuple[int, int]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"{section}{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        w = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            if key:
                w.add(7, key="other")

            def before(report):
                mine = Window(name, **ADD_WINDOW, **ADD_MODES[section], clock=ManualClock(path=clock_path))
                for _ in range(3):
                    mine.add(1, key=key)
                    report[PROGRESS] += 1
                mine.add(100, "bytes", key=key)
                # a new bucket in both rings; in the finer one, the slot of the adds above
                ManualClock(path=clock_path).advance(60)
                return mine

            with strike(
                section, n, sig, before, lambda mine: getattr(mine, call)(1, key=key),
                lambda mine: mine.add(0, key=key),
            ) as s:  # fmt: skip
                assert s.report[PROGRESS] == 3
                fine = promptly(w.totals, key=key, resolution=0)  # the last minute: the add in flight
                coarse = promptly(w.totals, key=key, resolution=1)  # the last hour: everything
                inflight = (fine["count"], coarse["count"] - 3)
                assert set(inflight) <= {0, 1}, f"returned adds lost, or the one in flight twice: {inflight}"
                assert inflight[0] >= inflight[1], "rings are written in order"
                assert (fine["bytes"], coarse["bytes"]) == (0, 100), "another field moved"
                if s.completed:
                    assert inflight == (1, 1)
                inflights[n] = inflight
                promptly(w.add, 2, key=key)  # the lock the victim may have died holding
                child, owners = in_child(_add, name, section, clock_path, 5, key)
                assert w.total(key=key, resolution=0) == inflight[0] + 7
                assert w.total(key=key, resolution=1) == 3 + inflight[1] + 7
                assert w.total("bytes", key=key, resolution=1) == 100
                if key:
                    assert w.total(key="other", resolution=1) == 7, "another key moved"
                if section == "add_striped":  # a dead victim's stripe is free again, its counts kept
                    assert child in owners, "a survivor found no stripe"
                    assert os.getpid() in [pid for _, pid, _ in w.stripe_owners()]
            return s.fired
        finally:
            w.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= 2 * 2, f"section {section!r} made only {stores} stores"
    assert_monotone(inflights, "the add in flight")


# ---- clear and reset ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_clear(make_name, tmp_path, kind, sig):
    """Limiter.clear / Window.clear struck at every store: all or nothing, and the key usable."""
    cleared: dict[int, bool] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"clear{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path)
        try:
            assert t.write("k", 10) == 10
            assert t.write("other", 4) == 4
            with strike(
                "clear", n, sig, lambda report: Keyed(kind, name, clock_path),
                lambda mine: mine.clear("k"), lambda mine: mine.peek("k"),
            ) as s:  # fmt: skip
                left = promptly(t.units, "k")
                assert left in (0, 10), f"a clear left {left} of 10 counts: torn"
                if s.completed:
                    assert left == 0
                cleared[n] = left == 0
                assert_usable(t, "k", left)
                assert t.units("other") == 4, "another key moved"
                assert_key_table_sound(t.w)
                # no insert here: see test_a_torn_clear_leaves_no_live_counts_in_a_reclaimable_entry
                check_survivor_keyed(t, "k", insert=False)
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 2
    assert_monotone(cleared, "the clear")


@pytest.mark.parametrize("kind", ["limiter", "window"])
def test_a_torn_clear_leaves_no_live_counts_in_a_reclaimable_entry(make_name, tmp_path, kind):
    """A clear killed at any store leaves its key cleared, or intact and its own: inserting
    other keys until the table is full must not change it."""
    broken: dict[int, str] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"tornclear{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path, capacity=5, on_full="deny")  # 5 keys
        try:
            assert t.write("k", 10) == 10
            assert t.write("other", 4) == 4
            with strike(
                "clear", n, KILL, lambda report: Keyed(kind, name, clock_path, capacity=5, on_full="deny"),
                lambda mine: mine.clear("k"),
            ) as s:  # fmt: skip
                left = t.units("k")
                for i in range(4):  # 3 free entries: the 4th insert finds the table full
                    with suppress(KeyTableFullError):
                        t.write(f"x{i}")
                if t.units("k") != left or t.units("other") != 4:
                    broken[n] = f"'k' counted {left} after the kill, {t.units('k')} after other inserts"
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    every_store(strike_at)
    assert not broken, f"clear killed after store n (n: what went wrong): {broken}"


def _add_and_die(name: str, clock_path: Path, n: int) -> None:
    w = Window(name, span=60, buckets=60, stripes=3, clock=ManualClock(path=clock_path))
    w.add(n)  # in a stripe of its own, left with its data to a dead owner


@pytest.mark.parametrize("kind", ["limiter", "window", "striped"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_reset(make_name, tmp_path, kind, sig):
    """reset() struck after each row it empties (holding every lock): rows are emptied whole
    and in order, and every lock is taken again at once."""
    emptied: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reset{n}"), tmp_path / f"clock{n}"
        if kind == "striped":
            clock = ManualClock(T0, path=clock_path)
            w = Window(name, span=60, buckets=60, stripes=3, clock=clock, lock_timeout=LOCK_TIMEOUT)
            t = None
            w.add(5)
            in_child(_add_and_die, name, clock_path, 7)
            # rows 1 (5) and 2 (7) hold counts; rows 0 and 3 are empty
        else:
            t = Keyed(kind, name, clock_path, capacity=5)
            w = t.w
            keys = [f"k{i}" for i in range(4)]
            for i, key in enumerate(keys):
                assert t.write(key, i + 1) == i + 1
            slots = {key: w._backend._core.find(key)[0] for key in keys}

        def before(report):
            return Window.attach(name, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT)

        try:
            with strike("reset", n, sig, before, lambda mine: mine.reset(), lambda mine: mine.reset()) as s:
                if t is None:
                    total = promptly(w.total)
                    assert total in (12, 7, 0), f"a reset left {total}: a row emptied in part"
                    gone = (total <= 7, total == 0)
                    promptly(w.reset)  # every lock the victim may have died holding
                    assert w.total() == 0
                    w.add(1)
                    in_child(_add_and_die, name, clock_path, 2)
                    assert w.total() == 3
                else:
                    left = {key: promptly(t.units, key) for key in keys}
                    assert all(left[key] in (0, i + 1) for i, key in enumerate(keys)), left
                    done = sorted(slots[key] for key in keys if left[key] == 0)
                    kept = sorted(slots[key] for key in keys if left[key])
                    assert not done or not kept or done[-1] < kept[0], "rows are emptied in order"
                    gone = tuple(int(left[key] == 0) for key in sorted(keys, key=slots.get))
                    for key in keys:
                        assert_usable(t, key, left[key])
                    promptly(w.reset)
                    assert all(t.units(key) == 0 for key in keys)
                    assert_key_table_sound(w)
                    check_survivor_keyed(t, "k0")
                if s.completed:
                    assert all(gone), "the reset completed: every row is empty"
                emptied[n] = tuple(int(x) for x in gone)
            return s.fired
        finally:
            if t is not None:
                t.close()
            else:
                w.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 4
    assert_monotone(emptied, "the reset")


# ---- stripes ----------------------------------------------------------------------------


def _claim_and_add(name: str, count: int) -> tuple[int, list[int]]:
    w = Window.attach(name, lock_timeout=LOCK_TIMEOUT)
    promptly(w.add, count)  # claims a stripe first
    owners = [pid for _, pid, alive in w.stripe_owners() if alive]
    return os.getpid(), owners  # exits without close(): its stripe is left to a dead owner


@pytest.mark.parametrize("stripes", [1, 3])
@pytest.mark.parametrize("sig", SIGNALS)
def test_claim(make_name, sig, stripes):
    """The stripe claim of a striped window, struck at every store: other processes still claim
    stripes (or adopt the victim's), and every count is exact."""

    def strike_at(n: int) -> bool:
        name = make_name(f"claim{n}")
        w = Window(name, span="1h", buckets=60, stripes=stripes, lock_timeout=LOCK_TIMEOUT)
        try:
            with strike(
                "claim", n, sig, lambda report: Window.attach(name, lock_timeout=LOCK_TIMEOUT),
                lambda mine: mine.add(1), lambda mine: mine.add(1),
            ) as s:  # fmt: skip
                # the claim runs before the add: a dead claimer counted nothing; otherwise the
                # add completed (an exception surfaces after it) and `again` added 1 more
                counted = 0 if s.died else 2
                assert promptly(w.total) == counted
                for i in range(3):
                    pid, owners = in_child(_claim_and_add, name, 10)
                    if s.died or stripes > 2:
                        assert pid in owners, f"survivor {i} found no stripe (owners {owners})"
                promptly(w.add, 1)
                assert w.total() == counted + 31
                victim = s.report[PID]
                assert all(pid in (os.getpid(), victim) for _, pid, alive in w.stripe_owners() if alive)
            return s.fired
        finally:
            w.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 2


def test_an_exception_right_after_a_claim_leaks_no_stripe(make_name):
    """(Before 0e670d2 the claim was a separate call from Python: an exception right after it
    lost the claimed row, and the process's next add claimed a second stripe.)"""
    name = make_name("claimleak")
    with Window(name, span=60, buckets=60, stripes=3) as w, strike(
        "claim", 1, RAISE, lambda report: Window.attach(name), lambda mine: mine.add(1),
        lambda mine: mine.add(1),
    ) as s:  # fmt: skip
        assert s.fired and w.total() == 2
        rows = [row for row, pid, alive in w.stripe_owners() if pid == s.report[PID]]
        w.unlink()
        assert len(rows) == 1, f"one live process owns stripes {rows}"


# ---- add_many ---------------------------------------------------------------------------

BATCH_MODES: dict[str, dict[str, Any]] = {"keyed": {"capacity": 16}, "locked": {"mode": "locked"},
                                           "striped": {"stripes": 2}}  # fmt: skip


def _batch(name: str, mode: str, clock_path: Path, value: int, at: int, key: str | None) -> None:
    w = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=ManualClock(path=clock_path))
    promptly(w.add_many, [value], at=[at], key=key)
    w.close()


T1 = T0 + 60 * S  # add_many's struck batch: its buckets' slots last held T0's (now gone)


@pytest.mark.parametrize("mode", ["keyed", "locked", "striped"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_add_batch(make_name, tmp_path, sig, mode):
    """Window.add_many(at=...) struck at every store: earlier batches whole, the batch in flight
    item by item (never a torn bucket), later writers not held up."""
    key = "k" if mode == "keyed" else None
    applied: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"batch{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0 + 30 * S, path=clock_path)
        w = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            if key:
                w.add(9, key="other")

            def before(report):
                clock = ManualClock(path=clock_path)
                mine = Window(name, span=60, buckets=60, **BATCH_MODES[mode], clock=clock)
                mine.add_many([5, 5, 5, 5], at=[T0 - 3 * S, T0 - 2 * S, T0 - S, T0], key=key)
                clock.set(T1)  # those four are out of the window now, still in their slots
                mine.add_many([1, 1], at=[T1 - 10 * S, T1 - 9 * S], key=key)
                report[PROGRESS] = 2
                return mine

            with strike(
                "add_batch", n, sig, before,
                lambda mine: mine.add_many([1, 2, 4, 8], at=[T1 - 3 * S, T1 - 2 * S, T1 - S, T1], key=key),
                lambda mine: mine.add_many([0], at=[T1], key=key),
            ) as s:  # fmt: skip
                series = [int(x) for x in promptly(w.series, key=key)]  # one bucket a second, now last
                assert series[-11:-9] == [1, 1], "a batch that returned is not whole"
                tail = series[-4:]
                torn = [got for got, want in zip(tail, [1, 2, 4, 8], strict=True) if got not in (0, want)]
                assert not torn, f"buckets torn: {tail}"
                assert sum(series) == 2 + sum(tail), f"counts in buckets never written: {series}"
                if s.completed:
                    assert tail == [1, 2, 4, 8]
                applied[n] = tuple(int(x > 0) for x in tail)
                promptly(w.add_many, [16], at=[T1 - 5 * S], key=key)
                in_child(_batch, name, mode, clock_path, 32, T1 - 6 * S, key)
                series = [int(x) for x in w.series(key=key)]
                assert series[-7:-5] == [32, 16] and sum(series) == 2 + sum(tail) + 48
                if key:
                    assert w.total(key="other") == 9, "another key moved"
            return s.fired
        finally:
            w.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 4 * 2
    assert_monotone(applied, "the batch in flight")


# ---- an unrelated process, armed through the environment ------------------------------------

_ARMED_BY_ENV = """
import sys
from shmwin import Limiter, ManualClock, _core
lim = Limiter(sys.argv[1], "10/minute", capacity=16, clock=ManualClock(path=sys.argv[2]), lock_timeout=5)
print("admitted", int(lim.hit("k")), flush=True)
print("fired", int(_core.failpoint_fired()), flush=True)
"""


def test_a_python_c_victim_armed_by_shmwin_failpoint(make_name, tmp_path):
    """SHMWIN_FAILPOINT="hit:n:9" in an unrelated ``python -c`` process: its first hit dies at
    store n; this process then finds the key's lock repaired and exactly 10 admitted in all."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"env{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:
            env = dict(os.environ, PYTHONPATH=str(ROOT), SHMWIN_FAILPOINT=f"hit:{n}:{int(KILL)}")
            proc = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(_ARMED_BY_ENV), name, str(clock_path)],
                capture_output=True, text=True, timeout=60, env=env,
            )  # fmt: skip
            fired = proc.returncode == -KILL
            if not fired:
                assert proc.returncode == 0, proc.stderr
                assert proc.stdout.split() == ["admitted", "1", "fired", "0"]
            counted = promptly(lim.stats, "k").used
            assert_repaired(lim, "k")
            assert counted in (0, 1) and (fired or counted == 1)
            assert sum(promptly(lim.hit, "k") for _ in range(12)) == 10 - counted
            return fired
        finally:
            lim.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 4


# ---- the key table's rebuild --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_rebuild(make_name, tmp_path, kind, sig):
    """A new key finds the table at its capacity with idle keys in it: the index is rebuilt
    without them (their rows freed), struck after each of its stores. Live keys keep every
    count, the new key is usable, the table is sound, and the next insert works at once."""

    def strike_at(n: int) -> bool:
        # The segment's hash key is random: "new" may probe onto an idle key's entry before an
        # empty one and take that row without a rebuild. Such a run tells nothing: another segment.
        for attempt in range(8):
            fired = strike_once(n, attempt)
            if fired is not None:
                return fired
        raise AssertionError("eight segments in a row placed the new key without a rebuild")

    def strike_once(n: int, attempt: int) -> bool | None:
        name, clock_path = make_name(f"rebuild{n}-{attempt}"), tmp_path / f"clock{n}-{attempt}"
        t = Keyed(kind, name, clock_path, capacity=4, on_full="deny")
        try:
            for i in range(4):
                assert t.write(f"old{i}") == 1
            t.clock.advance(64)  # every key idle ...
            assert t.write("old2", 2) == 2 and t.write("old3", 3) == 3  # ... but two
            with strike(
                "rebuild", n, sig, lambda report: Keyed(kind, name, clock_path, capacity=4, on_full="deny"),
                lambda mine: mine.write("new"),
            ) as s:  # fmt: skip
                assert t.w._backend._keys is not None
                if not s.fired and t.w._backend._keys._q[layout.REBUILT_NS_OFF // layout.WORD_BYTES] == 0:
                    return None  # placed on an idle key's entry: no rebuild ran
                assert promptly(t.units, "old2") == 2 and promptly(t.units, "old3") == 3
                assert promptly(t.write, "fresh") == 1  # an insert: repairs, rebuilds if it must
                assert_key_table_sound(t.w)
                assert t.units("old2") == 2 and t.units("old3") == 3, "a live key lost counts"
                assert t.write("new") == 1 or s.completed
                keys = set(t.w.keys())
                assert {"old2", "old3", "fresh", "new"} <= keys and not keys & {"old0", "old1"}
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 5


# ---- reclaim: a full /dev/shm gives idle keys' rows to new ones ---------------------------------


def _no_space_keyed(kind: str, name: str, clock_path: Path) -> Keyed:
    """The victim's table, in a process whose every reservation fails as on a full /dev/shm."""
    _core.nospace(True)
    return Keyed(kind, name, clock_path)


@pytest.mark.parametrize("kind", ["limiter", "window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_reclaim(make_name, tmp_path, kind, sig):
    """A new key needs a row and /dev/shm has no room for one (the test build's nospace): the
    idle keys are dropped in place and their rows taken, struck after each store of a drop.
    Live keys keep every count, the new key is usable at once (from a process with room, and
    from the victim's), the table is sound, and no idle key survives a completed reclaim."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"reclaim{n}"), tmp_path / f"clock{n}"
        t = Keyed(kind, name, clock_path)
        try:
            for i in range(8):  # the 8 rows the table reserves first: the next key needs more
                assert t.write(f"old{i}") == 1
            t.clock.advance(64)  # every key idle ...
            assert t.write("old6", 2) == 2 and t.write("old7", 3) == 3  # ... but two
            with strike(
                "reclaim", n, sig, lambda report: _no_space_keyed(kind, name, clock_path),
                lambda mine: mine.write("new"),
                lambda mine: mine.write("new"),  # the victim, alive: its next insert still has no room
            ) as s:  # fmt: skip
                assert promptly(t.units, "old6") == 2 and promptly(t.units, "old7") == 3
                assert promptly(t.write, "fresh") == 1  # an insert: repairs, rebuilds if it must
                assert_key_table_sound(t.w)
                assert t.units("old6") == 2 and t.units("old7") == 3, "a live key lost counts"
                if s.completed:
                    assert t.units("new") in (1, 2), "the victim's new key was lost"
                    assert not set(t.w.keys()) & {f"old{i}" for i in range(6)}
                assert t.write("new") == 1 or (t.lim is not None and t.units("new") == 10)
                check_survivor_keyed(t, "old7")
            return s.fired
        finally:
            t.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 8


# ---- hit, exact: a log ring of hit times ------------------------------------------------------


class ExactModel:
    """An exact limiter's rule: a hit counts while it is at most P old (limits' moving window)."""

    def __init__(self, limit: int, period_ns: int):
        self.limit, self.period_ns, self.times = limit, period_ns, []  # type: list[int]

    def used(self, now: int) -> int:
        return sum(1 for t in self.times if t >= now - self.period_ns)

    def hit(self, now: int) -> bool:
        if self.used(now) >= self.limit:
            return False
        self.times.append(now)
        return True


EXACT_PRE_HITS = [T0, T0 + 10 * S, T0 + 20 * S, T0 + 20 * S, T0 + 30 * S]
EXACT_SCHEDULE = [(0, "here", 3), (5, "child", 3), (5, "here", 4), (10, "child", 4), (0.5, "here", 3),
                  (30, "child", 12), (20, "here", 12), (61, "here", 12)]  # fmt: skip


def _exact_hits(name: str, clock_path: Path, key: str, count: int) -> list[bool]:
    with Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT) as lim:
        return [bool(promptly(lim.hit, key)) for _ in range(count)]


@pytest.mark.parametrize("exact", [True, 3], ids=["log", "merging-log"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_hit_exact(make_name, tmp_path, exact, sig):
    """An exact limiter's hit ("10/minute", a log of 10 times, or of 3, which merges) struck
    after each of its stores: every returned hit stays counted until P after it, the struck one
    counts at most once (a log of 10) or errs high (a torn merge), and the limit holds in every
    interval afterwards, for this process and another."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"exact{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", exact=exact, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
                for at in EXACT_PRE_HITS:
                    clock.set(at)
                    assert mine.hit("k")
                    report[PROGRESS] += 1
                clock.set(T0 + 50 * S)
                return mine

            with strike("hit", n, sig, before, lambda mine: mine.hit("k")) as s:
                assert s.report[PROGRESS] == len(EXACT_PRE_HITS)
                now = clock()
                model = ExactModel(10, 60 * S)
                model.times += EXACT_PRE_HITS
                used = promptly(lim.stats, "k").used  # the dead holder's lock: repaired at once
                inflight = used - model.used(now)
                if exact is True:
                    assert inflight in (0, 1), f"returned hits lost, or the one in flight twice: {inflight}"
                    assert inflight == 1 or not s.completed, "the hit completed: it is counted"
                else:  # a torn merge counts the oldest entry's hits (3 here) twice: more, never less
                    assert inflight >= 0, f"a merge lost returned hits: {inflight}"
                    assert inflight in (0, 1, 3) and (inflight == 1 or not s.completed), inflight
                struck = [now] if inflight == 1 else []  # counted: the struck hit was admitted
                admitted = [*EXACT_PRE_HITS, *struck]
                model.times += struck
                for advance, who, count in EXACT_SCHEDULE:
                    now = clock.advance(advance)
                    if who == "here":
                        got = [bool(promptly(lim.hit, "k")) for _ in range(count)]
                    else:
                        got = in_child(_exact_hits, name, clock_path, "k", count)
                    if exact is True:
                        want = [model.hit(now) for _ in range(count)]
                        assert got == want, (
                            f"{who} at T0+{(now - T0) / S}s: admitted {got}, the rule says {want}"
                        )
                        assert lim.stats("k").used == model.used(now)
                    else:  # merged times leave late: never more admitted than the exact rule would
                        exact_rule = ExactModel(10, 60 * S)
                        exact_rule.times = list(model.times)
                        assert sum(got) <= sum(exact_rule.hit(now) for _ in range(count))
                        model.times += [now] * sum(got)
                    admitted += [now] * sum(got)
                assert_never_over(lim, admitted)
            return s.fired
        finally:
            lim.close()
            shmwin.unlink(name)

    # intent, the entry's time and hits, the row's last write; a merge first moves the oldest's hits
    assert every_store(strike_at) == (4 if exact is True else 6)


# ---- limits' counters: the fixed window and the sliding window counter (core/counters.c) -------

COUNTER_P = 10 * S  # T0 is a multiple of it: window 100 starts at T0


def _counters(kind: str, name: str, clock: ManualClock, create: bool = True) -> Any:
    from shmwin.integrations.limits_fixed import FixedWindows
    from shmwin.integrations.limits_sliding import SlidingCounters

    opener = FixedWindows if kind == "fixed" else SlidingCounters
    found = opener.open(name, COUNTER_P, clock, 16, create=create)
    assert found is not None
    return found


def _counter_calls(kind: str, name: str, clock_path: Path, n: int, limit: int) -> list[int]:
    """A survivor's n calls on "k": a fixed window's counts after each incr, or 0/1 per hit."""
    c = _counters(kind, name, ManualClock(path=clock_path), create=False)
    try:
        return [c.incr("k", 1) if kind == "fixed" else int(c.hit("k", limit, 1)) for _ in range(n)]
    finally:
        c.close()


@pytest.mark.parametrize("when", ["same-window", "new-window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_fixed_incr(make_name, tmp_path, sig, when):
    """The fixed window's incr struck at every store: every incr that returned is counted, the
    one in flight at most once; a torn new window may still hold the old count (refusals
    early), never fewer than the hits it counted; the next caller is not held up."""
    seen: dict[int, int] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"fixed{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        mine = _counters("fixed", name, clock)
        try:
            mine.incr("other", 7)

            def before(report):
                theirs = _counters("fixed", name, ManualClock(path=clock_path), create=False)
                for _ in range(3):
                    theirs.incr("k", 1)
                    report[PROGRESS] += 1
                ManualClock(path=clock_path).advance(3 if when == "same-window" else 12)
                return theirs

            with strike("fixed_incr", n, sig, before, lambda t: t.incr("k", 1), lambda t: t.get("k")) as s:
                assert s.report[PROGRESS] == 3
                count = promptly(mine.get, "k")  # the row lock the victim may have died holding
                if when == "same-window":
                    assert count in (3, 4), f"returned incrs lost, or the one in flight twice: {count}"
                    assert not s.completed or count == 4
                else:  # the old window is over: the new one holds the hit, or nothing, or (torn) the old 3
                    assert count in (0, 1, 3), f"a new window holding {count}"
                    assert not s.completed or count == 1
                seen[n] = count
                got = in_child(_counter_calls, "fixed", name, clock_path, 4, 0)
                assert got == [count + i for i in range(1, 5)], f"a survivor's incrs counted {got}"
                assert promptly(mine.incr, "k", 1) == count + 5
                assert mine.get("other") == (7 if when == "same-window" else 0), "another key moved"
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= (2 if when == "same-window" else 3), f"section 'fixed_incr' made only {stores} stores"


def _weighted(previous: int, current: int, elapsed_ns: int) -> int:
    return previous * (COUNTER_P - elapsed_ns) // COUNTER_P + current


@pytest.mark.parametrize("when", ["same-window", "new-window"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_sliding_hit(make_name, tmp_path, sig, when):
    """The sliding counter's hit struck at every store: afterwards its weighted count is never
    below what the returned hits make it (no lost count beyond the hit in flight), so the
    hits admitted next never pass the limit by limits' own rule; no lock hangs."""
    limit = 8
    seen: dict[int, tuple[int, int]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"sliding{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0 + 1 * S, path=clock_path)
        mine = _counters("sliding", name, clock)
        try:
            assert mine.hit("other", limit, 2)

            def before(report):
                theirs = _counters("sliding", name, ManualClock(path=clock_path), create=False)
                for _ in range(5):
                    assert theirs.hit("k", limit, 1)
                    report[PROGRESS] += 1
                ManualClock(path=clock_path).advance(3 if when == "same-window" else 11)
                return theirs

            with strike(
                "sliding_hit", n, sig, before, lambda t: t.hit("k", limit, 1), lambda t: t.window("k")
            ) as s:  # fmt: skip
                assert s.report[PROGRESS] == 5
                previous, current, elapsed = promptly(mine.window, "k")
                # what the returned hits weigh now (the one in flight: 0 or 1 more)
                truth = (0, 5) if when == "same-window" else (5, 0)
                floor = _weighted(*truth, elapsed)
                weighed = _weighted(previous, current, elapsed)
                assert weighed >= floor, f"returned hits lost: {previous, current} weighs {weighed} < {floor}"
                if s.completed:
                    assert (previous, current) == (truth[0], truth[1] + 1), "the hit completed: counted once"
                else:
                    assert weighed <= floor + 5 + 1, "more than the torn state can hold"
                seen[n] = (previous, current)
                # the next hits, here and from a survivor, never pass the limit by the true count
                got = in_child(_counter_calls, "sliding", name, clock_path, 6, limit)
                got += [int(promptly(mine.hit, "k", limit, 1)) for _ in range(6)]
                room = limit - floor - (1 if s.completed else 0)
                assert sum(got) <= room, f"{sum(got)} admitted after the strike, room for {room}"
                assert got == sorted(got, reverse=True), "admitted after a refusal at one time"
                if s.completed:
                    assert sum(got) == room, "a completed section leaves the exact room"
                other = (0, 2) if when == "same-window" else (2, 0)
                assert mine.window("other")[:2] == other, "another key moved"
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= (2 if when == "same-window" else 4), f"section 'sliding_hit' made only {stores} stores"


# ---- the token bucket (core/counters.c: token_take) -------------------------------------------

TOKEN_BURST, TOKEN_T = 5, S // 10  # "10/second", burst 5


def _token_bucket(name: str, clock: ManualClock, create: bool = True) -> Any:
    from shmwin import TokenBucket

    if create:
        return TokenBucket(name, "10/second", burst=TOKEN_BURST, capacity=16, clock=clock)
    return TokenBucket.attach(name, clock=clock)


def _token_takes(name: str, clock_path: Path, n: int) -> list[int]:
    """A survivor's n hits on "k": 0/1 each."""
    tb = _token_bucket(name, ManualClock(path=clock_path), create=False)
    try:
        return [int(tb.hit("k")) for _ in range(n)]
    finally:
        tb.close()


def _token_words(tb: Any, key: str) -> tuple[int, int]:
    """``key``'s (tat, last write), read from the segment by the layout's offsets."""
    from shmwin.backends.shm import format as words

    b = tb.window._backend
    row, _ = b._core.find(key)
    at = (b._lay.rows_off + row * b._lay.row_bytes) // 8
    return int(b._q[at + b._lay.ring_words[0] + words.TOKEN_STATE_TAT]), int(b._q[at + words.KEY_ROW_LAST_NS])


@pytest.mark.parametrize("when", ["drained", "refilled"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_token_take(make_name, tmp_path, sig, when):
    """The token bucket's take struck at every store: the tokens left are those the returned
    takes leave, less the take in flight at most once; the next takes, here and from a
    survivor, never get more than that; the key's last write never lets the key table reclaim
    the row before its bucket is full again; no lock hangs."""
    seen: dict[int, int] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"token{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        mine = _token_bucket(name, clock)
        try:
            assert mine.hit("other", 2)

            def before(report):
                theirs = _token_bucket(name, ManualClock(path=clock_path), create=False)
                for _ in range(3):
                    assert theirs.hit("k")
                    report[PROGRESS] += 1
                if when == "refilled":  # a full bucket again: the take moves the key's last write
                    ManualClock(path=clock_path).advance(10)
                return theirs

            with strike("token_take", n, sig, before, lambda t: t.hit("k"), lambda t: t.stats("k")) as s:
                assert s.report[PROGRESS] == 3
                truth = 2 if when == "drained" else TOKEN_BURST  # what the returned takes leave
                left = promptly(mine.stats, "k").remaining  # the row lock the victim may have died holding
                assert left in (truth - 1, truth), f"{left} tokens left, the returned takes leave {truth}"
                assert not s.completed or left == truth - 1, "the take completed: taken once"
                seen[n] = truth - left
                tat, last = _token_words(mine, "k")
                full_at = tat - TOKEN_BURST * TOKEN_T
                assert last >= full_at, "the row may be reclaimed before its bucket is full"
                got = in_child(_token_takes, name, clock_path, TOKEN_BURST + 1)
                got += [int(promptly(mine.hit, "k")) for _ in range(2)]
                assert sum(got) == left, f"{sum(got)} taken after the strike, {left} were left"
                assert got == sorted(got, reverse=True), "taken after a refusal at one time"
                other = 3 if when == "drained" else TOKEN_BURST
                assert mine.stats("other").remaining == other, "another key moved"
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert_monotone(seen, "token_take")
    # intent and tat; a refilled bucket's take also moves the key's last write first
    assert stores == (2 if when == "drained" else 3), f"section 'token_take' made {stores} stores"


# ---- a limiter's decisions: counted after the key's lock is given back ----------------------


def _decided(name: str, clock_path: Path) -> tuple[bool, tuple[int, int, int]]:
    """A survivor's hit on the struck limiter, and its decisions after it."""
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
    allowed = promptly(lim.hit, "k")
    decided = tuple(lim.decisions())
    lim.close()
    return allowed, decided  # type: ignore[return-value]


@pytest.mark.parametrize("sig", SIGNALS)
def test_decision(make_name, tmp_path, sig):
    """A hit struck at every store of its decision (the tally's "add_striped", after the row
    lock is given back): the hit itself is counted whole, the decision in flight at most once,
    and no lock is held: the next hit, here and in another process, goes through."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"decision{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path))
                assert all(mine.hit("k") for _ in range(7))
                report[PROGRESS] = 7
                return mine

            with strike("add_striped", n, sig, before, lambda mine: mine.hit("k")) as s:
                assert s.report[PROGRESS] == 7
                assert promptly(lim.stats, "k").used == 8, "the hit under its row lock is whole"
                admitted, rejected, near = promptly(lim.decisions)  # the 8th leaves 2 of 10: near
                assert rejected == 0 and admitted in (7, 8), (admitted, rejected, near)
                assert near <= admitted - 7, (admitted, near)
                if s.completed:
                    assert (admitted, near) == (8, 1)
                allowed, decided = in_child(_decided, name, clock_path)
                assert allowed and decided == (admitted + 1, 0, near + 1)
                assert promptly(lim.hit, "k") and not lim.hit("k")
                assert lim.decisions() == (admitted + 2, 1, near + 2)
            return s.fired
        finally:
            lim.unlink()
            lim.close()

    stores = every_store(strike_at)
    assert stores >= 2, f"a decision made only {stores} stores"  # admitted, then near


# ---- per-key concurrency (core/concurrency.c) --------------------------------------------


def _conc_take(name: str, key: str, n: int) -> list[bool]:
    """A survivor's n tries at a slot of ``key`` (held until it exits: its slots go with it)."""
    c = shmwin.Concurrency.attach(name)
    try:
        return [c.acquire(key, timeout=0) for _ in range(n)]
    finally:
        c.close()


def _conc_dead_holder(name: str, key: str) -> None:
    """Leave a dead holder's entry in ``key``'s row: a survivor takes a slot and exits."""
    assert in_child(_conc_take, name, key, 1) == [True]


def _conc_after(mine: Any, name: str, live: int, limit: int) -> None:
    """From other processes: ``live`` slots held, the rest free, never one more."""
    assert promptly(mine.count, "k") == live, "a dead holder counted, or a live one lost"
    free = limit - live
    got = in_child(_conc_take, name, "k", limit + 1)
    assert got == [True] * free + [False] * (limit + 1 - free), f"a survivor took {got}: {free} were free"
    got = [promptly(mine.acquire, "k", 0) for _ in range(limit + 1)]
    assert got == [True] * free + [False] * (limit + 1 - free), f"this process took {got}: {free} were free"
    assert mine.count("k") == limit
    for _ in range(free):
        mine.release("k")


@pytest.mark.parametrize("held", [0, 1])
@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_acquire(make_name, sig, held):
    """Concurrency's acquire struck at every store, its victim holding no slot of the key
    (a new entry) or one (its count grows), with a dead holder's entry to clear: afterwards
    never more than the limit, no lock held up, and a dead victim's slots free at once."""
    limit = 3

    def strike_at(n: int) -> bool:
        name = make_name(f"conc{n}")
        mine = shmwin.Concurrency(name, limit)
        try:
            assert mine.acquire("other", 0)
            _conc_dead_holder(name, "k")

            def before(report):
                theirs = shmwin.Concurrency.attach(name)
                assert theirs.acquire("j", 0)  # its stripe, claimed before the strike
                for _ in range(held):
                    assert theirs.acquire("k", 0)
                    report[PROGRESS] += 1
                return theirs

            take, count = (lambda t: t.acquire("k", 0)), (lambda t: t.count("k"))
            with strike("conc_acquire", n, sig, before, take, count) as s:
                assert s.report[PROGRESS] == held
                live = 0 if s.died else held + 1  # a section that completed took its slot
                _conc_after(mine, name, live, limit)
                assert mine.count("other") == 1, "another key moved"
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= 3, f"section 'conc_acquire' made only {stores} stores"


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_release(make_name, sig):
    """Concurrency's release struck at every store: a dead victim's slots are all free, a live
    one's release happened once; no lock held up, never more than the limit."""
    limit = 3

    def strike_at(n: int) -> bool:
        name = make_name(f"concrel{n}")
        mine = shmwin.Concurrency(name, limit)
        try:

            def before(report):
                theirs = shmwin.Concurrency.attach(name)
                assert theirs.acquire("k", 0) and theirs.acquire("k", 0)
                report[PROGRESS] += 2
                return theirs

            give, count = (lambda t: t.release("k")), (lambda t: t.count("k"))
            with strike("conc_release", n, sig, before, give, count) as s:
                assert s.report[PROGRESS] == 2
                _conc_after(mine, name, 0 if s.died else 1, limit)
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= 2, f"section 'conc_release' made only {stores} stores"


@pytest.mark.parametrize("sig", SIGNALS)
def test_conc_claim(make_name, sig):
    """A process's stripe claim struck at every store (2 stripes: ours, and the victim's):
    a dead claimer's stripe is taken by the next process at once, its entries count nothing;
    a live one keeps its stripe (the next process finds none) and its slot."""
    limit = 2

    def strike_at(n: int) -> bool:
        name = make_name(f"concclaim{n}")
        mine = shmwin.Concurrency(name, limit, processes=2)
        try:
            assert mine.acquire("other", 0)  # stripe 1

            def before(report):
                return shmwin.Concurrency.attach(name)

            take, count = (lambda t: t.acquire("k", 0)), (lambda t: t.count("k"))
            with strike("conc_claim", n, sig, before, take, count) as s:
                if s.died:
                    _conc_after(mine, name, 0, limit)  # the survivor claims the dead victim's stripe
                else:
                    assert promptly(mine.count, "k") == 1
                    with pytest.raises(AssertionError, match="KeyTableFullError"):
                        in_child(_conc_take, name, "k", 1)  # the live victim keeps its stripe
            return s.fired
        finally:
            mine.close()
            shmwin.unlink(name)

    stores = every_store(strike_at)
    assert stores >= 4, f"section 'conc_claim' made only {stores} stores"


# ---- the moving window's hit times: the row, its chunks, the chunk heap (core/moving.c) -----------

MOVING_P = 10 * S


def _moving(name: str, clock_path: Path, limit: int, times: int) -> Any:
    from shmwin.integrations.limits_moving import MovingLogs

    return MovingLogs.open(name, limit, MOVING_P, times, ManualClock(path=clock_path), 16, create=True)


def _moving_hits(name: str, clock_path: Path, key: str, count: int) -> tuple[int, int]:
    """A survivor: ``count`` hits of ``key``; (admitted, then counted)."""
    from shmwin.integrations.limits_moving import MovingLogs

    m = MovingLogs.open(name, 0, 0, 0, ManualClock(path=clock_path), None, create=False)
    try:
        admitted = sum(bool(promptly(m.hit, key, 1)) for _ in range(count))
        return admitted, m.used_and_reset(key)[0]
    finally:
        m.close()


# section -> (limit, times, the victim's hits of "k" before the struck one (at T0 + i), free
# chunks made first (a key of 2 full chunks cleared), how far the clock moves before the strike)
MOVING_CASES = {
    # the 6th hit needs a second chunk (2 entries inline, 3 a chunk): the heap's next
    "chunk_alloc": (40, 1024, 5, 0, 0),
    "chunk_alloc_free": (40, 1024, 5, 2, 0),  # ... from the free list
    "chunk_free": (40, 1024, 8, 0, MOVING_P + 100),  # two full chunks whose hits all left (a 64 ns quantum)
    "moving_hit": (40, 5, 5, 0, 0),  # five entries counting, times=5: the two oldest merge
    # two entries whose hits left: one zeroed, one restamped
    "moving_hit_stale": (40, 1024, 2, 0, MOVING_P + 100),
}


@pytest.mark.parametrize("case", list(MOVING_CASES))
@pytest.mark.parametrize("sig", SIGNALS)
def test_moving_hit(make_name, tmp_path, case, sig):
    """A moving log's hit struck at every store of its section (taking a chunk, giving chunks
    back, or writing the entry): afterwards, from this process and a fresh one, no lock hangs
    (a dead holder of the chunk lock has its free list rebuilt), no hit that returned is
    forgotten early, the limit is never passed, other keys are untouched, and no chunk leaked:
    once every hit has left, every chunk is on the free list, and the same load again takes
    no chunk past the heap's top."""
    limit, times, before_hits, free_made, advance = MOVING_CASES[case]
    section = "chunk_alloc" if case.startswith("chunk_alloc") else case.removesuffix("_stale")

    def load(m: Any, clock: ManualClock, at: int) -> None:
        if free_made:
            for _ in range(2 + 2 * shmwin.backends.shm.format.CHUNK_ENTRIES):
                assert m.hit("f", 1)
            m.clear("f")
        for i in range(before_hits):
            clock.set(at + i)
            assert m.hit("k", 1)

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"mv{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        m = _moving(name, clock_path, limit, times)
        try:
            for _ in range(12):
                assert m.hit("other", 1)
            if free_made:  # the free chunks the victim's load takes from: a key's, cleared
                for _ in range(2 + 2 * shmwin.backends.shm.format.CHUNK_ENTRIES):
                    assert m.hit("f", 1)
                m.clear("f")

            def before(report):
                mine = _moving(name, clock_path, limit, times)
                mine_clock = ManualClock(path=clock_path)
                for i in range(before_hits):
                    mine_clock.set(T0 + i)
                    assert mine.hit("k", 1)
                    report[PROGRESS] += 1
                mine_clock.set(T0 + before_hits + advance)
                return mine

            with strike(section, n, sig, before, lambda mine: mine.hit("k", 1),
                        lambda mine: mine.used_and_reset("k")) as s:  # fmt: skip
                assert s.report[PROGRESS] == before_hits
                now = clock()
                # the hits that returned, still counted
                held = sum(1 for i in range(before_hits) if now - MOVING_P <= T0 + i)
                used = promptly(m.used_and_reset, "k")[0]
                assert used >= held + (1 if s.completed else 0), f"a counted hit was forgotten early: {used}"
                other = 12 if now - MOVING_P <= T0 else 0
                assert promptly(m.used_and_reset, "other")[0] == other, "another key moved"
                assert m.hit("other", 1)
                admitted, counted = in_child(_moving_hits, name, clock_path, "k", limit)
                more = sum(bool(promptly(m.hit, "k", 1)) for _ in range(3))
                at_least = held + admitted + more + (1 if s.completed else 0)
                assert at_least <= limit, f"over the limit: {at_least} admitted in one period"
                if not s.fired or sig == RAISE:  # untorn: exact
                    assert at_least == limit and counted == limit
                # every hit leaves: every chunk is back once each key is emptied (the chunk
                # lock's repair rebuilt the free list if its holder died)
                clock.advance(ns=3 * MOVING_P)
                m.reset()
                top, free, _, _ = m.chunks()
                assert free == top, f"{top - free} chunks leaked"
                load(m, clock, clock())
                assert m.hit("k", 1)
                assert m.chunks()[0] == top, "the same load took chunks past the heap's top"
            return s.fired
        finally:
            m.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= (3 if section == "moving_hit" else 5)


@pytest.mark.parametrize("sig", SIGNALS)
def test_chunk_repair(make_name, tmp_path, sig):
    """The chunk lock's repair, itself struck at every store (its holder died in chunk_alloc
    first): the next taker repairs again; no chunk is lost or in two places."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"cr{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        m = _moving(name, clock_path, 40, 1024)
        try:
            for key in ("a", "b"):
                for _ in range(20):
                    assert m.hit(key, 1)
            m.clear("a")

            def first_death(report):
                mine = _moving(name, clock_path, 40, 1024)
                _core.failpoint("chunk_alloc", 3, KILL)
                for _ in range(20):
                    mine.hit("k", 1)

            p = CTX.Process(target=first_death, args=(None,), daemon=True)
            p.start()
            p.join(60)
            assert p.exitcode == -KILL
            with strike("chunk_repair", n, sig, lambda report: _moving(name, clock_path, 40, 1024),
                        lambda mine: mine.chunks()) as s:  # fmt: skip
                assert promptly(m.used_and_reset, "b")[0] == 20
                used = m.used_and_reset("k")[0]
                assert used <= 40 and sum(bool(m.hit("k", 1)) for _ in range(40)) == 40 - used
                clock.advance(ns=3 * MOVING_P)
                m.reset()
                top, free, _, _ = m.chunks()
                assert free == top, f"{top - free} chunks leaked"
            return s.fired
        finally:
            m.close()
            shmwin.unlink(name)

    assert every_store(strike_at) >= 2


# ---- refund: give back the most recent hits -------------------------------------------------


def _fill(name: str, clock_path: Path) -> tuple[int, int]:
    """A survivor's view of the struck key, then hits until refused: (used, admitted)."""
    lim = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
    used = promptly(lim.stats, "k").used
    admitted = 0
    while promptly(lim.hit, "k"):
        admitted += 1
    lim.close()
    return used, admitted


@pytest.mark.parametrize("exact", [False, True], ids=["buckets", "exact"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_refund(make_name, tmp_path, sig, exact):
    """refund(k, 4) of 6 hits struck at every store: it gave back 0 to 4, never more, the
    key's lock is free (repaired), and the limit holds exactly from there on."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"refund{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", clock=clock, exact=exact, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path))
                assert mine.hit("k", cost=2)
                ManualClock(path=clock_path).advance(10)
                assert mine.hit("k", cost=4)
                report[PROGRESS] = 6
                return mine

            with strike("refund", n, sig, before, lambda mine: mine.refund("k", 4)) as s:
                assert s.report[PROGRESS] == 6
                used, admitted = in_child(_fill, name, clock_path)
                assert 2 <= used <= 6, used  # never more given back than asked
                if s.completed:
                    assert used == 2
                assert used + admitted == 10, (used, admitted)  # exact and strict after the repair
                assert not promptly(lim.hit, "k")
            return s.fired
        finally:
            lim.unlink()
            lim.close()

    stores = every_store(strike_at)
    assert stores >= 2, f"refund made only {stores} stores"


# ---- the two-tier limiter's host tier (core/lease.c), against a real redis-server -------------

LEASE_LIMIT, LEASE_MAX = 40, 5  # "40/minute": leases of 1, 2, 4, then at most 40 // 8 hits
RESULT = 5  # the report word where the struck call's answer lands, if it returned


def _lease_limiter(name: str, url: str, clock_path: Path) -> Limiter:
    clock = ServerTime(ManualClock(path=clock_path))  # the host's and the server's time
    rate = f"{LEASE_LIMIT}/minute"
    return Limiter(name, rate, backend="shm+" + url, clock=clock, lock_timeout=LOCK_TIMEOUT)


def _lease_hits(name: str, url: str, clock_path: Path, n: int) -> int:
    """A survivor's hits on "k" (a fresh process of the same host): how many were admitted."""
    lim = _lease_limiter(name, url, clock_path)
    try:
        return sum(bool(promptly(lim.hit, "k")) for _ in range(n))
    finally:
        lim.close()


def _lease_before(section: str, name: str, url: str, clock_path: Path) -> Callable[[Any], Any]:
    """The victim's way to the struck section, from a fresh limiter: its admitted hits counted
    in report[PROGRESS]."""

    def before(report: Any) -> Any:
        lim = _lease_limiter(name, url, clock_path)
        hits = {"lease_spend": 2, "lease_seal": 2, "lease_install": 3, "lease_deny": LEASE_LIMIT,
                "lease_refund": 2}[section]  # fmt: skip
        for _ in range(hits):
            assert lim.hit("k")
            report[PROGRESS] += 1
        if section == "lease_seal":  # lease 2 (2 hits, 1 spent) expires: the next hit seals it
            ManualClock(path=clock_path).advance(2)
        report[RESULT] = -1
        return lim, report

    return before


def _lease_op(section: str) -> Callable[[Any], Any]:
    def op(state: Any) -> None:
        lim, report = state
        report[RESULT] = int(lim.refund("k", 1) if section == "lease_refund" else lim.hit("k"))

    return op


LEASE_SECTIONS = ["lease_spend", "lease_seal", "lease_install", "lease_deny", "lease_refund"]


@pytest.mark.parametrize("section", LEASE_SECTIONS)
@pytest.mark.parametrize("sig", SIGNALS)
def test_lease(make_name, tmp_path, redis_server, sig, section):
    """Each lease section struck at every store: no lock or key hangs; the hits admitted --
    those that returned before, the struck call's if it returned, a survivor's, this process's
    -- never exceed the limit (a refund gives one back at most); at most the two leases in play
    are stranded (taken in Redis, never spent); and a period later, all of the limit again."""
    url = redis_server.url

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"lease{n}"), tmp_path / f"clock{n}"
        ManualClock(T0, path=clock_path)
        mine = _lease_limiter(name, url, clock_path)
        try:
            before = _lease_before(section, name, url, clock_path)
            with strike(section, n, sig, before, _lease_op(section), lambda st: st[0].stats("k")) as s:
                returned = s.report[PROGRESS]
                struck = s.report[RESULT]
                if section != "lease_refund" and struck > 0:
                    returned += struck
                given_back = max(struck, 0) if section == "lease_refund" else 0
                later = in_child(_lease_hits, name, url, clock_path, 2 * LEASE_LIMIT)
                later += sum(bool(promptly(mine.hit, "k")) for _ in range(LEASE_LIMIT))
                assert returned + later <= LEASE_LIMIT + given_back + (section == "lease_refund"), (
                    f"{returned} admitted before, {later} after: over the limit of {LEASE_LIMIT}"
                )
                assert returned + later >= LEASE_LIMIT - 2 * LEASE_MAX, (returned, later)
                ManualClock(path=clock_path).advance(66)  # every lease, stranded or not, left the window
                assert in_child(_lease_hits, name, url, clock_path, 2 * LEASE_LIMIT) == LEASE_LIMIT
            return s.fired
        finally:
            mine.unlink()
            mine.close()

    stores = every_store(strike_at)
    assert stores >= 2, f"section {section!r} made only {stores} stores"
