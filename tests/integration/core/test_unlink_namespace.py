"""``unlink()`` removes what the object opened, in the ``SHMWIN_NAMESPACE`` it was opened in --
not whatever the name means in the namespace in effect at the call (#33).

A limiter (and its ``NAME.decisions``), a token bucket and a window are opened in namespace A;
the environment then names namespace B, where the same names hold other objects (or none).
At 4ed36b0 ``Limiter.unlink()`` removed B's limiter and decisions window and left A's.
"""

from __future__ import annotations

import os

import pytest

import shmwin
from shmwin import Limiter, TokenBucket, Window
from shmwin.backends.shm.segment import PREFIX, SHM_DIR

pytestmark = pytest.mark.integration

MAKERS = {
    "limiter": (lambda: Limiter("x", "5/minute"), ["x", "x.decisions"]),
    "token-bucket": (lambda: TokenBucket("x", "5/minute", burst=2), ["x", "x.decisions"]),
    "window": (lambda: Window("x", span="1m", buckets=6), ["x"]),
}


def _in(namespace: str) -> list[str]:
    """The segments of ``namespace`` in /dev/shm (names, sorted)."""
    mine = PREFIX + (f"{namespace}~" if namespace else "")
    return sorted(e[len(mine) :] for e in os.listdir(SHM_DIR) if e.startswith(mine))


@pytest.mark.parametrize("then", ["other", "none"])
@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_unlink_removes_the_namespace_it_was_opened_in(monkeypatch, name_prefix, kind, then):
    ns_a, ns_b = f"{name_prefix}-a", f"{name_prefix}-b"
    make, segments = MAKERS[kind]
    monkeypatch.setenv("SHMWIN_NAMESPACE", ns_a)
    mine = make()
    monkeypatch.setenv("SHMWIN_NAMESPACE", ns_b)
    theirs = make()  # the same names, another namespace
    try:
        assert _in(ns_a) == _in(ns_b) == segments
        if then == "none":
            monkeypatch.delenv("SHMWIN_NAMESPACE")
        assert mine.unlink() is True
        assert _in(ns_a) == [], _in(ns_a)  # all of its own gone
        assert _in(ns_b) == segments, _in(ns_b)  # the other namespace's untouched
        assert mine.unlink() is False  # idempotent: nothing left of its own
    finally:
        mine.close()
        monkeypatch.setenv("SHMWIN_NAMESPACE", ns_b)
        theirs.unlink()
        theirs.close()
        monkeypatch.setenv("SHMWIN_NAMESPACE", ns_a)
        shmwin.unlink("x")
    assert _in(ns_a) == _in(ns_b) == []


def test_a_name_too_long_for_its_namespace_is_a_clear_error(monkeypatch):
    """A name within the 200 characters, in a long SHMWIN_NAMESPACE, makes a file name past
    NAME_MAX: a ValueError that says so, before anything is made (it was a raw OSError
    'File name too long' from the create: red team rtwin)."""
    monkeypatch.setenv("SHMWIN_NAMESPACE", "n" * 60)
    with pytest.raises(ValueError, match=r"too long in SHMWIN_NAMESPACE.*255"):
        Window.create("r" * 200, span=10, buckets=10)
    assert _in("n" * 60) == []
