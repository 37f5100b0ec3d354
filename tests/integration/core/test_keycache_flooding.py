"""Crafted keys against this process's key cache (core/keycache.c): issue #33, item 7.

Web apps key limiters by client-controlled strings, and with a fixed hash seed
(``PYTHONHASHSEED=0``, as some deployments run) an attacker can find, by trying names, many
strings whose ``hash()`` shares its low bits. A cache placed by ``hash & mask`` put them all
at one place, and each lookup walked the whole run (4,000 keys: a warm hit cost 15x a normal
key's). Now a key's place comes from its hash mixed with the table's secret, and no lookup
reads more than PROBE_LIMIT (64) entries.

Each test runs in a ``python -c`` process under ``PYTHONHASHSEED=0`` that makes its keys as an
attacker would (a birthday search over names), then reads how many cache entries a lookup of
each key reads (``Core.cache_probes``: no timing), and every key's count.
"""

from __future__ import annotations

import json
import statistics

import pytest
from support.helpers import ROOT, run_python

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]

PROBE_LIMIT = 64  # keycache.c: entries a lookup reads at most
N = 1000  # keys of each kind hit: the cache's table then has 2,048 entries
BITS = 11  # crafted: hash(key) & 2047 == 0, one place in a table of up to 2,048 entries

FLOOD = """
import json, random, sys
import shmwin
from shmwin import Limiter, ManualClock
sys.path.insert(0, {tests_dir!r})
from support.hashflood import crafted_keys

assert sys.flags.hash_randomization == 0 and hash("k") == {seed0_hash}  # PYTHONHASHSEED=0
prefix, n, bits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def copy_of(key):
    return bytes(bytearray(key)) if isinstance(key, bytes) else "".join(list(key))


flood = crafted_keys(n + 200, bits)  # the attacker's search, in this process
rng = random.Random(5)
sets = {{
    "normal": [f"client-{{rng.getrandbits(68):017x}}" for _ in range(n + 200)],
    "crafted": flood,
    "crafted bytes": [k.encode() for k in flood],  # bytes hash as the str of their text
}}
out = {{}}
for kind, keys in sets.items():
    name = f"{{prefix}}-{{len(out)}}"
    hit, absent = keys[:n], keys[n:]
    lim = Limiter(name, "1000/minute", clock=ManualClock(10**10))
    try:
        assert all(lim.hit(k) for k in hit)
        core = lim._backend._core
        out[kind] = {{
            "cached": core.cached,
            "warm": [core.cache_probes(k) for k in hit],
            "new": [core.cache_probes(copy_of(k)) for k in hit],
            "absent": [core.cache_probes(k) for k in absent],
        }}
        assert all(lim.hit(copy_of(k)) for k in hit)  # a request's new object: the same key
        lim.clear(hit[-1])
        out[kind]["used"] = [lim.stats(k).used for k in hit]
        out[kind]["absent used"] = [lim.stats(k).used for k in absent]
    finally:
        lim.close()
        shmwin.unlink(name)
print(json.dumps(out))
"""


Probes = dict[str, dict[str, list[int]]]


def flood(name: str, monkeypatch: pytest.MonkeyPatch, secret: str | None = None) -> Probes:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    if secret is not None:
        monkeypatch.setenv("SHMWIN_CACHE_SECRET", secret)
    # hash("k") under PYTHONHASHSEED=0, so that the child checks the seed really is 0
    seed0 = int(run_python("print(hash('k'))").stdout)
    code = FLOOD.format(seed0_hash=seed0, tests_dir=str(ROOT / "tests"))
    proc = run_python(code, name, str(N), str(BITS), timeout=240)
    return json.loads(proc.stdout)


def check_counts(out: Probes) -> None:
    for kind, got in out.items():
        # every key counted twice (its object, then a new equal one), the last cleared, the absent never
        assert got["used"] == [2] * (N - 1) + [0], kind
        assert got["absent used"] == [0] * 200, kind


def test_keys_crafted_to_share_their_hashes_low_bits_probe_as_few_entries_as_normal_keys(name, monkeypatch):
    """1,000 keys whose hashes share their low 11 bits (all at one place of the cache's 2,048
    entries, placed by ``hash & mask``): a lookup of any of them, by its object, by a new equal
    one, or of an absent one, reads about as many entries as a normal key's, never more than
    PROBE_LIMIT, and every one of them is cached. Before the secret: 500 a lookup on average."""
    out = flood(name, monkeypatch)
    check_counts(out)
    normal = out["normal"]
    for kind in ("crafted", "crafted bytes"):
        got = out[kind]
        assert got["cached"] == N, kind  # not pushed out of the cache either
        for how in ("warm", "new", "absent"):
            assert max(got[how]) <= PROBE_LIMIT, (kind, how, max(got[how]))
            # random places at this load: about 1.5 entries a hit, 2.5 an absent key; 2x is slack
            assert statistics.mean(got[how]) <= 2 * statistics.mean(normal[how]), (
                kind, how, statistics.mean(got[how]), statistics.mean(normal[how]))  # fmt: skip
    assert normal["cached"] == N and max(normal["warm"]) <= PROBE_LIMIT


@pytest.mark.failpoints
def test_a_known_secret_still_bounds_every_lookup_and_every_key_counts(name, monkeypatch):
    """The test build with the table's secret fixed (SHMWIN_CACHE_SECRET="0:1": keys placed by
    their hash alone, as before the secret): the crafted keys all share one place. No lookup
    reads more than PROBE_LIMIT entries; the keys with no room within them are not cached (and
    entries past it are dropped as the table grows), and every key still counts exactly."""
    out = flood(name, monkeypatch, secret="0:1")
    check_counts(out)
    for kind in ("crafted", "crafted bytes"):
        got = out[kind]
        assert got["cached"] <= PROBE_LIMIT, (kind, got["cached"])
        for how in ("warm", "new", "absent"):
            assert max(got[how]) <= PROBE_LIMIT, (kind, how, max(got[how]))
    assert out["normal"]["cached"] == N
