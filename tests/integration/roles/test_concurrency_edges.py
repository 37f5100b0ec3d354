"""Concurrency's edges: what a handle says once closed, and timeouts at the ends of their range
(the red team of the concurrency's live limits, L1-L2)."""

from __future__ import annotations

import threading

import pytest

import shmwin
from shmwin import Concurrency

pytestmark = pytest.mark.integration


def test_a_release_after_close_says_closed(name):
    with Concurrency(name, 1) as c:
        assert c.acquire("k", timeout=0)
    with pytest.raises(shmwin.WindowClosedError, match="closed"):
        c.release("k")  # (it said NotHeldError: "holds no slot")
    shmwin.unlink(name)


def test_an_infinite_timeout_waits_as_none_does(name):
    """``timeout=float("inf")`` waits until a slot frees (it raised OverflowError)."""
    with Concurrency(name, 1) as c, Concurrency.attach(name) as other:
        assert other.acquire("k", timeout=float("inf"))
        threading.Timer(0.05, other.release, ("k",)).start()
        assert c.acquire("k", timeout=float("inf")) and c.count("k") == 1
        c.release("k")
        c.unlink()
