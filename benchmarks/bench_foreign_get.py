"""limits' ``get`` of a key its strategies did not build ("user:42": django-ratelimit's,
pyrate-limiter's, an app's own), on ``shm://`` against ``memory://``, in one run, with a busy
/dev/shm (BUSY other segments beside the storage's 3 fixed-window segments).

``get`` of such a key looks in every fixed-window segment of the storage. While the storage's
board (backends/shm/boards.py: a word each creator of a fixed-window segment changes) holds the
value read before this process last listed them, ``ShmStorage.get`` makes one native call
(core/fixedsum.c): the board's word, ``time.time()``, each segment's row under its row lock. The
"look again" row is what a get pays once after a segment of the storage was created or removed
anywhere (the board changed): a stat() of /dev/shm, an open() of the board, and a listing if
/dev/shm changed.

Each sample is this thread's CPU time (``time.thread_time_ns``), not the wall clock: on a shared
machine it leaves out the time the process waited for a core, both sides alike. Rounds take
the rows in turn (reversed every other round); a ratio is the median of the per-round ratios.
Where the ns go: limits' exception wrapper (``Storage.get`` of every storage, memory:// too)
around a storage method that does nothing, and the native call alone.

    taskset -c 1 .venv/bin/python benchmarks/bench_foreign_get.py [--quick] [--json FILE]

(scripts/bench runs it: its target rows, shm:// with 3 and with 10 periods, and a key counted nowhere
with 16, <= 2x memory://, issue #30.)
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable

import _harness
from _harness import Target
from limits.storage import storage_from_string
from limits.storage.base import _wrap_errors

import shmwin
import shmwin.integrations.limits

BUSY = 300
KEY = "user:42"
SLASHED = "ip:10.0.0.1/api/login"  # a "/" but no granularity after the last: not limits' own
TEN = (1, 2, 5, 10, 30, 60, 600, 3600, 7200, 86400)  # periods (s) of a storage with ten
SIXTEEN = (*TEN, 3, 4, 6, 7, 8, 9)  # and with sixteen
NOWHERE = "user:7"  # a key counted in no segment: each one hashes it and probes its index
ONE = "user:9"  # an adapter's key: counted in one period of the sixteen, absent from the others
_LOOP = """
def loop(fn, key, n, cpu_ns):
    t = cpu_ns()
    for _ in range(n):
        fn(key)
    return cpu_ns() - t
"""


def fresh(fn: Callable[[str], object]) -> Callable[[str], object]:
    """``fn`` of a new str equal to the key each call, as a request builds its key (no key cache
    entry of that object: found by its text, or its absence hashed, in every segment)."""
    return lambda key: fn(key[:-1] + key[-1:])


def timer(fn: Callable[[str], object], key: str = KEY) -> Callable[[int], float]:
    """ns per ``fn(key)`` over n calls, in a loop of its own (a call site specialised for it)."""
    namespace: dict[str, object] = {}
    exec(_LOOP, namespace)
    loop = namespace["loop"]

    def sample(n: int) -> float:
        gc.disable()
        try:
            return loop(fn, key, n, time.thread_time_ns) / n  # type: ignore[operator,no-any-return]
        finally:
            gc.enable()

    return sample


class _Nothing:
    """A storage method that does nothing, wrapped as limits wraps every storage's ``get``."""

    wrap_exceptions = False
    base_exceptions = ValueError

    def get(self, key: str) -> int:
        return 0

    wrapped = _wrap_errors(get)


def main() -> None:
    args = _harness.target_parser(__doc__).parse_args()
    rounds, n = (5, 2_000) if args.quick else (21, 10_000)
    tag = f"bench-foreign-{os.getpid()}"
    busy = [shmwin.Window(f"{tag}-busy-{i}", span=1, buckets=1) for i in range(BUSY)]
    shm, memory = storage_from_string(f"shm://{tag}"), storage_from_string("memory://")
    one = storage_from_string(f"shm://{tag}-one")  # a storage of one fixed-window period
    ten = storage_from_string(f"shm://{tag}-ten")  # ten periods: the cost grows with them
    sixteen = storage_from_string(f"shm://{tag}-sixteen")
    try:
        for storage in (shm, memory):
            for expiry in (60, 3600, 86400):
                storage.incr(KEY, expiry)
                storage.incr(SLASHED, expiry)
        one.incr(KEY, 60)
        for expiry in TEN:
            ten.incr(KEY, expiry)
        for expiry in SIXTEEN:
            sixteen.incr(KEY, expiry)
        sixteen.incr(ONE, 60)
        memory.incr(ONE, 60)
        assert shm.get(KEY) == memory.get(KEY) == 3 and one.get(KEY) == 1 and ten.get(KEY) == len(TEN)
        assert sixteen.get(KEY) == len(SIXTEEN) and ten.get(NOWHERE) == memory.get(NOWHERE) == 0
        assert sixteen.get(ONE) == memory.get(ONE) == 1 and sixteen.get(NOWHERE) == 0
        assert shm.get(SLASHED) == memory.get(SLASHED) == 3
        nothing = _Nothing()
        rows = {
            "memory://": timer(memory.get),
            "shm://, 3 fixed-window periods": timer(shm.get),
            "shm://, 1 fixed-window period": timer(one.get),
            "shm://, 10 fixed-window periods": timer(ten.get),
            "shm://, 16 fixed-window periods": timer(sixteen.get),
            f'memory://, "{NOWHERE}" (counted nowhere)': timer(memory.get, NOWHERE),
            f'shm://, 10 periods, "{NOWHERE}" (counted nowhere)': timer(ten.get, NOWHERE),
            f'shm://, 16 periods, "{NOWHERE}" (counted nowhere)': timer(sixteen.get, NOWHERE),
            f'memory://, "{ONE}" (counted in 1 period), a new str a call': timer(fresh(memory.get), ONE),
            f'shm://, 16 periods, "{ONE}" (counted in 1), a new str a call': timer(fresh(sixteen.get), ONE),
            f'memory://, "{SLASHED}"': timer(memory.get, SLASHED),
            f'shm://, 3 periods, "{SLASHED}"': timer(shm.get, SLASHED),
            "limits' wrapper around a method that does nothing": timer(nothing.wrapped),
            "the same method, unwrapped": timer(nothing.get),
        }
        if hasattr(shm, "_foreign_get"):  # (not in a build before the native sum: the "before" runs)
            rows["shm://'s native call alone, 3 periods"] = timer(shm._foreign_get)
            rows["shm://'s native call alone, 1 period"] = timer(one._foreign_get)
            rows["shm://'s native call alone, 16 periods"] = timer(sixteen._foreign_get)
        taken: dict[str, list[float]] = {label: [] for label in rows}
        for r in range(rounds):
            for label in list(rows) if r % 2 == 0 else list(rows)[::-1]:
                taken[label].append(rows[label](n))
        segments = shm.segments  # type: ignore[attr-defined]

        def look_again(key: str) -> None:
            segments._fixed_seen = (None, [])  # as if the board changed: the next get lists
            if hasattr(segments, "foreign"):
                segments.foreign.forget()  # (and the native sum answers None until it did)
            shm.get(key)

        again = statistics.median(timer(look_again)(max(n // 50, 10)) for _ in range(5))
        mem = taken["memory://"]
        nowhere = f'memory://, "{NOWHERE}" (counted nowhere)'
        peer_of = {label: nowhere for label in rows if NOWHERE in label and label != nowhere}
        peer_of[f'shm://, 3 periods, "{SLASHED}"'] = f'memory://, "{SLASHED}"'
        one_memory = f'memory://, "{ONE}" (counted in 1 period), a new str a call'
        peer_of[f'shm://, 16 periods, "{ONE}" (counted in 1), a new str a call'] = one_memory

        def ratio(label: str) -> float:
            against = taken[peer_of.get(label, "memory://")]  # memory:// with the same key
            return statistics.median(s / m for s, m in zip(taken[label], against, strict=True))

        three, ten_periods = "shm://, 3 fixed-window periods", "shm://, 10 fixed-window periods"
        nowhere16 = f'shm://, 16 periods, "{NOWHERE}" (counted nowhere)'
        slashed, memory_slashed = f'shm://, 3 periods, "{SLASHED}"', f'memory://, "{SLASHED}"'
        targets = [
            Target("foreign-get", '`shm://` `get("user:42")` through limits, 3 fixed-window periods',
                   f"{statistics.median(taken[three]):,.0f} ns",
                   f"`memory://` {statistics.median(mem):,.0f} ns",
                   f"{ratio(three):.2f}×", "≤ 2× `memory://`", ratio(three) <= 2),
            Target("foreign-get-10", '`shm://` `get("user:42")` through limits, 10 fixed-window periods',
                   f"{statistics.median(taken[ten_periods]):,.0f} ns",
                   f"`memory://` {statistics.median(mem):,.0f} ns",
                   f"{ratio(ten_periods):.2f}×", "≤ 2× `memory://`", ratio(ten_periods) <= 2),
            Target("foreign-get-nowhere-16", f'`shm://` `get("{NOWHERE}")` (counted nowhere), 16 periods',
                   f"{statistics.median(taken[nowhere16]):,.0f} ns",
                   f"`memory://` {statistics.median(taken[nowhere]):,.0f} ns",
                   f"{ratio(nowhere16):.2f}×", "≤ 2× `memory://`", ratio(nowhere16) <= 2),
            Target("foreign-get-slash", f'`shm://` `get("{SLASHED}")`, 3 fixed-window periods',
                   f"{statistics.median(taken[slashed]):,.0f} ns",
                   f"`memory://` {statistics.median(taken[memory_slashed]):,.0f} ns",
                   f"{ratio(slashed):.2f}×", "≤ 2× `memory://`", ratio(slashed) <= 2),
        ]  # fmt: skip
        _harness.print_targets(targets)
        details = [
            "#### limits' `get` of a key its strategies did not build (`bench_foreign_get.py`, issue #30)",
            "",
            f"/dev/shm held {len(shmwin.names())} segments; this thread's CPU ns per call, {rounds} rounds",
            "",
            '| `get("user:42")` | CPU ns per call (median) | ratio to memory:// (median of rounds) |',
            "| --- | ---: | ---: |",
            *(
                f"| {label} | {statistics.median(taken[label]):,.0f} | {ratio(label):.2f}× |"
                for label in rows
            ),
            f"| shm://, looking again (a segment was made or removed) | {again:,.0f} | |",
        ]
        _harness.finish(targets, details, args.json)
    finally:
        for opened in (shm, one, ten, sixteen):
            opened.segments.close()  # type: ignore[attr-defined]
        for w in busy:
            w.unlink()
            w.close()
        for name in shmwin.names():
            if name.startswith((tag + ".", tag + "-one.", tag + "-ten.", tag + "-sixteen.")):
                shmwin.unlink(name)


if __name__ == "__main__":
    main()
