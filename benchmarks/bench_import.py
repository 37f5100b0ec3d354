"""What a fresh Python process pays to start with shmwin (issue 28): the CPU-seconds (user + sys,
``resource.getrusage`` of the child) of ``python -c CODE`` for each row, the median over ROUNDS
fresh processes, the rows taken in turn within a round. The test suite starts thousands of such
children (``python -c``, spawn), and a user's every worker pays the same.

Peers in the same run: ``pass`` (the interpreter's own start) and ``import numpy`` / ``import
asyncio`` (what ``import shmwin`` no longer pays unless an array is read or an async wait runs).
CPU time, not the wall clock: on a shared machine the time a child waited for a core is left out.

    .venv/bin/python -m compileall -q shmwin      # as CI does: every tree compiled once first
    PYTHONPATH=CHECKOUT .venv/bin/python benchmarks/bench_import.py [--rounds 20]

The child imports shmwin from ``PYTHONPATH`` (one checkout, then another, for a before/after).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

ROWS = {
    "pass": "pass",
    "import numpy": "import numpy",
    "import asyncio": "import asyncio",
    "import shmwin": "import shmwin",
    "Limiter opened, hit once": (
        "import os, shmwin\n"
        "name = f'bench-import-{os.getpid()}'\n"
        "lim = shmwin.Limiter(name, '10/second')\n"
        "lim.hit('k')\n"
        "lim.close()\n"
        "shmwin.unlink_prefix(name)"
    ),
}


def child_cpu_s(code: str) -> float:
    """User + sys CPU-seconds of one fresh ``python -c code`` (start-up, imports, code, exit)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {row: [] for row in ROWS}
    for i in range(args.rounds):
        order = list(ROWS) if i % 2 == 0 else list(reversed(ROWS))  # no row always first
        for row in order:
            samples[row].append(child_cpu_s(ROWS[row]))
    numpy_ms = statistics.median(samples["import numpy"]) * 1000
    print(f"{'CPU of a fresh process (median of ' + str(args.rounds) + ')':40s} {'ms':>7s} {'/ numpy':>8s}")
    for row, values in samples.items():
        ms = statistics.median(values) * 1000
        print(f"{row:40s} {ms:7.1f} {ms / numpy_ms:8.2f}")


if __name__ == "__main__":
    main()
