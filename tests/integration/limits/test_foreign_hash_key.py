"""One SipHash key for a limits storage's fixed windows (issue #30: ``get`` of a key counted
nowhere, 16 periods, under 2x ``memory://``).

A foreign key's sum (core/fixedsum.c) encodes and hashes the key once per distinct segment
hash key. So a storage's new fixed window takes the key of its fixed window of least name
(boards.shared_hash_key, read from that segment's header: no new secret anywhere), and FixedSum
groups its cores by key. These tests hold what that must not change: sums exact across real
processes making segments while others get, a segment made by an older shmwin (a key of its
own) summed beside the others, a board removed or spoiled by hand (the key is not in it), and
crafted keys (a known ``hash()``) probing no more of the key cache than its bound."""

from __future__ import annotations

import json
import os
import stat
import statistics
import subprocess
import sys

import pytest
from support.foreign import shm_storage
from support.helpers import ROOT, run_python

import shmwin
from shmwin.backends.shm import boards
from shmwin.backends.shm.segment import path_of
from shmwin.backends.shm.window import hash_key_of
from shmwin.integrations.limits_fixed import FixedWindows
from shmwin.integrations.limits_segments import wall_ns
from shmwin.rate import format_ns

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]  # also run against the sanitized cores

CHILD_ENV = dict(os.environ, PYTHONPATH=str(ROOT))  # this build of the core (a sanitizer's: its preload too)


@pytest.fixture
def storage(name: str):
    with shm_storage(name) as s:
        yield s


def hash_keys(name: str) -> dict[str, bytes]:
    """Each fixed window of storage ``name``: its SipHash key, read from its header."""
    out = {}
    for n in shmwin.names():
        if n.startswith(f"{name}.fixed."):
            w = shmwin.Window.attach(n)
            out[n] = w.meta.hash_key
            w.close()
    return out


def elsewhere(name: str, code: str) -> str:
    """``code`` run in an unrelated process, ``s`` its storage ``name``; what it printed."""
    head = "import sys\nfrom limits.storage import storage_from_string\nimport shmwin.integrations.limits\n"
    return run_python(head + "s = storage_from_string('shm://' + sys.argv[1])\n" + code, name).stdout.strip()


def older(name: str, period_s: int) -> FixedWindows:
    """A fixed window of storage ``name`` as an older shmwin made it: a random key of its own."""
    period_ns = period_s * 10**9
    made = FixedWindows.open(f"{name}.fixed.{format_ns(period_ns)}", period_ns, wall_ns, None, True)
    assert made is not None
    return made


# -- made in many processes, summed while others get -----------------------------------------------

_MAKER = """
import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits
s = storage_from_string("shm://" + sys.argv[1])
for period_s in range(int(sys.argv[2]), int(sys.argv[3])):
    for _ in range(int(sys.argv[4])):
        s.incr("user:42", period_s)
"""
_GETTER = """
import sys; from limits.storage import storage_from_string; import shmwin.integrations.limits
s = storage_from_string("shm://" + sys.argv[1])
want, seen = int(sys.argv[2]), []
while not seen or seen[-1] < want:
    seen.append(s.get("user:42"))
    assert s.get("user:7") == 0
assert seen == sorted(seen) and seen[-1] == want, seen[-5:]
"""


def test_segments_made_by_many_processes_share_the_first_one_s_key_and_sums_stay_exact(storage, name):
    """Three makers create 24 fixed windows at once (3 hits in each) while another process and
    this one get: every answer is a count between 0 and the total, never going down, the last
    exact; every window has the key of the first one (made before them), not the board's."""
    storage.incr("user:42", 100)  # the first fixed window: its key is the storage's
    first = hash_keys(name)[f"{name}.fixed.100s"]
    spans = [(101, 109), (109, 117), (117, 125)]
    total = 1 + 3 * 24
    children = [subprocess.Popen([sys.executable, "-c", _MAKER, name, str(a), str(b), "3"], env=CHILD_ENV)
                for a, b in spans]  # fmt: skip
    children.append(subprocess.Popen([sys.executable, "-c", _GETTER, name, str(total)], env=CHILD_ENV))
    answers = []
    try:
        while any(c.poll() is None for c in children[:3]):
            answers.append(storage.get("user:42"))
    finally:
        for c in children:
            assert c.wait(timeout=120) == 0
    assert answers == sorted(answers) and all(0 <= a <= total for a in answers)
    assert storage.get("user:42") == total and storage._foreign_get("user:42") == total
    keys = hash_keys(name)
    assert len(keys) == 25 and set(keys.values()) == {first}
    for n in keys:  # the segments keep their mode: the key is as secret as ever
        assert stat.S_IMODE(os.stat(path_of(n)).st_mode) == 0o600
    with open(boards.path_of(name), "rb") as f:
        assert first not in f.read()  # the board holds its word only


def test_two_storages_have_two_keys(storage, name):
    with shm_storage(name + "-other") as other:
        storage.incr("k", 60)
        other.incr("k", 60)
        storage.incr("k", 3600)
        mine, theirs = hash_keys(name), hash_keys(name + "-other")
        assert len(set(mine.values())) == 1 and not set(mine.values()) & set(theirs.values())


# -- an older shmwin's segments beside the new ones ---------------------------------------------


def test_a_segment_made_by_an_older_shmwin_keeps_its_key_and_is_summed_with_the_others(storage, name):
    """Two windows with keys of their own (1h and 2h, an older shmwin's), then 1m and 2m made by
    this one (the key of 1h, least name): in name order the keys go A A B A, which FixedSum
    groups; each window holds another power of 10, so a window missed or counted twice shows."""
    for period_s, hits in ((3600, 1), (7200, 10)):
        made = older(name, period_s)
        made.incr("user:42", hits)
        made.close()
    for period_s, hits in ((60, 100), (120, 1000)):
        storage.incr("user:42", period_s, hits)
    keys = hash_keys(name)
    assert len(set(keys.values())) == 2
    assert keys[f"{name}.fixed.1m"] == keys[f"{name}.fixed.2m"] == keys[f"{name}.fixed.1h"]
    assert keys[f"{name}.fixed.2h"] != keys[f"{name}.fixed.1h"]
    assert storage.get("user:42") == 1111 and storage._foreign_get("user:42") == 1111
    assert storage.get("user:7") == 0 and storage.get(b"user:42") == 0
    assert elsewhere(name, "print(s.get('user:42'), s.get('user:7'))").split() == ["1111", "0"]


# -- the board removed or spoiled by hand: the key is not in it ---------------------------------


@pytest.mark.parametrize("spoil", ["removed", "junk"])
def test_a_board_removed_or_spoiled_by_hand_keeps_the_key_and_the_sums(storage, name, spoil):
    """(Not truncated: a file cut under a live mapping is a SIGBUS, a board's as a segment's.)
    The process that makes a window lists again at its next get, whatever became of the board."""
    storage.incr("user:42", 60, 2)
    assert storage.get("user:42") == 2
    path = boards.path_of(name)
    if spoil == "removed":
        os.unlink(path)
    else:
        with open(path, "r+b") as f:
            f.write(os.urandom(8))
    storage.incr("user:42", 3600, 3)  # a new window made with the board gone or spoiled
    keys = hash_keys(name)
    assert len(keys) == 2 and len(set(keys.values())) == 1
    assert storage.get("user:42") == 5 and storage.get("user:7") == 0
    assert elsewhere(name, "print(s.get('user:42'))") == "5"


def test_a_segment_that_cannot_be_read_leaves_the_new_one_a_key_of_its_own(storage, name):
    """A junk file among the storage's fixed windows: the next incr's window is made (the shared
    key is a cost, never an error of the incr), with a random key; the sum raises as before."""
    storage.incr("user:42", 60)
    with open(path_of(f"{name}.fixed.1s"), "wb") as f:
        f.write(b"junk" * 64)
    try:
        assert storage.incr("user:42", 3600) == 1
    finally:
        os.unlink(path_of(f"{name}.fixed.1s"))
    keys = hash_keys(name)
    assert len(keys) == 2 and len(set(keys.values())) == 2
    assert storage.get("user:42") == 2


def test_a_hash_key_option_that_is_no_key_is_a_clear_error():
    assert hash_key_of(None) is None and hash_key_of(b"k" * 16) == b"k" * 16
    for junk in (b"short", bytes(16), "k" * 16, bytearray(16), b"k" * 17):
        with pytest.raises(ValueError, match="hash_key must be 16 bytes"):
            hash_key_of(junk)


# -- crafted keys: the key cache's bound holds on the sum's path --------------------------------

PROBE_LIMIT = 64  # keycache.c: entries a lookup reads at most
N, BITS = 600, 11  # keys counted (200 in each of 3 windows) and the low bits their hash() shares

_FLOOD = """
import json, random, sys
sys.path.insert(0, {tests_dir!r})
from support.hashflood import crafted_keys
from support.foreign import shm_storage

assert sys.flags.hash_randomization == 0  # PYTHONHASHSEED=0: hash() known to the attacker
name, n, bits = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
sets = {{"normal": [f"client-{{rng.getrandbits(68):017x}}" for _ in range(n + 100)],
        "crafted": crafted_keys(n + 100, bits)}}
out = {{}}
for kind, keys in sets.items():
    with shm_storage(f"{{name}}-{{kind}}") as s:
        hit, absent = keys[:n], keys[n:]
        for i, k in enumerate(hit):
            s.incr(k, (60, 3600, 86400)[i % 3])
        sums = [s.get(k) for k in hit] + [s.get(k) for k in absent]
        cores = [w.fixed_engine._core for w in s.segments._foreign_fixed()]
        assert len(cores) == 3
        out[kind] = {{"sums": sums, "probes": [c.cache_probes(k) for c in cores for k in keys]}}
print(json.dumps(out))
"""


def test_keys_crafted_to_share_their_hash_s_low_bits_probe_within_the_key_cache_s_bound(name, monkeypatch):
    """600 keys whose ``hash()`` shares its low 11 bits, counted over 3 windows sharing one
    SipHash key, and 100 such keys counted nowhere: every sum exact, and no lookup of any of
    them in any window's key cache reads more than PROBE_LIMIT entries, about as many as a
    normal key's (the sum takes the cache first, as every hit does)."""
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    code = _FLOOD.format(tests_dir=str(ROOT / "tests"))
    out = json.loads(run_python(code, name, str(N), str(BITS), timeout=240).stdout)
    for kind, got in out.items():
        assert got["sums"] == [1] * N + [0] * 100, kind
        assert max(got["probes"]) <= PROBE_LIMIT, kind
    crafted, normal = statistics.mean(out["crafted"]["probes"]), statistics.mean(out["normal"]["probes"])
    assert crafted <= 2 * normal, (crafted, normal)
