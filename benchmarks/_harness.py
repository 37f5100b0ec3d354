"""What every benchmark shares: the floor, timed loops, the 2-process harness, target rows.

One process: each shmwin call is timed as ``fn = obj.method; for _ in range(n): fn()``,
and each sample is taken right beside a sample of the floor, the same loop calling only
``time.monotonic_ns()`` (bound to a local). Rounds alternate which of the two goes first.
The figures are medians over rounds, and the ratio is the median of the per-round ratios.

Two or more processes: forked, they start together at a barrier. Aggregate = total ops /
the slower process's time, median over rounds.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

# -- timed loops, one process -------------------------------------------------------------------

_LOOPS = {
    "call": "for _ in range(n):\n        fn()",
    "call_arg": "for _ in range(n):\n        fn(arg)",
    "each": "for _ in range(n):\n        for item in arg:\n            fn(item)",
}
_TEMPLATE = """
def loop(fn, arg, n):
    t = perf_counter()
    {body}
    return perf_counter() - t
"""


def fresh_loop(shape: str) -> Callable[[Callable[..., object], object, int], float]:
    """A new copy of a timed loop; returns seconds for the whole loop.

    ``call``: ``fn()`` n times; ``call_arg``: ``fn(arg)`` n times; ``each``: ``fn(item)``
    for every item of ``arg``, n rounds. Every copy is a new code object, because CPython
    specialises a call site per code object: no contender then runs through a call site
    that was specialised for another (the floor's builtin, or another window's method).
    """
    namespace: dict[str, object] = {"perf_counter": time.perf_counter}
    exec(_TEMPLATE.format(body=_LOOPS[shape]), namespace)
    return namespace["loop"]  # type: ignore[return-value]


def no_gc(fn: Callable[[], float]) -> float:
    """Run one sample with the cyclic GC off, as timeit does."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        return fn()
    finally:
        if was_on:
            gc.enable()


@dataclass
class Paired:
    ns: float  # median ns per op
    floor_ns: float  # median ns per floor call, over the samples taken beside this op's
    ratio: float  # median of the per-round ratios op / floor


class FloorPairs:
    """ns per op of several calls, each sample taken beside a sample of the floor loop."""

    def __init__(self, floor_n: int) -> None:
        self.floor_n = floor_n
        self._floor_loop = fresh_loop("call")
        self._ops: dict[str, list[float]] = {}
        self._floors: dict[str, list[float]] = {}

    def floor_sample(self) -> float:
        """ns per call of ``mono = time.monotonic_ns; for _ in range(n): mono()``."""
        loop, n = self._floor_loop, self.floor_n
        return no_gc(lambda: loop(time.monotonic_ns, None, n)) / n * 1e9

    def take(self, label: str, sample: Callable[[], float]) -> float:
        """One round for ``label``: ``sample()`` (ns per op) beside a floor sample."""
        ops, floors = self._ops.setdefault(label, []), self._floors.setdefault(label, [])
        if len(ops) % 2 == 0:
            floors.append(self.floor_sample())
            ops.append(no_gc(sample))
        else:
            ops.append(no_gc(sample))
            floors.append(self.floor_sample())
        return ops[-1]

    def result(self, label: str) -> Paired:
        ops, floors = self._ops[label], self._floors[label]
        ratios = [o / f for o, f in zip(ops, floors, strict=True)]
        return Paired(statistics.median(ops), statistics.median(floors), statistics.median(ratios))

    def all_floor_ns(self) -> float:
        return statistics.median(f for fs in self._floors.values() for f in fs)


# -- forked processes at a barrier --------------------------------------------------------------

Loop = Callable[[int], tuple[float, int]]  # n ops in this process -> (seconds, admitted)


def _child(loop: Loop, n: int, barrier, out, slot: int) -> None:  # type: ignore[no-untyped-def]
    barrier.wait()
    out[2 * slot], out[2 * slot + 1] = loop(n)


def aggregate(loop: Loop, n: int, procs: int) -> tuple[float, int]:
    """One run: ``procs`` forked processes each run ``loop(n)`` from a barrier.
    Returns (total ops / the slowest process's seconds, the sum of what the loops returned)."""
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(procs), ctx.Array("d", 2 * procs, lock=False)
    ps = [ctx.Process(target=_child, args=(loop, n, barrier, out, i)) for i in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    if any(p.exitcode != 0 for p in ps):
        raise SystemExit(f"a benchmark process failed: exit codes {[p.exitcode for p in ps]}")
    slowest = max(out[2 * i] for i in range(procs))
    return procs * n / slowest, int(sum(out[2 * i + 1] for i in range(procs)))


@dataclass
class Contender:
    """A forked contender: ``make()`` is called in the parent before every run (a fresh
    limiter, a fresh key) and returns the loop each process runs; ``limit`` is what it
    should admit in total, if it is a limiter."""

    label: str
    make: Callable[[], Loop]
    n: int
    procs: int = 2
    limit: int | None = None
    rates: list[float] = field(default_factory=list)
    admitted: list[int] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def exact(self) -> bool:
        return self.limit is not None and all(a == self.limit for a in self.admitted)

    def admitted_text(self) -> str:
        """``admitted / limit`` over every run: exact in all, or the worst run."""
        if self.limit is None:
            return ""
        if self.exact:
            runs = len(self.admitted)
            return f"{self.limit:,} / {self.limit:,} (exact{f' in all {runs} runs' if runs > 1 else ''})"
        worst = max(self.admitted, key=lambda a: abs(a - self.limit))  # type: ignore[operator]
        return f"{worst:,} / {self.limit:,} ({worst / self.limit:.2f}× the limit)"


def interleaved(contenders: Sequence[Contender], rounds: int) -> None:
    """``rounds`` rounds, each running every contender once (A B C, A B C, ...), so a slow
    stretch of a shared machine lands on all of them rather than on one."""
    for _ in range(rounds):
        for c in contenders:
            rate, admitted = aggregate(c.make(), c.n, c.procs)
            c.rates.append(rate)
            c.admitted.append(admitted)


# -- targets ------------------------------------------------------------------------------------


@dataclass
class Target:
    """One row of the targets table (issue "native core")."""

    key: str  # fixes the row's place in the combined table
    operation: str
    measured: str
    baseline: str  # the floor or peer, measured in the same run
    ratio: str
    target: str
    ok: bool


TARGET_ORDER = [
    "striped-1p", "locked-1p", "hit-one-key", "hit-warm-keys", "hit-new-key",
    "striped-2p", "locked-2p", "hot-key-2p", "distinct-keys-2p", "tb-hit-one-key",
    "twotier-ns", "twotier-trips", "twotier-rate",
]  # fmt: skip


def targets_table(rows: Sequence[Target]) -> str:
    order = {k: i for i, k in enumerate(TARGET_ORDER)}
    lines = [
        "| operation | shmwin | floor or peer (same run) | ratio | target | |",
        "| --- | ---: | ---: | ---: | ---: | :---: |",
    ]
    for t in sorted(rows, key=lambda t: order.get(t.key, len(order))):
        mark = "✓" if t.ok else "✗"
        lines.append(f"| {t.operation} | {t.measured} | {t.baseline} | {t.ratio} | {t.target} | {mark} |")
    return "\n".join(lines)


def write_json(path: str, targets: Sequence[Target], details: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"targets": [asdict(t) for t in targets], "details": details}, f, ensure_ascii=False)


def target_parser(doc: str | None) -> argparse.ArgumentParser:
    """The command line every benchmark with targets takes (``--quick``, ``--json FILE``), its
    docstring as the help; the caller adds its own options."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (figures are rough)")
    parser.add_argument("--json", metavar="FILE", help="also write the target rows and details here")
    return parser


# A benchmark's sizes: its option -> (what the option sizes, its --quick value, its full value)
Sizes = dict[str, tuple[str, int, int]]


def sized_args(doc: str | None, sizes: Sizes) -> tuple[argparse.Namespace, list[int]]:
    """The target command line (:func:`target_parser`) and an ``--option N`` for each size (its
    help: what it sizes and its full value), parsed: the arguments, and each size in the order of
    ``sizes``, as given, else its --quick value or its full value."""
    parser = target_parser(doc)
    for option, (what, _, full) in sizes.items():
        parser.add_argument(f"--{option}", type=int, help=f"{what} ({full:,})")
    args = parser.parse_args()
    chosen = []
    for option, (_, quick, full) in sizes.items():
        chosen.append(getattr(args, option.replace("-", "_")) or (quick if args.quick else full))
    return args, chosen


def print_targets(targets: Sequence[Target]) -> None:
    """A benchmark's targets as scripts/bench's report reads them: a heading and the table."""
    print("\n#### Targets\n")
    print(targets_table(targets))


def finish(targets: Sequence[Target], details: str | Sequence[str], json_path: str | None) -> None:
    """A benchmark's last words: its details (a text, or its lines) printed, and with
    ``--json FILE`` the target rows and the details written there (benchmarks/report.py)."""
    text = details if isinstance(details, str) else "\n".join(details)
    print("\n" + text)
    if json_path:
        write_json(json_path, targets, text)


def counting_redis_commands() -> tuple[list[int], Callable[[], None]]:
    """Count redis-py's send_command calls from now on: ([commands so far], restore)."""
    import redis.connection

    sent = [0]
    real = redis.connection.AbstractConnection.send_command

    def counting(self: object, *args: object, **kwargs: object) -> object:
        sent[0] += 1
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    def restore() -> None:
        redis.connection.AbstractConnection.send_command = real  # type: ignore[method-assign]

    redis.connection.AbstractConnection.send_command = counting  # type: ignore[method-assign]
    return sent, restore


def per_sec(rate: float, what: str = "") -> str:
    """per_sec(3_149_195, "adds") -> '3.15 M adds/s'; per_sec(10_420) -> '10.4 k/s'."""
    unit = f" {what}/s" if what else "/s"
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M{unit}"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k{unit}"
    return f"{rate:.0f}{unit}"


def ns(value: float) -> str:
    return f"{value:,.0f} ns"
