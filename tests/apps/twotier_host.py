"""One "host" of tests/integration/twotier/test_twotier_hosts.py: run inside its own mount namespace
(a private /dev/shm), it forks WORKERS processes that hammer one two-tier limiter.

    python twotier_host.py NAME URL RATE CLOCK_PATH OUT_DIR HOST END_NS ON_ERROR WORKERS HITS [FALLBACK]

HITS: each worker's hits in each tick it sees.

FALLBACK: the limiter's ``fallback=`` (with ON_ERROR "local"): its host's share while Redis is away.

Time is the test's ManualClock in CLOCK_PATH, shared by every host (and by the Redis scripts,
through their injected time). Each worker makes HITS hits in each tick it sees, holding a
shared flock on CLOCK_PATH.lock, which the driver takes exclusively to move the clock: time
stands still while any call is in flight, so the limiter, the scripts and the record agree on
when each hit happened, and the scripts read a time that never goes back. Each admitted hit's
time is appended to OUT_DIR/HOST-WORKER.txt at once (a killed host's admissions are on disk),
and "ready" files tell the driver to start the clock. A worker looks for the next tick every
POLL_S (1 ms): the driver takes 2 ms and more a tick, so a worker still sees each tick unless
descheduled (as it could at 0.2 ms), and six workers wake 6,000 times a second, not 30,000.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time

from shmwin import Limiter, ManualClock
from shmwin.backends.redis.testing import ServerTime

POLL_S = 0.001


def work(name: str, url: str, rate: str, clock_path: str, out: str, end_ns: int, on_error: str,
         hits_per_tick: int, fallback: str | None) -> None:  # fmt: skip
    shared = ManualClock(path=clock_path)
    local = {"fallback": fallback, "timeout": 0.2} if fallback else {}  # a frozen server costs 0.2 s a probe
    lim = Limiter(name, rate, backend=url, clock=ServerTime(shared), on_error=on_error, **local)
    lock = os.open(clock_path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    with open(out, "a", buffering=1) as record:
        open(out + ".ready", "w").close()
        last = -1
        while True:
            now = shared()
            if now >= end_ns:
                break
            if now == last:
                time.sleep(POLL_S)
                continue
            fcntl.flock(lock, fcntl.LOCK_SH)
            try:
                last = now = shared()
                for _ in range(hits_per_tick):
                    try:
                        if lim.hit("k"):
                            record.write(f"{now}\n")
                    except Exception as exc:  # on_error="raise" only
                        record.write(f"# {type(exc).__name__}\n")
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    lim.close()


def main() -> None:
    name, url, rate, clock_path, out_dir, host, end_ns, on_error, workers, hits = sys.argv[1:11]
    fallback = sys.argv[11] if len(sys.argv) > 11 else None
    pids = []
    for w in range(int(workers)):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                out = os.path.join(out_dir, f"{host}-{w}.txt")
                work(name, url, rate, clock_path, out, int(end_ns), on_error, int(hits), fallback)
            except BaseException:
                import traceback

                traceback.print_exc()
                code = 1
            os._exit(code)
        pids.append(pid)
    codes = [os.waitpid(pid, 0)[1] for pid in pids]
    sys.exit(0 if all(c == 0 for c in codes) else 1)


if __name__ == "__main__":
    main()
