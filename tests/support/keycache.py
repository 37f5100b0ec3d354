"""The key cache's attack harness (tests/integration/core/test_keycache_*.py): keys equal but of
other objects, reading counts back from a cold Core in this process or another, keys of one tag
and one place.

The per-process key cache (core/keycache.c) is only ever a hint: it maps a key object (exact
str/bytes of at most 128 characters) to a (row, generation) it saw; a hit is confirmed against
the row's generation under the row's lock, and a miss falls back to the shared index. Every
count the attacks make is read back by another Core (a fresh attach, mostly in another
process): a count landing on another key, lost, or doubled fails.
"""

from __future__ import annotations

import json
import os

from support.helpers import run_python

from shmwin import Limiter, ManualClock

S = 10**9


T0 = 10 * S


RATE = "1000000/hour"


class Text(str):
    """A str subclass: never cached (not exact), the same key as the str of its text."""


class Blob(bytes):
    """A bytes subclass: never cached, the same key as the bytes of its content."""


def copy_of(key: str | bytes) -> str | bytes:
    """A new object equal to key (never the same object, except the interned empty ones)."""
    if isinstance(key, bytes):
        return bytes(bytearray(key))
    return "".join(list(key))


READ = """
import ast, json, sys
from shmwin import Limiter, ManualClock
lim = Limiter.attach(sys.argv[1], clock=ManualClock(int(sys.argv[2])))
keys = ast.literal_eval(open(sys.argv[3]).read())
print(json.dumps([lim.stats(k).used for k in keys]))
lim.close()
"""


def read_elsewhere(name: str, now_ns: int, keys: list, tmp_path) -> list[int]:
    """Each key's count as an unrelated ``python -c`` process reads it (a cold Core)."""
    path = tmp_path / f"keys-{os.getpid()}-{len(keys)}.txt"
    path.write_text(repr(keys))
    return json.loads(run_python(READ, name, str(now_ns), str(path)).stdout)


def read_here(name: str, now_ns: int, keys: list) -> list[int]:
    """Each key's count as a fresh Core of this process reads it (its own, empty cache)."""
    other = Limiter.attach(name, clock=ManualClock(now_ns))
    try:
        return [other.stats(k).used for k in keys]
    finally:
        other.close()


def cacheable(key: str | bytes) -> bool:
    return type(key) in (str, bytes) and len(key) <= 128


def typed_hash(key: str | bytes) -> int:
    """keycache.c's typed_hash: Python's hash, bytes told apart from str."""
    h = hash(key) & (2**64 - 1)
    return h ^ 0x5BD1E9955BD1E995 if isinstance(key, bytes) else h


def one_tag_and_place(mask: int, want_pairs: int) -> tuple[list[str | bytes], list[str | bytes]]:
    """Keys of one place in a table of mask + 1 entries (a probe chain), and pairs of keys of
    one tag and one place (bytes among them: the typed hash), found by the birthday rule."""
    seen: dict[tuple[int, int], str | bytes] = {}
    pairs: list[str | bytes] = []
    by_place: dict[int, list[str | bytes]] = {}
    i = 0
    while len(pairs) < 2 * want_pairs:
        i += 1
        key: str | bytes = f"t{i}" if i % 2 else f"t{i}".encode()
        h = typed_hash(key)
        by_place.setdefault(h & mask, []).append(key)
        found = seen.setdefault((h >> 48, h & mask), key)
        if found is not key:
            pairs += [found, key]
    chain = max(by_place.values(), key=len)
    return chain[:40], pairs


def variants(key: str | bytes, pick: int) -> str | bytes:
    """key itself, a new equal object, or a subclass instance."""
    if pick == 0:
        return key
    if pick == 1:
        return copy_of(key)
    return Blob(key) if isinstance(key, bytes) else Text(key)
