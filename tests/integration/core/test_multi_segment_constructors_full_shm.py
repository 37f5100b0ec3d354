"""Constructors that make several segments make all of them or none (docs/errors.md: an error at
create time leaves "nothing half-built"), on a /dev/shm that is full at every step of their
sequence.

``Limiter`` and ``TokenBucket`` make ``NAME`` then ``NAME.decisions``; ``AdaptiveLimiter`` makes
``NAME.health`` then ``NAME``; ``Shedder`` makes ``NAME``, ``NAME.flying``, then ``NAME.rt``. Each runs in a
private tmpfs (tests/support/rootenv.py) filled by a file so that exactly ``free`` bytes are left, for
every ``free`` from 0 to past what the whole sequence needs, a page at a time; then with a tmpfs
of few inodes, ``k`` of them left for every ``k`` below the number of segments. Every try either
builds the whole object (its segments all there) or raises ``OutOfSpaceError`` and leaves
nothing; and across the sweep every segment of the sequence is the one that failed at least once.
At 4ed36b0 a limiter whose ``x.decisions`` did not fit left ``x`` behind.

A constructor that *attached* an existing segment and then failed to make the next one leaves
the existing one alone (another process's): the last test.
"""

from __future__ import annotations

import json

import pytest
from support.rootenv import describe, needs_namespace, python_argv, run_in_namespace

pytestmark = pytest.mark.integration

# name -> (the constructor, the segments it makes in order)
SWEEP = r"""
import errno, gc, json, os, sys
import shmwin
from shmwin import AdaptiveLimiter, Limiter, Shedder, TokenBucket

MAKERS = {
    "limiter": (lambda: Limiter("x", "5/minute"), ["x", "x.decisions"]),
    "exact-limiter": (lambda: Limiter("x", "5/minute;1000/hour", exact=True), ["x", "x.decisions"]),
    "token-bucket": (lambda: TokenBucket("x", "5/minute", burst=10), ["x", "x.decisions"]),
    "adaptive": (lambda: AdaptiveLimiter("x", "100/second"), ["x.health", "x"]),
    "shedder": (lambda: Shedder("x", cpu=lambda: 0), ["x", "x.flying", "x.rt"]),
}
FILLER = "/dev/shm/filler"
PAGE = 4096


def free_bytes():
    st = os.statvfs("/dev/shm")
    return st.f_bavail * st.f_frsize


def leave_free(n):
    # the filler takes all but n bytes
    if os.path.exists(FILLER):
        os.unlink(FILLER)
    fd = os.open(FILLER, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        take = free_bytes() - n
        if take > 0:
            os.posix_fallocate(fd, 0, take)
    finally:
        os.close(fd)


def attempt(make, segments):
    # one try: "ok", or the name of the segment the OutOfSpaceError named; what it left
    try:
        made = make()
    except shmwin.OutOfSpaceError as exc:
        gc.collect()
        failed = [s for s in segments if repr(s) in str(exc)]
        return "failed:" + (failed[-1] if failed else "?" + str(exc)), shmwin.names()
    left = shmwin.names()
    made.unlink()
    made.close()
    gc.collect()
    return "ok", left


kind, sweep = sys.argv[1], sys.argv[2]
make, segments = MAKERS[kind]
seen, bad = {}, []
if sweep == "bytes":
    before = free_bytes()  # no filler yet: how much does the whole sequence take?
    made = make()
    need = before - free_bytes()
    assert sorted(shmwin.names()) == sorted(segments), shmwin.names()
    made.unlink()
    made.close()
    gc.collect()
    assert free_bytes() == before
    for free in range(0, need + 2 * PAGE, PAGE):
        leave_free(free)
        outcome, left = attempt(make, segments)
        seen[outcome] = seen.get(outcome, 0) + 1
        want = sorted(segments) if outcome == "ok" else []
        if left != want:
            bad.append({"free": free, "outcome": outcome, "left": left})
else:  # inodes: the tmpfs has few; leave k free
    fillers = []
    try:
        while True:
            path = f"/dev/shm/inode-{len(fillers)}"
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            fillers.append(path)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    for k in range(len(segments) + 1):
        for path in fillers[:k]:
            os.unlink(path)
        outcome, left = attempt(make, segments)
        seen[outcome] = seen.get(outcome, 0) + 1
        want = sorted(segments) if outcome == "ok" else []
        if left != want:
            bad.append({"free inodes": k, "outcome": outcome, "left": left})
        for path in fillers[:k]:
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
print("RESULT " + json.dumps({"seen": seen, "bad": bad, "segments": segments}))
"""

KINDS = ("limiter", "exact-limiter", "token-bucket", "adaptive", "shedder")


def sweep(kind: str, what: str) -> dict:
    size, inodes = ("2m", None) if what == "bytes" else ("4m", 64)
    proc = run_in_namespace(python_argv(SWEEP, kind, what), shm_size=size, shm_inodes=inodes, hidepid=None)
    assert proc.returncode == 0 and "RESULT " in proc.stdout, describe(proc)
    return json.loads(proc.stdout.split("RESULT ", 1)[1])


@needs_namespace
@pytest.mark.parametrize("what", ["bytes", "inodes"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_full_dev_shm_at_any_step_leaves_all_or_nothing(kind, what):
    result = sweep(kind, what)
    assert result["bad"] == [], result
    # each segment of the sequence was the one that did not fit at least once, and then it all fit
    assert set(result["seen"]) == {"ok", *(f"failed:{s}" for s in result["segments"])}, result


ATTACHED = r"""
import os
import shmwin
from shmwin import Limiter

Limiter("x", "5/minute", decisions=False).close()  # another process's limiter, with no decisions window
st = os.statvfs("/dev/shm")
fd = os.open("/dev/shm/filler", os.O_CREAT | os.O_RDWR, 0o600)
os.posix_fallocate(fd, 0, st.f_bavail * st.f_frsize)
try:
    Limiter("x", "5/minute")  # attaches x, cannot make x.decisions
except shmwin.OutOfSpaceError as exc:
    assert "x.decisions" in str(exc), exc
else:
    raise AssertionError("x.decisions was made in a full /dev/shm")
assert shmwin.names() == ["x"], shmwin.names()  # the attached limiter stays: not this call's to remove
with Limiter.attach("x") as lim:
    assert lim.hit("k")
print("RESULT ok")
"""


@needs_namespace
def test_a_failed_constructor_leaves_a_segment_it_attached():
    proc = run_in_namespace(python_argv(ATTACHED), shm_size="1m", hidepid=None)
    assert proc.returncode == 0 and "RESULT ok" in proc.stdout, describe(proc)
