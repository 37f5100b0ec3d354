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

(scripts/bench runs it: its target row, shm:// with 3 periods <= 2x memory://, issue #30.)
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
_LOOP = """
def loop(fn, key, n, cpu_ns):
    t = cpu_ns()
    for _ in range(n):
        fn(key)
    return cpu_ns() - t
"""


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
    try:
        for storage in (shm, memory):
            for expiry in (60, 3600, 86400):
                storage.incr(KEY, expiry)
                storage.incr(SLASHED, expiry)
        one.incr(KEY, 60)
        for expiry in TEN:
            ten.incr(KEY, expiry)
        assert shm.get(KEY) == memory.get(KEY) == 3 and one.get(KEY) == 1 and ten.get(KEY) == len(TEN)
        assert shm.get(SLASHED) == memory.get(SLASHED) == 3
        nothing = _Nothing()
        rows = {
            "memory://": timer(memory.get),
            "shm://, 3 fixed-window periods": timer(shm.get),
            "shm://, 1 fixed-window period": timer(one.get),
            "shm://, 10 fixed-window periods": timer(ten.get),
            f'memory://, "{SLASHED}"': timer(memory.get, SLASHED),
            f'shm://, 3 periods, "{SLASHED}"': timer(shm.get, SLASHED),
            "limits' wrapper around a method that does nothing": timer(nothing.wrapped),
            "the same method, unwrapped": timer(nothing.get),
        }
        if hasattr(shm, "_foreign_get"):  # (not in a build before the native sum: the "before" runs)
            rows["shm://'s native call alone, 3 periods"] = timer(shm._foreign_get)
            rows["shm://'s native call alone, 1 period"] = timer(one._foreign_get)
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

        def ratio(label: str) -> float:
            against = taken[f'memory://, "{SLASHED}"'] if SLASHED in label else mem  # the same key
            return statistics.median(s / m for s, m in zip(taken[label], against, strict=True))

        three = "shm://, 3 fixed-window periods"
        slashed, memory_slashed = f'shm://, 3 periods, "{SLASHED}"', f'memory://, "{SLASHED}"'
        targets = [
            Target("foreign-get", '`shm://` `get("user:42")` through limits, 3 fixed-window periods',
                   f"{statistics.median(taken[three]):,.0f} ns",
                   f"`memory://` {statistics.median(mem):,.0f} ns",
                   f"{ratio(three):.2f}×", "≤ 2× `memory://`", ratio(three) <= 2),
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
        for opened in (shm, one, ten):
            opened.segments.close()  # type: ignore[attr-defined]
        for w in busy:
            w.unlink()
            w.close()
        for name in shmwin.names():
            if name.startswith((tag + ".", tag + "-one.", tag + "-ten.")):
                shmwin.unlink(name)


if __name__ == "__main__":
    main()
