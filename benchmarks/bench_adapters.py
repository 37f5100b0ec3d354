"""The adapters against their peers' in-process backends, in one run, rounds in turns:

- pyrate-limiter: ``Limiter(bucket).try_acquire`` on a ShmwinBucket against an InMemoryBucket
  (one rate, an hour's limit far above the calls: every call admitted and counted; the exact
  log then holds its most, 4,096 times, which a hit scans today), a bucket's ``put`` alone
  (pyrate's limiter adds its lock and item stamping around it), and a refused ``put`` (a full
  100/hour: the refusal also reads which rate refused and when the item fits);
- Django: django-ratelimit's count of one request (``get_usage``: ``cache.add`` then
  ``cache.incr`` on the same key) on ShmwinCounterCache against Django's locmem cache, and a
  bare ``cache.incr``.

The peers here keep their state in the process (not shared: pyrate's MultiprocessBucket is a
parent's children only, locmem is one per process): the ratio is what sharing costs a call.

    .venv/bin/python benchmarks/bench_adapters.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

import django
from django.conf import settings
from pyrate_limiter import Duration, InMemoryBucket, Limiter, Rate, RateItem

from shmwin.integrations.pyrate import ShmwinBucket

TAG = f"bench-adapters-{os.getpid()}"
settings.configure(
    CACHES={
        "shm": {"BACKEND": "shmwin.integrations.django.ShmwinCounterCache", "LOCATION": f"{TAG}-django"},
        "locmem": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": TAG},
    },
    INSTALLED_APPS=["django_ratelimit"],
    SILENCED_SYSTEM_CHECKS=["django_ratelimit.W001", "django_ratelimit.E003"],
)
django.setup()

from django.core.cache import caches  # noqa: E402 (after the settings)
from django.test import RequestFactory  # noqa: E402
from django_ratelimit.core import get_usage  # noqa: E402

Loop = Callable[[int], None]


def per_call_ns(loop: Loop, n: int) -> float:
    started = time.perf_counter_ns()
    loop(n)
    return (time.perf_counter_ns() - started) / n


def acquire_loop(bucket: object) -> Loop:
    acquire = Limiter(bucket).try_acquire

    def run(n: int) -> None:
        for _ in range(n):
            acquire("client", blocking=False)

    return run


def put_loop(bucket: object) -> Loop:
    put, now = bucket.put, bucket.now  # type: ignore[attr-defined]

    def run(n: int) -> None:
        for _ in range(n):
            put(RateItem("client", now()))

    return run


def full(bucket: object) -> object:
    """``bucket`` holding its limit now: every later put is refused (and records its wait)."""
    while bucket.put(RateItem("client", bucket.now())):  # type: ignore[attr-defined]
        pass
    return bucket


def ratelimit_loop(alias: str) -> Loop:
    request = RequestFactory().get("/")

    def run(n: int) -> None:
        settings.RATELIMIT_USE_CACHE = alias  # the cache django-ratelimit counts in
        for _ in range(n):
            get_usage(request, group="api", key=lambda *_: "client", rate="100000000/h", increment=True)

    return run


def incr_loop(alias: str) -> Loop:
    cache = caches[alias]
    cache.set("n", 0, 3600)
    incr = cache.incr

    def run(n: int) -> None:
        for _ in range(n):
            incr("n")

    return run


def compare(what: str, ours: Loop, theirs: Loop, peer: str, rounds: int, n: int) -> None:
    mine, peers = [], []
    for r in range(rounds):
        pair = [(ours, mine), (theirs, peers)]
        for loop, out in pair if r % 2 == 0 else pair[::-1]:
            out.append(per_call_ns(loop, n))
    ratio = statistics.median(m / p for m, p in zip(mine, peers, strict=True))
    ours_ns, peer_ns = statistics.median(mine), statistics.median(peers)
    print(f"| {what} | {ours_ns:,.0f} | {peer} | {peer_ns:,.0f} | {ratio:.2f}x |")


def main() -> None:
    quick = "--quick" in sys.argv
    rounds, n = (3, 2_000) if quick else (9, 20_000)
    rate = [Rate(100_000_000, Duration.HOUR)]
    ours, theirs = ShmwinBucket(rate, f"{TAG}-pyrate"), InMemoryBucket(rate)
    theirs_put = InMemoryBucket(rate)
    ours_put = ShmwinBucket(rate, f"{TAG}-pyrate", key="put")
    small = [Rate(100, Duration.HOUR)]
    ours_full, theirs_full = full(ShmwinBucket(small, f"{TAG}-full")), full(InMemoryBucket(small))
    try:
        print(f"{rounds} rounds of {n:,} calls in turns; ns per call, medians; ratio: the rounds' median\n")
        print("| call | ShmwinBucket / ShmwinCounterCache (ns) | peer | peer (ns) | shmwin / peer |")
        print("| --- | ---: | --- | ---: | ---: |")
        pyrate, django_ = "InMemoryBucket", "locmem"
        compare("pyrate `try_acquire`", acquire_loop(ours), acquire_loop(theirs), pyrate, rounds, n)
        compare("pyrate bucket `put`", put_loop(ours_put), put_loop(theirs_put), pyrate, rounds, n)
        compare(
            "pyrate `put` refused (100/h, full)",
            put_loop(ours_full),
            put_loop(theirs_full),
            pyrate,
            rounds,
            n,
        )
        compare(
            "django-ratelimit `get_usage`",
            ratelimit_loop("shm"),
            ratelimit_loop("locmem"),
            django_,
            rounds,
            n,
        )
        compare("Django `cache.incr`", incr_loop("shm"), incr_loop("locmem"), django_, rounds, n)
    finally:
        ours.unlink()
        ours_put.close()
        ours_full.unlink()
        caches["shm"].unlink()


if __name__ == "__main__":
    main()
