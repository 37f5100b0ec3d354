"""Red team: a counter role's segment (limits' fixed window, sliding window counter) read
through a plain Window, from another process.

Its rows hold per-key state and no ring, so the Window's bucket readers (total, totals,
series, top) found no ring view and raised a bare ``IndexError: list index out of range``.
They now refuse with a ShmwinError naming what the segment holds; its native core (of its role's
type) has no ring call, a window's type refuses to be built over it, and nothing is written.
"""

from __future__ import annotations

import pytest
from limits import parse
from limits.storage import storage_from_string
from limits.strategies import STRATEGIES
from support.helpers import run_python

import shmwin
import shmwin.integrations.limits  # registers shm://

pytestmark = pytest.mark.integration

READER = """
import sys
import shmwin
from shmwin import Window, _core
for suffix, role in (("fixed.1m", "fixed-window"), ("sliding.1m", "sliding-counter")):
    w = Window.attach(f"{sys.argv[1]}.{suffix}")
    core = w._backend._core
    for call in (lambda: w.total(key="LIMITER/a/5/1/minute"), lambda: w.total(), lambda: w.totals(),
                 lambda: w.series(key="LIMITER/a/5/1/minute"), lambda: w.top(3)):
        try:
            call()
        except shmwin.ShmwinError as exc:
            assert role in str(exc) and "not buckets" in str(exc), exc
        else:
            raise AssertionError(f"{suffix}: a bucket read of per-key state answered")
    for ring_call in ("add", "add_and_total", "add_batch", "hit", "check"):  # its role's type has none
        assert not hasattr(core, ring_call), (suffix, type(core), ring_call)
    try:  # and a window's type, built over the segment, refuses it
        _core.WindowCore(w._backend._seg.mm, name=w.name, timeout_ns=0)
    except ValueError as exc:
        assert "per-key state" in str(exc), exc
    else:
        raise AssertionError(f"{suffix}: a window's core over per-key state was built")
    assert sorted(map(str, w.keys())) == ["LIMITER/a/5/1/minute"], w.keys()
    w.close()
print("ok")
"""


def test_a_counter_roles_segment_refuses_bucket_reads_and_ring_calls_clearly(name):
    storage = storage_from_string(f"shm://{name}")
    item = parse("5/minute")
    try:
        for strategy in ("fixed-window", "sliding-window-counter"):
            limiter = STRATEGIES[strategy](storage)
            for _ in range(3):
                assert limiter.hit(item, "a")
        assert run_python(READER, name).stdout.strip() == "ok"
        for strategy in ("fixed-window", "sliding-window-counter"):  # nothing was written
            assert STRATEGIES[strategy](storage).get_window_stats(item, "a").remaining == 2
    finally:
        shmwin.unlink_prefix(name)
