"""What a process pays to count (issue 28): ``import shmwin`` and a limiter's hit, test and stats,
a token bucket's, a window's add and a concurrency's acquire and release load neither numpy nor
asyncio (nor ssl, socket or concurrent.futures, which asyncio brings). Each of the thousands of
processes the tests start, and each of a user's workers, paid 0.09 CPU-s for numpy and 0.04 for
asyncio at import. numpy comes with the first array read or built, asyncio with the first wait of
an ``*_async`` method, which imports it itself."""

from __future__ import annotations

import json

from support.helpers import run_python

HEAVY = ("numpy", "asyncio", "ssl", "socket", "concurrent.futures")  # what a counting process never needs

COUNTING = """
import json, sys
import shmwin
from shmwin import Concurrency, Limiter, TokenBucket, Window

heavy = sys.argv[2].split(",")
loaded = lambda: [m for m in heavy if m in sys.modules]
at_import = loaded()
# periods of an hour: on a loaded machine a second can pass between the hits and the reads
lim, tb = Limiter(sys.argv[1] + "-l", "10/hour"), TokenBucket(sys.argv[1] + "-t", "10/hour", burst=5)
w, conc = Window(sys.argv[1] + "-w", "1h", 10), Concurrency(sys.argv[1] + "-c", 3)
verdicts = [lim.hit("k"), lim.test("k"), lim.stats("k").used, tb.hit("k"), tb.test("k"), tb.stats("k").used]
w.add(2)
verdicts += [conc.acquire("k"), conc.release("k")]
counting = loaded()
verdicts.append(w.total())  # a read: numpy's array, now
print(json.dumps({"import": at_import, "counting": counting, "read": loaded(), "verdicts": verdicts}))
for opened in (lim, tb, w, conc):
    opened.close()
    opened.unlink()
"""


def test_counting_loads_neither_numpy_nor_asyncio(make_name):
    out = json.loads(run_python(COUNTING, make_name("lazy"), ",".join(HEAVY)).stdout)
    assert out["verdicts"] == [True, True, 1, True, True, 1, True, None, 2]  # the calls did count
    assert out["import"] == [] and out["counting"] == [], f"loaded by a process that only counts: {out}"
    assert out["read"] == ["numpy"]  # what the check looks for is what a read does load


FIRST_USE = """
import json, sys
import shmwin

lazy = ("shmwin.overload", "shmwin.distribution")
at_import = [m for m in lazy if m in sys.modules]
from shmwin import *  # noqa: F403 -- every name of __all__, those loaded at first use too
from shmwin import Breaker, Distribution, Shedder

same = [Breaker is sys.modules["shmwin.overload.breaker"].Breaker, shmwin.Shedder is Shedder,
        Distribution is sys.modules["shmwin.distribution"].Distribution]
unlisted = sorted(set(shmwin.__all__) - set(dir(shmwin)))
print(json.dumps({"import": at_import, "same": same, "unlisted": unlisted}))
"""


def test_the_overload_tools_and_distribution_load_at_first_use():
    out = json.loads(run_python(FIRST_USE).stdout)
    assert out == {"import": [], "same": [True, True, True], "unlisted": []}


MANUAL_WAIT = """
import sys
from shmwin import Limiter, ManualClock

clock = ManualClock(start_ns=5 * 10**9)
lim = Limiter(sys.argv[1], "1/second", clock=clock)
lim.hit("k")
before = "asyncio" in sys.modules
wait = lim.acquire_async("k", timeout=5)  # driven by hand: no event loop of this process's own
steps = 0
try:
    while True:
        wait.send(None)
        steps += 1
except StopIteration as done:
    got = done.value
print(before, "asyncio" in sys.modules, got, steps >= 1, clock.sleeps != [])
lim.close()
lim.unlink()
"""

LOOP_WAITS = """
import asyncio, sys
from shmwin import Concurrency, Limiter, TokenBucket

async def waits(name):
    conc = Concurrency(name + "-c", 1)
    async with conc.hold_async("k"):  # the one slot held: the wait sleeps, then gives up
        refused = await conc.acquire_async("k", timeout=0.01)
    got = await conc.acquire_async("k", timeout=5)
    conc.release("k")
    lim = Limiter(name + "-l", "1/hour")
    tb = TokenBucket(name + "-t", "1/hour", burst=1)
    answers = [refused, got]
    for front in (lim, tb):  # the first admitted, the second waits on the host's clock, then gives up
        answers += [await front.acquire_async("k", timeout=0), await front.acquire_async("k", timeout=0.01)]
    for opened in (conc, lim, tb):
        opened.close()
        opened.unlink()
    return answers

print(*asyncio.run(waits(sys.argv[1])))
"""


def test_async_waits_import_asyncio_themselves(make_name):
    # a ManualClock's wait, stepped by hand in a process that never imported asyncio: the wait did
    before, after, got, stepped, slept = run_python(MANUAL_WAIT, make_name("manual")).stdout.split()
    assert (before, after) == ("False", "True")
    assert (got, stepped, slept) == ("True", "True", "True")
    # the host clock's waits on a real event loop: the default sleep is asyncio's
    answers = run_python(LOOP_WAITS, make_name("loop")).stdout.split()
    assert answers == ["False", "True", "True", "False", "True", "False"]
