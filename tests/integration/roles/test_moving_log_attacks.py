"""Red team of the moving window's format 8 (role "moving-log", core/moving.c): one-word hit
entries (a time rounded up to a quantum, modulo 2**32, read back against the row's last write),
digest keys, the names area, 32-byte chunks.

Attacks through the public paths (MovingLogs; limits' moving window on shm://), with real
processes and manual clocks: a model of the exact rule over many periods and gaps (2**31 and
2**32 quanta), the paths that empty a row before hits come back, clocks that differ between
processes, keys that must stay distinct, the names area under a racing writer, junk words.
Tests marked xfail(strict=True) show a bug found (the reason says which).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import subprocess
import sys
import textwrap

import pytest
from support.helpers import ROOT, run_python

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm import format as layout
from shmwin.integrations import limits_moving
from shmwin.integrations.limits_moving import MovingLogs

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000_000 * S
DAY = 86_400 * S


def quantum(period_ns: int) -> int:
    return 1 << layout.moving_quantum_shift(period_ns)


def rounded_up(t: int, q: int) -> int:
    return -(-t // q) * q


def open_log(name: str, clock: ManualClock, limit: int, period_ns: int, times: int = 1024,
             capacity: int | None = 16) -> MovingLogs:  # fmt: skip
    found = MovingLogs.open(name, limit, period_ns, times, clock, capacity, create=True)
    assert found is not None
    return found


class Model:
    """limits' rule over the admitted hits: a hit counts while its time (rounded up to the
    quantum, as stored) is at least now - P. `exact` also keeps the unrounded times, against
    which no interval of length P may hold more than the limit."""

    def __init__(self, limit: int, period_ns: int):
        self.limit, self.period_ns, self.q = limit, period_ns, quantum(period_ns)
        self.hits: dict[object, list[tuple[int, int, int]]] = {}

    def used(self, key: object, now: int) -> int:
        return sum(c for _, st, c in self.hits.get(key, ()) if st >= now - self.period_ns)

    def used_exactly(self, key: object, now: int) -> int:
        return sum(c for t, _, c in self.hits.get(key, ()) if t >= now - self.period_ns)

    def admits(self, key: object, now: int, cost: int) -> bool:
        return cost <= self.limit and self.used(key, now) + cost <= self.limit

    def count(self, key: object, now: int, cost: int) -> None:
        if cost:
            self.hits.setdefault(key, []).append((now, rounded_up(now, self.q), cost))

    def forget(self, key: object) -> None:
        self.hits.pop(key, None)


def gaps(period_ns: int, limit: int, rng: random.Random) -> int:
    q = quantum(period_ns)
    r = rng.random()
    if r < 0.5:
        return rng.randrange(max(1, period_ns // limit))
    if r < 0.75:
        near = (period_ns - 1, period_ns, period_ns + 1, q - 1, q, q + 1, max(0, period_ns - q),
                period_ns + q)
        return rng.choice(near)
    if r < 0.85:
        wrap = (1 << 32) * q
        return rng.choice([wrap // 2 - q, wrap // 2, wrap // 2 + period_ns, wrap - period_ns, wrap - 1, wrap,
                           wrap + 1, wrap + period_ns, rng.randrange(2 * wrap)])  # fmt: skip
    return rng.randrange(3 * period_ns)


PERIODS = [1, 1000, (1 << 28) - 1, 1 << 28, (1 << 28) + 1, S, 60 * S, DAY, 30 * DAY]


@pytest.mark.parametrize("period_ns", PERIODS)
@pytest.mark.parametrize("start_ns", [0, 1, T0, 1 << 61])
def test_every_answer_is_the_rule_over_rounded_times(name, period_ns, start_ns):
    """Random hits (costs 0, 1, 2, the limit) on two keys, gaps around P, the quantum, and 2**31
    and 2**32 quanta: each answer and each (used) reading is the model's, so no hit is ever
    forgotten early (nor counted past its rounded time), and no interval of P holds more than
    the limit."""
    rng = random.Random(period_ns * 7 + start_ns)
    limit = 5
    clock = ManualClock(start_ns)
    m = open_log(name, clock, limit, period_ns)
    model = Model(limit, period_ns)
    try:
        t = start_ns
        for step in range(600):
            gap = gaps(period_ns, limit, rng)
            t = t + gap if t + gap < layout.MAX_NOW_NS - 1 else t
            clock.set(t)
            key = rng.choice(("a", b"a"))
            cost = rng.choice((0, 1, 1, 1, 2, limit))
            expected = model.admits(key, t, cost)
            assert m.hit(key, cost) is expected, (step, t, gap, key, cost, model.used(key, t))
            if expected:
                assert model.used_exactly(key, t) + cost <= limit
                model.count(key, t, cost)
            assert m.used_and_reset(key)[0] == model.used(key, t), (step, t, gap, key)
    finally:
        m.close()
        shmwin.unlink(name)


@pytest.mark.parametrize("times", [1, 2, 3, 4, 7])
def test_merged_entries_never_admit_past_the_limit(name, times):
    """At most `times` entries a key (?times=): the oldest merge into a newer time; admissions
    stay under the limit in every interval of P, whatever the gaps and costs."""
    period_ns, limit = 10 * S, 9
    rng = random.Random(times)
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns, times=times)
    model = Model(limit, period_ns)
    try:
        t, admitted = T0, 0
        for _ in range(2000):
            t += gaps(period_ns, limit, rng)
            clock.set(t)
            cost = rng.choice((1, 1, 2, 3))
            if m.hit("k", cost):
                admitted += 1
                assert model.used_exactly("k", t) + cost <= limit
                model.count("k", t, cost)
        assert admitted > 200  # the merges did not lock the key out
    finally:
        m.close()
        shmwin.unlink(name)


# -- paths that empty a row (or give it to another key) before hits come back ---------------------


def _empty_by(path: str, m: MovingLogs, clock: ManualClock) -> None:
    if path == "clear":
        m.clear("k")
    elif path == "reset":
        m.reset()
    elif path == "idle-reuse":  # capacity 1: another key takes k's idle row
        clock.set(clock() + m.period_ns + 1)
        assert m.hit("other", 1)
    elif path == "rebuild":  # capacity 8, every key idle: new keys rebuild the table, dropping them
        for i in range(7):
            assert m.hit(f"old{i}", 1)
        clock.set(clock() + m.period_ns + 1)
        for i in range(8):
            assert m.hit(f"new{i}", 1)
        assert m.counts._backend._core.find("k") is None  # dropped by the rebuild


@pytest.mark.parametrize("path", ["clear", "reset", "idle-reuse", "rebuild"])
@pytest.mark.parametrize("gap_quanta", [(1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 32) + 3])
def test_a_row_emptied_then_hit_after_a_wrap_counts_only_new_hits(name, path, gap_quanta):
    """clear, reset, an idle row's reuse and a rebuild's drop move the row's last write without
    the hit's zeroing: they must leave no entry that reads back as live once stamps wrap."""
    period_ns, limit = 10 * S, 3
    q = quantum(period_ns)
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns, capacity={"idle-reuse": 1, "rebuild": 8}.get(path, 16))
    try:
        for _ in range(limit):
            assert m.hit("k", 1)
        _empty_by(path, m, clock)
        clock.set(T0 + gap_quanta * q)
        assert m.used_and_reset("k")[0] == 0
        assert [m.hit("k", 1) for _ in range(limit + 1)] == [True] * limit + [False]
        clock.set(clock() + period_ns + q)
        assert m.used_and_reset("k") == (0, 0)
    finally:
        m.close()
        shmwin.unlink(name)


# -- processes on one clock: never over the limit ------------------------------------------------


def _phased_hitter(name: str, clock_path: str, barrier, phases: int, seed: int, out) -> None:
    clock = ManualClock(path=clock_path)
    m = MovingLogs.open(name, 0, 0, 0, clock, None, create=False)
    assert m is not None
    rng = random.Random(seed)
    got = []
    for phase in range(phases):
        barrier.wait()
        for _ in range(20):
            cost = rng.choice((1, 1, 2, 5))
            if m.hit("k", cost):
                got.append((phase, cost))
        barrier.wait()
    m.close()
    out.put(got)


def test_processes_racing_across_moving_time_never_admit_past_the_limit(name, tmp_path):
    """Four processes hit one key in phases; between phases the shared clock moves by gaps
    around P, the quantum and a wrap. In every interval of P, admitted costs stay under the
    limit, and a phase once the last one's (rounded) times have left admits the whole limit
    again (nothing stuck)."""
    period_ns, limit, phases, n = 10 * S, 20, 40, 4
    q = quantum(period_ns)
    rng = random.Random(5)
    times = [T0]
    for _ in range(phases - 1):
        gap = rng.choice((q, period_ns // 3, period_ns, period_ns + 1, (1 << 31) * q, (1 << 32) * q))
        times.append(times[-1] + gap)
    path = str(tmp_path / "clock")
    clock = ManualClock(T0, path=path)
    m = open_log(name, clock, limit, period_ns)
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(n + 1), ctx.Queue()
    procs = [ctx.Process(target=_phased_hitter, args=(name, path, barrier, phases, i, out)) for i in range(n)]
    try:
        for p in procs:
            p.start()
        for t in times:
            clock.set(t)
            barrier.wait(timeout=60)
            barrier.wait(timeout=60)
        admitted = [hit for _ in procs for hit in out.get(timeout=60)]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        per_phase = [sum(c for ph, c in admitted if ph == i) for i in range(phases)]
        for i, t in enumerate(times):
            assert sum(per_phase[j] for j in range(i + 1) if times[j] >= t - period_ns) <= limit, i
            if i and t - rounded_up(times[i - 1], q) > period_ns:  # a hit is forgotten up to q - 1 ns late
                assert per_phase[i] >= limit - 4, (i, per_phase[i])
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        m.close()
        shmwin.unlink(name)


# -- clocks that differ between processes (each its own ManualClock file) ----------------------

# how each child script starts: the moving log named argv[1], attached under a ManualClock at argv[2]
ATTACHED = """
import sys
from shmwin import ManualClock
from shmwin.integrations.limits_moving import MovingLogs
clock = ManualClock(int(sys.argv[2]))
m = MovingLogs.open(sys.argv[1], 0, 0, 0, clock, None, create=False)
"""
SKEWED_CHILD = ATTACHED + """
print(m.hit(sys.argv[3], int(sys.argv[4])), *m.used_and_reset(sys.argv[3]))
m.close()
"""


def _hit_elsewhere(name: str, now_ns: int, key: str, cost: int) -> list[str]:
    """A hit by an unrelated process whose clock reads now_ns: (admitted, used, reset)."""
    return run_python(SKEWED_CHILD, name, str(now_ns), key, str(cost)).stdout.split()


def test_a_fast_clocks_hit_never_erases_a_slow_clocks_live_hits(name):
    """B (this process) counts 2 hits at its T; A, whose clock is 3 s ahead, counts 1 at its
    T + 11 s (B's T + 8 s): 3 hits, the limit, in every frame. B's two hits count in B's frame
    until T + 10 s, so B's next hit at T + 8 s must be refused. It is admitted: A's hit took
    one of B's entries (it counts nothing at A's now), so 4 hits pass within 8 s in every
    frame (real time, A's clock, B's clock) for a limit of 3."""
    period_ns, limit, skew = 10 * S, 3, 3 * S
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        assert m.hit("k", 1) and m.hit("k", 1)
        assert _hit_elsewhere(name, T0 + 8 * S + skew, "k", 1)[0] == "True"
        clock.set(T0 + 8 * S + 1)
        assert m.used_and_reset("k")[0] == 3
        assert not m.hit("k", 1)
    finally:
        m.close()
        shmwin.unlink(name)


def test_a_slow_clocks_hit_is_not_read_back_seconds_in_the_future(name):
    """P = 0.1 s, limit 2, clocks 3 s apart. A (clock ahead) hits at its T + 3 s; B (this
    process) hits at its T: both admitted. Half a second later nothing is within 0.1 s of
    either clock: each may hit twice. B's hit, stamped 3e9 ns behind the last write, must read
    back where it was (with a 1 ns quantum it read back at T + 2**32 ns, 4.29 s late: the
    quantum is now 32 ns at least, so stamps span 137 s and clocks 34 s apart read exactly)."""
    period_ns, limit, skew = S // 10, 2, 3 * S
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        assert _hit_elsewhere(name, T0 + skew, "k", 1)[0] == "True"
        assert m.hit("k", 1)  # A's hit is ahead of B's clock: it counts, 2 in all
        clock.set(T0 + S // 2)
        assert m.used_and_reset("k")[0] == 1  # A's hit, still ahead of B's clock; B's own has left
        clock.set(T0 + skew + S // 2)
        assert m.used_and_reset("k") == (0, 0), "B's hit read back 2**32 ns late"
    finally:
        m.close()
        shmwin.unlink(name)


def test_a_wall_clock_stepped_back_keeps_limits_period(name, monkeypatch):
    """limits' 2/second on shm://: a hit at T, the wall clock stepped back 10 s (an NTP step), a
    hit there (the one at T is ahead: 2 in all). At T + 2 s both are more than a second old in
    every frame: the key must admit 2 again (with a 4 ns quantum the stepped-back hit read back
    at T - 10 s + 2**32 x 4 ns = T + 7.2 s, and the key stayed refused until T + 8.2 s)."""
    pytest.importorskip("limits")
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    import shmwin.integrations.limits  # registers shm://

    now = [1_800_000_000.0]
    monkeypatch.setattr("time.time", lambda: now[0])
    limiter, item = MovingWindowRateLimiter(storage_from_string(f"shm://{name}")), parse("2/second")
    try:
        assert limiter.hit(item, "k")
        now[0] -= 10  # stepped back
        assert limiter.hit(item, "k") and not limiter.hit(item, "k")
        now[0] += 12  # T + 2 s
        assert limiter.get_window_stats(item, "k").remaining == 2
    finally:
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)


def test_skewed_clocks_small_skew_keep_the_limit_in_the_slow_frame(name):
    """Clocks 50 ms apart on a 1 s period (q = 4 ns): a slow and a fast process alternate hits on
    one key; in the slow process's frame no interval of P holds more than the limit plus what
    the skew itself lets in (hits the fast clock already calls old, at most one a step)."""
    period_ns, limit, skew = S, 4, 50 * 10**6
    clock = ManualClock(T0)
    m = open_log(name, clock, limit, period_ns)
    try:
        admitted: list[int] = []  # times, in the slow (this process's) frame
        t = T0
        for step in range(12):
            t += period_ns // 3
            clock.set(t)
            if m.hit("k", 1):
                admitted.append(t)
            if _hit_elsewhere(name, t + skew, "k", 1)[0] == "True":
                admitted.append(t)
            window = [a for a in admitted if a >= t - period_ns + skew]
            assert len(window) <= limit, (step, window)
    finally:
        m.close()
        shmwin.unlink(name)


# -- digest keys ---------------------------------------------------------------------------------

KEYS = ["a", b"a", "a\x00", b"a\x00", "a\x00b", b"a\x00b", "", b"", "x" * 48, "x" * 49, "x" * 4096,
        b"x" * 49, "\u00e9" * 30, "\u00e9" * 30 + "!", b"\xff" * 60, "\U0001f600" * 13]  # fmt: skip


def test_keys_that_differ_stay_distinct_and_are_named_as_given(name):
    """str vs bytes, NULs, empty, long keys sharing 48 bytes: each its own count; the tools show
    each key (or its first 48 bytes and a cut mark) for its own row, with its own count."""
    clock = ManualClock(T0)
    m = open_log(name, clock, len(KEYS) + 1, 10 * S, capacity=64)
    try:
        for i, key in enumerate(KEYS):
            assert m.hit(key, i + 1)
        for i, key in enumerate(KEYS):
            assert m.used_and_reset(key)[0] == i + 1, key
        shown = limits_moving.values(m.counts, clock())
        assert len(shown) == len(KEYS)
        for key, hits in shown:
            given = KEYS[hits - 1]
            assert type(key) is type(given)
            if key == given:
                continue
            cut = key[:-1] if isinstance(key, str) else key[:-3]  # the cut mark: "…"
            raw = given.encode() if isinstance(given, str) else given
            assert len(raw) > layout.NAME_MAX_BYTES, (key, given)
            prefix = raw[: layout.NAME_MAX_BYTES]
            shown_prefix = prefix.decode(errors="replace") if isinstance(given, str) else prefix
            assert cut == shown_prefix, (key, given)
    finally:
        m.close()
        shmwin.unlink(name)


def test_a_reused_row_shows_its_new_key_never_the_old_name(name):
    """capacity 1: the row goes idle and the next key takes it (and then a cleared row's)."""
    period_ns = 10 * S
    clock = ManualClock(T0)
    m = open_log(name, clock, 3, period_ns, capacity=1)
    try:
        assert m.hit("first", 2)
        clock.set(clock() + period_ns + 1)
        assert m.hit(b"second", 1)
        assert limits_moving.values(m.counts, clock()) == [(b"second", 1)]
        m.clear(b"second")
        assert m.hit("third", 3)
        assert limits_moving.values(m.counts, clock()) == [("third", 3)]
        assert m.used_and_reset("first")[0] == 0 and m.used_and_reset(b"second")[0] == 0
    finally:
        m.close()
        shmwin.unlink(name)


NAMES_WRITER = ATTACHED + """
for rnd in range(int(sys.argv[3])):
    for i in range(40):
        key = f"key-{rnd % 7}-{i}" if i % 2 else f"key-{rnd % 7}-{i}".encode()
        m.hit(key, 1 + (rnd % 7 * 40 + i) % 9)
    for i in range(40):
        key = f"key-{rnd % 7}-{i}" if i % 2 else f"key-{rnd % 7}-{i}".encode()
        m.clear(key)
m.close()
"""


def _cost_of_name(key: object) -> int | None:
    text = key.decode() if isinstance(key, bytes) else str(key)
    parts = text.split("-")
    if len(parts) != 3 or parts[0] != "key":
        return None
    rnd, i = int(parts[1]), int(parts[2])
    if (i % 2 == 1) != isinstance(key, str):
        return -1  # a str key shown as bytes, or the reverse: wrong
    return 1 + (rnd * 40 + i) % 9


def test_a_reader_racing_a_writer_never_shows_a_wrong_name(name):
    """Another process inserts and clears keys nonstop, each key with its own cost; this one
    reads the names lock-free: a key shown by name shows its own count (0 or its cost), never
    another key's."""
    clock = ManualClock(T0)
    m = open_log(name, clock, 10, 10 * S, capacity=128)
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(NAMES_WRITER), name, str(T0), "200000"],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    try:
        named = 0
        while proc.poll() is None:
            for key, hits in limits_moving.values(m.counts, T0):
                cost = _cost_of_name(key)
                if cost is None:
                    assert str(key).startswith(("\u2026", "b'\\xe2\\x80\\xa6")) or (
                        isinstance(key, bytes) and key.startswith(b"\xe2\x80\xa6")), key
                    continue
                named += 1
                assert cost != -1 and hits in (0, cost), (key, hits, cost)
            if named > 3000:
                break
        assert named > 1000
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m.close()
        shmwin.unlink(name)


# -- junk words: a clear error, never a crash or a hang ---------------------------------------------

JUNK_CHILD = ATTACHED + """
import random
from shmwin.errors import ShmwinError
from shmwin.integrations.limits_moving import values
q = m.counts._backend._q
lay = m.counts._backend._lay
rng = random.Random(int(sys.argv[3]))
lo, hi = {"rows": (lay.rows_off, lay.chunks_off), "chunks": (lay.chunks_off, lay.chunks_off + 64 * 32),
          "names": (lay.keys_off - 512 * 64, lay.keys_off)}[sys.argv[4]]
for _ in range(int(sys.argv[5])):
    q[rng.randrange(lo // 8, hi // 8)] = rng.choice([0, -1, 1, 2, 1 << 32, (1 << 63) - 1, -(1 << 63),
                                                    rng.getrandbits(64) - (1 << 63), rng.getrandbits(33)])
outcomes = set()
for step in range(300):
    clock.set(int(sys.argv[2]) + step * 10**8)
    for op in (lambda k: m.hit(k, 1 + step % 3), lambda k: m.used_and_reset(k), lambda k: m.clear(k)):
        try:
            op(f"k{step % 40}")
            outcomes.add("ok")
        except ShmwinError as e:
            outcomes.add(type(e).__name__)
    try:
        values(m.counts, clock())
    except ShmwinError as e:
        outcomes.add("values " + type(e).__name__)
print(sorted(outcomes))
"""


@pytest.mark.parametrize("area", ["rows", "chunks", "names"])
@pytest.mark.parametrize("seed", range(4))
def test_junk_words_are_errors_never_crashes(name, area, seed):
    """Random junk over the rows (key headers, chains, entries), the first chunks or the names:
    hits, readings, clears and the tools' values answer or raise a ShmwinError; the child never
    dies by a signal nor hangs."""
    clock = ManualClock(T0)
    m = open_log(name, clock, 30, 10 * S, capacity=64)
    try:
        for i in range(40):
            for _ in range(i % 12 + 1):
                m.hit(f"k{i}", 1)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        junk_words = str(50 if area != "names" else 400)
        code = textwrap.dedent(JUNK_CHILD)
        child = [sys.executable, "-c", code, name, str(T0), str(seed), area, junk_words]
        proc = subprocess.run(child, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 0, proc.stderr[-2000:]
        show = [sys.executable, "-m", "shmwin", "show", name]
        r = subprocess.run(show, capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode in (0, 1, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]
    finally:
        m.close()
        shmwin.unlink(name)


def test_a_segment_truncated_after_chunks_are_held_is_refused(name):
    clock = ManualClock(T0)
    m = open_log(name, clock, 100, 10 * S, capacity=64)
    for i in range(40):
        for _ in range(50):
            m.hit(f"k{i}", 1)
    lay = m.counts._backend._lay
    m.close()
    from shmwin.backends.shm.segment import path_of
    from shmwin.errors import CorruptSegmentError

    try:
        for cut in (lay.chunks_off + 4096, lay.chunks_off + 64, lay.keys_off - 100):
            os.truncate(path_of(name), cut)
            with pytest.raises(CorruptSegmentError, match="truncated"):
                Window.attach(name)
    finally:
        shmwin.unlink(name)


# -- through limits: MovingWindowRateLimiter on shm:// ----------------------------------------------


@pytest.mark.parametrize("per", ["second", "minute", "day"])
def test_limits_moving_window_answers_the_rule(name, per, monkeypatch):
    """limits' strategy over shm:// (the wall clock read through time.time, mocked): random
    costs and gaps, each hit and each window's hits as the model counts them."""
    pytest.importorskip("limits")
    from limits import parse
    from limits.storage import storage_from_string
    from limits.strategies import MovingWindowRateLimiter

    import shmwin.integrations.limits  # registers shm://

    limit, period_ns = 6, {"second": S, "minute": 60 * S, "day": DAY}[per]
    clock = ManualClock(1_800_000_000 * S)
    monkeypatch.setattr("time.time", lambda: clock() / S)
    storage = storage_from_string(f"shm://{name}")
    limiter, item = MovingWindowRateLimiter(storage), parse(f"{limit}/{per}")
    model = Model(limit, period_ns)
    rng = random.Random(limit)
    try:
        for step in range(500):
            clock.set(clock() + gaps(period_ns, limit, rng) // 1000 * 1000)
            now = int(clock() / S * S)  # what the storage reads (WallClock: int(time.time() * 1e9))
            key, cost = rng.choice(("a", "b")), rng.choice((1, 1, 2, 3))
            expected = model.admits(key, now, cost)
            assert limiter.hit(item, key, cost=cost) is expected, (step, key, cost, model.used(key, now))
            if expected:
                assert model.used_exactly(key, now) + cost <= limit
                model.count(key, now, cost)
            assert limiter.get_window_stats(item, key).remaining == limit - model.used(key, now), step
    finally:
        for n in shmwin.names():
            if n.startswith(name + "."):
                shmwin.unlink(n)
