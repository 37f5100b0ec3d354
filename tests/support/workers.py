"""Bodies of the processes that tests start through multiprocessing with "spawn" (and "fork").

A spawned child imports the module that defines its target before it runs it. A test module
costs 0.35-0.5 CPU-s to import (pytest and everything the test itself imports), whereas this
module imports only shmwin (~0.12 CPU-s). Each spawned child therefore costs about 0.3 CPU-s
less when its target is here. The fork variants use the same bodies, so both starts run the
same code.
"""

from __future__ import annotations

import time
from typing import Any

from shmwin import Concurrency, Limiter, ManualClock


def limiter_hits(
    name: str, key: str, tries: int, admitted: Any, slot: int, clock_path: str | None = None
) -> None:
    """Attach the limiter ``name`` (on the ManualClock at ``clock_path``, if given) and hit
    ``key`` ``tries`` times; ``admitted[slot]`` = how many passed."""
    on_clock = {"clock": ManualClock(path=clock_path)} if clock_path else {}
    with Limiter.attach(name, **on_clock) as lim:
        admitted[slot] = sum(lim.hit(key) for _ in range(tries))


def limiter_hits_on(name: str, backend: str | None, out: Any, slot: int) -> None:
    """Attach the limiter ``name`` on ``backend`` and hit "client" 300 times; ``out[slot]`` =
    how many passed."""
    lim = Limiter.attach(name, backend=backend)
    out[slot] = sum(lim.hit("client") for _ in range(300))
    lim.close()


def limiter_hits_by_copies(name: str, clock_path: str, keys: list[str], rounds: int) -> None:
    """Hit each of ``keys`` ``rounds`` times, each time by a new object equal to the key."""
    from support.keycache import copy_of

    lim = Limiter.attach(name, clock=ManualClock(path=clock_path))
    for _ in range(rounds):
        for key in keys:
            assert lim.hit(copy_of(key))
    lim.close()


def limiter_hits_uncounted(name: str, n: int) -> None:
    """Attach the limiter ``name`` and hit the key "shared" ``n`` times."""
    lim = Limiter.attach(name)
    for _ in range(n):
        lim.hit("shared")
    lim.close()


def concurrency_holder(name: str, key: str, rounds: int, inside: Any, most: Any, violations: Any, start: Any,
                       deadline_s: float) -> None:  # fmt: skip
    """Once every worker is at the ``start`` barrier: ``rounds`` times acquire a slot of ``key``
    (within ``deadline_s``), hold it 10 ms, release it. ``inside`` counts the holders now,
    ``most`` the most at once; ``violations`` counts the times ``count()`` saw more than the
    limit."""
    c = Concurrency.attach(name)
    try:
        start.wait(60)  # every worker contends from the same moment, however slow its start
        for _ in range(rounds):
            assert c.acquire(key, timeout=deadline_s)
            with inside.get_lock():
                inside.value += 1
                most.value = max(most.value, inside.value)
            seen = c.count(key)
            if seen > c.limit:
                with violations.get_lock():
                    violations.value += 1
            time.sleep(0.01)
            with inside.get_lock():
                inside.value -= 1
            c.release(key)
    finally:
        c.close()


def counter_hits(kind: str, name: str, clock_path: str, n: int, limit: int, period_ns: int) -> int:
    """``n`` incrs (``kind`` "fixed") or hits (``kind`` "sliding") of key "k" of limits'
    counters ``name``, period ``period_ns``; how many a sliding limit admitted."""
    from shmwin.integrations.limits_fixed import FixedWindows
    from shmwin.integrations.limits_sliding import SlidingCounters

    clock = ManualClock(path=clock_path)
    opener = FixedWindows if kind == "fixed" else SlidingCounters
    c = opener.open(name, period_ns, clock, 64, create=False)
    assert c is not None
    admitted = 0
    try:
        for _ in range(n):
            if isinstance(c, FixedWindows):
                c.incr("k", 1)
                admitted += 1
            else:
                admitted += c.hit("k", limit, 1)
    finally:
        c.close()
    return admitted
