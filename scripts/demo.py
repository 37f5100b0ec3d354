"""shmwin demo: worker processes share one sliding window; the total is exact.

Workers are started with *spawn* (as uvicorn does) and attach by name, so nothing
is inherited: the only thing they share is the window in /dev/shm.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shmwin import Window, names

WORKERS = 4
RUN_S = 2.0
BARS = " ▁▂▃▄▅▆▇█"


def worker(name: str, seed: int, results) -> None:
    w = Window.attach(name)
    rng = random.Random(seed)
    ok = err = 0
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        burst = rng.randint(1, 2000)  # uneven load: every worker sees a different share
        for _ in range(burst):
            if rng.random() < 0.03:
                w.add(1, "error")
                err += 1
            else:
                w.add(1, "ok")
                ok += 1
        time.sleep(rng.random() * 0.02)
    results.put((os.getpid(), ok, err))
    w.close()


def sparkline(values) -> str:
    top = max(values.max(), 1)
    return "".join(BARS[round(v / top * (len(BARS) - 1))] for v in values)


def run(mode: str) -> bool:
    name = f"demo-{os.getpid()}-{mode}"
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    w = Window(name, span=60, buckets=60, fields=("ok", "error"), mode=mode)
    try:
        print(f"\n== {WORKERS} spawned workers adding to window {name!r} ({mode} mode) for {RUN_S:g}s")
        procs = [ctx.Process(target=worker, args=(name, i, results)) for i in range(WORKERS)]
        for p in procs:
            p.start()
        while any(p.is_alive() for p in procs):
            t = w.totals()
            print(f"   live: ok={t['ok']:>9,}  error={t['error']:>7,}  "
                  f"rate(last 1s)={w.rate('ok', last=1):>10,.0f}/s", flush=True)  # fmt: skip
            time.sleep(0.5)
        per_worker = sorted(results.get(timeout=30) for _ in procs)
        for p in procs:
            p.join()
        print("\n   worker pid       ok    error")
        for pid, ok, err in per_worker:
            print(f"   {pid:>10} {ok:>8,} {err:>8,}")
        ok_sum = sum(ok for _, ok, _ in per_worker)
        err_sum = sum(err for _, _, err in per_worker)
        totals = w.totals()
        exact = totals == {"ok": ok_sum, "error": err_sum}
        print(f"   {'sum':>10} {ok_sum:>8,} {err_sum:>8,}   <- what the workers counted themselves")
        print(
            f"   {'window':>10} {totals['ok']:>8,} {totals['error']:>8,}   <- w.totals() read from /dev/shm"
        )
        print(f"   {'EXACT' if exact else 'MISMATCH'}: the shared window holds every add of every worker")
        series = w.series("ok", last=10)
        print(f"   last 10 one-second buckets of 'ok', oldest first: {sparkline(series)}")
        print(f"   {series.tolist()}")
        return exact
    finally:
        w.close()
        w.unlink()


GUNICORN_CONF = """
from shmwin.gunicorn import Hooks
hooks = Hooks(limiters={{"{limiter}": "100/minute"}},
              windows={{"{window}": {{"span": 60, "fields": ("admitted", "refused"), "keyed": True}}}})
on_starting, child_exit, on_exit = hooks.on_starting, hooks.child_exit, hooks.on_exit
"""
CLIENTS, REQUESTS_PER_CLIENT, GUNICORN_WORKERS = ("alice", "bob", "carol"), 200, 4


def _request(port: int, path: str, client: str) -> tuple[int, bool]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"X-Client": client})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        answer = json.loads(err.read())
    return answer["pid"], answer["allowed"]


def _drive(port: int, path: str) -> list[tuple[str, int, bool]]:
    jobs = [client for client in CLIENTS for _ in range(REQUESTS_PER_CLIENT)]
    random.Random(7).shuffle(jobs)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda client: _request(port, path, client), jobs))
    return [(client, pid, allowed) for client, (pid, allowed) in zip(jobs, answers, strict=True)]


def _report(path: str, results: list[tuple[str, int, bool]]) -> dict[str, int]:
    pids = sorted({pid for _, pid, _ in results})
    print(f"\n   {path}: admitted per client, and which workers admitted them")
    print("   client  " + "".join(f"{'pid ' + str(p):>11}" for p in pids) + "   admitted  refused")
    admitted = {}
    for client in CLIENTS:
        mine = [(pid, ok) for c, pid, ok in results if c == client]
        per_pid = [sum(ok for pid, ok in mine if pid == p) for p in pids]
        admitted[client] = sum(per_pid)
        row = "".join(f"{n:>11}" for n in per_pid)
        print(f"   {client:<8}{row}   {admitted[client]:>8}  {len(mine) - admitted[client]:>7}")
    return admitted


def run_gunicorn() -> bool:
    tag = f"demo-{os.getpid()}"
    limiter, window = f"{tag}-limit", f"{tag}-requests"
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "gunicorn.conf.py"
        conf.write_text(GUNICORN_CONF.format(limiter=limiter, window=window))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, DEMO_LIMITER=limiter, DEMO_WINDOW=window)
        cmd = [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(conf),
            "-w",
            str(GUNICORN_WORKERS),
            "-b",
            f"127.0.0.1:{port}",
            "--pythonpath",
            str(Path(__file__).parent),
            "--log-level",
            "warning",
        ]
        if hasattr(__import__("gunicorn.config").config, "ControlSocket"):
            cmd.append("--no-control-socket")
        cmd.append("demo_app:app")
        print(f"\n== gunicorn, {GUNICORN_WORKERS} workers, limit 100/minute per client; "
              f"{len(CLIENTS)} clients x {REQUESTS_PER_CLIENT} requests from 8 threads")  # fmt: skip
        server = subprocess.Popen(cmd, env=env)
        try:
            _wait_for_port(port)
            shared = _report("/shared (shmwin Limiter)", _drive(port, "/shared"))
            local = _report("/local (a limiter in each worker)", _drive(port, "/local"))
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
                scrape = resp.read().decode()
            print("\n   GET /metrics (prometheus_client + ShmwinCollector, read from shared memory):")
            for line in scrape.splitlines():
                wanted = line.startswith("shmwin_key_value") and 'field="admitted"' in line
                if wanted and "/shared" in line:
                    print(f"     {line}")
            with Window.attach(window) as w:
                counted = {c: w.total("admitted", key=f"/shared {c}") for c in CLIENTS}
                busiest = w.top(3, "refused")
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    exact = all(n == 100 for n in shared.values()) and counted == shared
    print(f"\n   shmwin: every client got exactly 100, though each worker saw only part of its traffic: "
          f"{'EXACT' if exact else 'WRONG'}")  # fmt: skip
    print(f"   per-worker limiters let through {sum(local.values())} instead of {100 * len(CLIENTS)} "
          f"(up to {GUNICORN_WORKERS} x 100 per client)")  # fmt: skip
    print(f"   most refused (window.top): {busiest}")
    print(f"   segments left after gunicorn exited: {[n for n in names() if n.startswith(tag)]}")
    return exact


def _wait_for_port(port: int) -> None:
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("gunicorn did not start")


if __name__ == "__main__":
    ok = all([run("striped"), run("locked"), run_gunicorn()])
    print("\nall exact" if ok else "\nCOUNTS DIFFER", flush=True)
    sys.exit(0 if ok else 1)
