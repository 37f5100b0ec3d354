"""A Window handle dropped without close() gives back what it held as soon as its last
reference goes, GC or no GC: its stripe, its mapping. (A reference cycle through the stripe
callback kept every dropped handle until the cyclic GC ran: a process that opened a handle per
request, with the GC off or frozen, ended holding 64 of 64 stripes and 1,001 mappings, and a new
worker got no stripe: red team rtwin.) A bound ``add`` kept alone keeps working, as a bound
method would, and gives the stripe back when it goes."""

from __future__ import annotations

from support.helpers import run_python

from shmwin import Window

DROPPER = """
import gc, os, sys
gc.disable()  # as a server that froze its heap: only reference counts free anything
from shmwin import Window
name, n = sys.argv[1], int(sys.argv[2])
base = Window.attach(name)
def request():
    w = Window(name, span=600, buckets=60, stripes=4)
    w.add(1)
for _ in range(n):
    request()
mine = sum(1 for _, pid, alive in base.stripe_owners() if pid == os.getpid() and alive)
maps = sum(1 for line in open("/proc/self/maps") if "shmwin." + name in line)
add = Window(name, span=600, buckets=60, stripes=4).add  # the handle itself dropped at once
add(1)
held = sum(1 for _, pid, alive in base.stripe_owners() if pid == os.getpid() and alive)
del add
after = sum(1 for _, pid, alive in base.stripe_owners() if pid == os.getpid() and alive)
print(mine, maps, held, after, base.total())
"""


def test_dropped_handles_give_back_their_stripes_and_mappings_without_the_gc(name):
    with Window(name, span=600, buckets=60, stripes=4) as w:
        out = run_python(DROPPER, name, "200").stdout.split()
        mine, maps, held, after, total = map(int, out)
        assert mine == 0, f"{mine} of 4 stripes still held by 200 dropped handles"
        assert maps == 1, f"{maps} mappings of the segment (the one open handle's only)"
        assert held == 1 and after == 0  # the bound add held a stripe, and gave it back
        assert total == 201
        # every stripe is free for the next worker, and every add was kept
        assert run_python(
            "import sys; from shmwin import Window\nw = Window.attach(sys.argv[1]); w.add(1)\n"
            "print(sum(1 for _, p, alive in w.stripe_owners() if alive))", name
        ).stdout.strip() == "1"
        assert w.total() == 202
        w.unlink()
