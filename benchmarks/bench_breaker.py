"""Breaker and Shedder benchmarks: Breaker.allow() against Limiter.hit() in the same run, and a
bounded loopback load test of a CPU-bound app under gunicorn with and without the shedder.

    .venv/bin/python benchmarks/bench_breaker.py [--quick] [--no-load] [--json FILE]

1 process: ns per call, each sample beside a sample of the floor (a loop calling only
time.monotonic_ns()), medians over rounds (benchmarks/_harness.py). The target: allow()
costs at most 2x a hit(), both measured here. allow()+accept() (a whole guarded call's
bookkeeping) is printed beside them.

Load test (about 40 s): gunicorn, 2 gthread workers x 8 threads, each request burning about
5 ms of pure-Python CPU. The capacity is measured first (closed loop, 8 clients); then an
open-loop client offers 2x that rate for a fixed time, once against the bare app and once
behind ShedderMiddleware (defaults: 90 % host CPU, 5 s / 50 buckets). Latency is from the
scheduled send to the last byte, for every request answered; p50/p99 are reported for the
200s and for all answers, with the counts of 200, 503 and unanswered (15 s client timeout);
"200s/s" is the 200s over the time from the first send to the last answer.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support/servers.py

import _harness
from _harness import FloorPairs, Target, fresh_loop, ns, write_json
from support.servers import free_port, wait_listening

import shmwin
from shmwin import Limiter
from shmwin.overload.breaker import Breaker

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# -- 1 process: allow() against hit() --------------------------------------------------------------


def bench_calls(n: int, rounds: int) -> tuple[dict[str, float], FloorPairs]:
    pairs = FloorPairs(n)
    tag = uuid.uuid4().hex[:8]
    lim = Limiter(f"bench-brk-lim-{tag}", f"{10**12}/hour", capacity=100)
    brk = Breaker(f"bench-brk-{tag}")
    try:
        hit, allow, accept = lim.hit, brk.allow, brk.accept

        def cycle() -> None:
            if allow():
                accept()

        loops = {"hit": fresh_loop("call_arg"), "allow": fresh_loop("call"), "cycle": fresh_loop("call")}
        calls = {"hit": (hit, "client"), "allow": (allow, None), "cycle": (cycle, None)}
        for label, loop in loops.items():  # warm-up, untimed
            fn, arg = calls[label]
            loop(fn, arg, n // 10 + 1)
        for _ in range(rounds):
            for label, loop in loops.items():
                fn, arg = calls[label]
                pairs.take(label, lambda loop=loop, fn=fn, arg=arg: loop(fn, arg, n) / n * 1e9)
        assert brk.stats().drops == 0  # nothing failed: allow() never dropped
    finally:
        for thing in (lim, brk):
            thing.unlink()
            thing.close()
    return {label: pairs.result(label).ns for label in loops}, pairs


# -- the load test -----------------------------------------------------------------------------------


def calibrate(target_s: float = 0.005) -> int:
    """Loop iterations of the app's work that take ``target_s`` here (median of 5)."""
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("SHMWIN_BENCH_WORK", "1")
    from _load_app import burn

    n = 20_000
    samples = []
    for _ in range(5):
        t = time.perf_counter()
        burn(n)
        samples.append(time.perf_counter() - t)
    return max(1000, round(n * target_s / statistics.median(samples)))


async def _request(port: int, timeout: float) -> int:
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
    try:
        writer.write(b"GET / HTTP/1.0\r\nHost: bench\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()
    return int(data.split(b" ", 2)[1])


async def _open_loop(
    port: int, rate: float, seconds: float, timeout: float
) -> list[tuple[int, float, float]]:
    """``rate`` requests per second for ``seconds``, each sent at its scheduled time whatever
    happened to the others; -> (status or 0 if unanswered, latency from its scheduled time,
    when it ended, from the start)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    results: list[tuple[int, float, float]] = []

    async def one(at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        try:
            status = await _request(port, timeout)
        except (OSError, asyncio.TimeoutError, ValueError, IndexError):
            status = 0
        now = loop.time()
        results.append((status, now - at, now - start))

    await asyncio.gather(*(one(start + i / rate) for i in range(int(rate * seconds))))
    return results


async def _closed_loop(port: int, clients: int, seconds: float) -> float:
    """Requests per second answered 200 with ``clients`` back-to-back clients."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    done = [0]

    async def client() -> None:
        while loop.time() < end:
            if await _request(port, 30) == 200:
                done[0] += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return done[0] / seconds


class Gunicorn:
    def __init__(self, work: int, shed: str):
        self.port = free_port()
        env = dict(
            os.environ,
            PYTHONPATH=f"{HERE}{os.pathsep}{ROOT}",
            SHMWIN_BENCH_WORK=str(work),
            SHMWIN_BENCH_SHED=shed,
        )
        args = [sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "2", "--threads", "8",
                "--backlog", "2048", "-b", f"127.0.0.1:{self.port}", "--log-level", "warning",
                "_load_app:app"]  # fmt: skip
        if hasattr(__import__("gunicorn.config").config, "ControlSocket"):  # gunicorn >= 24
            args.append("--no-control-socket")
        self.proc = subprocess.Popen(args, cwd=HERE, env=env)
        wait_listening(self.proc, self.port, "gunicorn", timeout_s=30)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_load(seconds: float, overload: float) -> tuple[str, dict[str, dict[str, float]]]:
    work = calibrate()
    rows: dict[str, dict[str, float]] = {}
    capacity = 0.0
    for label in ("without the shedder", "with the shedder"):
        shed = f"bench-shed-{uuid.uuid4().hex[:8]}" if "with " in label else ""
        server = Gunicorn(work, shed)
        try:
            asyncio.run(_closed_loop(server.port, 4, 1.0))  # warm-up: workers, imports, shedder segments
            if not capacity:
                capacity = asyncio.run(_closed_loop(server.port, 8, 3.0))
            rate = capacity * overload
            print(
                f"  {label}: offering {rate:.0f} req/s for {seconds:.0f} s ...", file=sys.stderr, flush=True
            )
            results = asyncio.run(_open_loop(server.port, rate, seconds, 15.0))
        finally:
            server.stop()
            if shed:
                shmwin.unlink(shed)
                shmwin.unlink(shed + ".flying")
        ok = [lat for status, lat, _ in results if status == 200]
        answered = [lat for status, lat, _ in results if status]
        took = max(end for _, _, end in results)
        rows[label] = {
            "offered": len(results), "ok": len(ok), "shed": sum(s == 503 for s, _, _ in results),
            "unanswered": sum(s == 0 for s, _, _ in results), "took": took,
            "p50_ok": _pct(ok, 0.5), "p99_ok": _pct(ok, 0.99),
            "p50_all": _pct(answered, 0.5), "p99_all": _pct(answered, 0.99),
            "goodput": len(ok) / took,
        }  # fmt: skip
    lines = [
        f"Work per request: {work:,} loop iterations (about 5 ms of CPU); capacity measured "
        f"closed-loop: {capacity:.0f} req/s; offered open-loop: {overload:.1f}× that for {seconds:.0f} s.",
        "",
        "| app | offered | 200 | 503 | unanswered | 200s/s | last answer | p50 (200s) | p99 (200s) "
        "| p50 (all) | p99 (all) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, r in rows.items():
        lines.append(
            f"| {label} | {r['offered']:.0f} | {r['ok']:.0f} | {r['shed']:.0f} | {r['unanswered']:.0f} "
            f"| {r['goodput']:.0f} | {r['took']:.1f} s | {_ms(r['p50_ok'])} | {_ms(r['p99_ok'])} "
            f"| {_ms(r['p50_all'])} "
            f"| {_ms(r['p99_all'])} |"
        )
    return "\n".join(lines), rows


def _ms(seconds: float) -> str:
    return "–" if seconds != seconds else f"{seconds * 1000:,.0f} ms"


def main() -> None:
    parser = _harness.target_parser(__doc__)
    parser.add_argument("--no-load", action="store_true", help="skip the gunicorn load test")
    parser.add_argument("--seconds", type=float, help="load test: seconds of offered load per app (8)")
    parser.add_argument("--overload", type=float, default=2.0, help="load test: offered / capacity (2.0)")
    args = parser.parse_args()
    n, rounds = (30_000, 3) if args.quick else (200_000, 9)
    print(f"# bench_breaker: {platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} cores; {n:,} calls/sample, median of {rounds}", file=sys.stderr)  # fmt: skip
    calls, pairs = bench_calls(n, rounds)
    # each against the floor sampled beside it, so a busy stretch of the machine cancels out
    ratio = pairs.result("allow").ratio / pairs.result("hit").ratio
    target = Target(
        "breaker-allow", "`Breaker.allow()`, 1 process", ns(calls["allow"]),
        f"`Limiter.hit()` {ns(calls['hit'])}", f"{ratio:.2f}×", "≤ 2× `hit()`", ratio <= 2.0,
    )  # fmt: skip
    details = [
        "#### Breaker (`bench_breaker.py`)",
        "",
        "| call | ns per call | × floor |",
        "| --- | ---: | ---: |",
        *(
            f"| {label} | {ns(pairs.result(key).ns)} | {pairs.result(key).ratio:.2f} |"
            for key, label in (
                ("hit", "`Limiter.hit(key)`"),
                ("allow", "`Breaker.allow()`"),
                ("cycle", "`allow()` then `accept()`"),
            )
        ),
        "",
        f"`allow()` / `hit()`: {ratio:.2f}× (their ratios to the floor, divided; target ≤ 2×).",
    ]
    print("\n".join(details))
    if not args.no_load:
        seconds = args.seconds or (3.0 if args.quick else 8.0)
        print("load test ...", file=sys.stderr, flush=True)
        table, _ = bench_load(seconds, args.overload)
        details += ["", "#### Shedder under load (gunicorn gthread, loopback)", "", table]
        print("\n" + table)
    if args.json:
        write_json(args.json, [target], "\n".join(details))


if __name__ == "__main__":
    main()
