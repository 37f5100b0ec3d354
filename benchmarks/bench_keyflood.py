"""Crafted keys against the key cache: keys whose hashes share their low bits, beside normal keys.

A web app keys its limiter by client-controlled strings. With a fixed hash seed
(``PYTHONHASHSEED=0``, as some deployments run) anyone can find, by trying names, strings
whose ``hash()`` has its low 13 bits 0 (a birthday-style search: about 8,192 tries a key).
This benchmark makes K such keys of 24 characters and K normal random ones of 24 characters,
warms a ``Limiter`` with each set, then hits them in a fresh random order each round:

- the cached objects (a warm hit),
- each key a new equal object (as a request builds its key),
- the first hit of each key (a fresh limiter each round: the cache's probe for an absent key,
  then the shared index and the insert),
- ``dict.get`` over the same keys (CPython's table, whose probing uses every bit of the hash).

Every sample is taken beside the floor (see _harness), and normal and crafted keys alternate
within each round. The figure that matters is crafted / normal, row by row.

    .venv/bin/python benchmarks/bench_keyflood.py [--quick] [--keys K] [--rounds R]

It re-runs itself under ``PYTHONHASHSEED=0`` (the crafted keys depend on the seed).
"""

from __future__ import annotations

import argparse
import os
import random
import string
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support/hashflood.py

from _harness import FloorPairs, fresh_loop, ns
from support.hashflood import KEY_CHARS, crafted_keys

import shmwin
from shmwin import Limiter

CRAFTED_BITS = 13  # hash(k) & 8191 == 0: one home for every key in a table of up to 8,192 entries


def normal_keys(k: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    alphabet = string.ascii_lowercase + string.digits
    keys = {"client-" + "".join(rng.choices(alphabet, k=KEY_CHARS - 7)) for _ in range(2 * k)}
    return sorted(keys)[:k]


CASES = ("warm hit", "warm hit, new equal objects", "first hit", "dict.get")


def per_call(fn: Callable[[str], object], keys: list[str]) -> Callable[[], float]:
    """A sample: ns per ``fn(key)`` over keys, in a fresh copy of the timed loop."""
    loop = fresh_loop("each")
    return lambda: loop(fn, keys, 1) / len(keys) * 1e9


def measure(keys: dict[str, list[str]], rounds: int, pairs: FloorPairs) -> list[str]:
    """ns per call for each case and key set, beside the floor; the table's rows.

    Each round takes every (case, key set) once, in an order rotated from round to round (the
    key sets alternate first), so that neither a case nor a key set always runs first."""
    limiters = {kind: Limiter(f"bench-flood-{uuid.uuid4().hex[:8]}", "1000000000/hour") for kind in keys}
    try:
        for kind, ks in keys.items():
            for key in ks:  # warm: each key's row and this process's cache entry
                limiters[kind].hit(key)
        tables = {kind: dict.fromkeys(ks, 0) for kind, ks in keys.items()}
        rng = random.Random(3)
        kinds = list(keys)
        for r in range(rounds):
            for kind in kinds[r % 2 :] + kinds[: r % 2]:
                order = rng.sample(keys[kind], len(keys[kind]))
                copies = [key[:1] + key[1:] for key in order]  # equal, not the cached objects
                for case in CASES[r % len(CASES) :] + CASES[: r % len(CASES)]:
                    if case == "first hit":  # a fresh limiter: no row, no cache entry
                        name = f"bench-flood-{uuid.uuid4().hex[:8]}"
                        fresh = Limiter(name, "1000000000/hour")
                        try:
                            pairs.take(f"{case}|{kind}", per_call(fresh.hit, order))
                        finally:
                            fresh.close()
                            shmwin.unlink(name)
                        continue
                    fn, arg = {
                        "warm hit": (limiters[kind].hit, order),
                        "warm hit, new equal objects": (limiters[kind].hit, copies),
                        "dict.get": (tables[kind].get, order),
                    }[case]
                    pairs.take(f"{case}|{kind}", per_call(fn, arg))
    finally:
        for lim in limiters.values():
            name = lim.name
            lim.close()
            shmwin.unlink(name)
    rows = []
    for case in CASES:
        normal, crafted = pairs.result(f"{case}|normal"), pairs.result(f"{case}|crafted")
        cells = [f"{ns(r.ns)} ({r.ratio:.2f}×)" for r in (normal, crafted)]
        rows.append(f"| {case} | {cells[0]} | {cells[1]} | {crafted.ns / normal.ns:.2f}× |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 keys, 3 rounds")
    parser.add_argument("--keys", type=int, default=None, help="keys in each set (default 4,000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 7)")
    args = parser.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    k = args.keys or (1_000 if args.quick else 4_000)
    rounds = args.rounds or (3 if args.quick else 7)
    keys = {"normal": normal_keys(k), "crafted": crafted_keys(k, CRAFTED_BITS)}
    print(f"# {k:,} keys each of {KEY_CHARS} characters; crafted: hash(k) & {(1 << CRAFTED_BITS) - 1} == 0,"
          f" PYTHONHASHSEED=0", file=sys.stderr)  # fmt: skip
    pairs = FloorPairs(200_000)
    rows = measure(keys, rounds, pairs)
    print(f"\n## Crafted keys against the key cache ({k:,} keys each, {rounds} rounds, PYTHONHASHSEED=0)\n")
    print("| call | normal keys (× the floor) | crafted keys (× the floor) | crafted / normal |")
    print("| --- | ---: | ---: | ---: |")
    for row in rows:
        print(row)
    print(f"\nThe floor: {ns(pairs.all_floor_ns())}.")


if __name__ == "__main__":
    main()
