"""Real gunicorn: a deploy changes a limiter's rates (the app's rates file) and HUPs the master
while requests keep coming. No 500s; every period across the change admits no more than the
rates in force, per carry rule; the old workers, still running the old rates, follow at their
next request. Time is a manual clock the workers share (moved between bursts)."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.live import assert_strict
from support.servers import Server, free_port, get, python_module

import shmwin
from shmwin import Limiter, ManualClock
from shmwin.rate import parse_many

gunicorn_config = pytest.importorskip("gunicorn.config")

S = 10**9
STEP_NS = 2 * S  # the clock moves this much between two bursts
BURST = 12  # requests per burst, from 6 threads


def _burst(port: int, path: str = "/") -> list[tuple[int, str]]:
    with ThreadPoolExecutor(6) as pool:
        return list(pool.map(lambda _: get(port, path), range(BURST)))


def _serve(name: str, tmp_path, rates_file, clock_path: str) -> Server:
    port = free_port()
    args = ["-w", "3", "--graceful-timeout", "5", "-b", f"127.0.0.1:{port}"]
    if hasattr(gunicorn_config, "ControlSocket"):  # gunicorn >= 24: one fixed socket path per user
        args.append("--no-control-socket")
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_TEST_RATES": str(rates_file), "SHMWIN_TEST_CLOCK": clock_path,
           "SHMWIN_LOG_DIR": str(tmp_path)}  # fmt: skip
    return Server(python_module("gunicorn", *args, "wsgi_live:app"), port, env)


@pytest.mark.parametrize(
    ("new", "on_change"),
    [("4/minute", "carry"), ("1/second;8/minute", "carry"), ("6/minute", "reset")],
    ids=["new-amount", "other-periods", "reset"],
)
def test_rates_changed_and_hupped_under_load(name, tmp_path, new, on_change):
    old = "10/minute"
    clock_path = str(tmp_path / "clock")
    clock = ManualClock(10**12, path=clock_path)
    rates_file = tmp_path / "rates"
    rates_file.write_text(f"{old} carry")
    server = _serve(name, tmp_path, rates_file, clock_path)
    admitted: list[int] = []
    statuses: list[int] = []

    def burst() -> list[str]:
        answers = _burst(server.port)
        statuses.extend(s for s, _ in answers)
        admitted.extend(clock() for s, _ in answers if s == 200)
        return [body for _, body in answers]

    try:
        for _ in range(40):  # the old rates, 80 s: the limit reached each minute
            burst()
            clock.advance(ns=STEP_NS)
        old_pids = {body.split()[0] for _, body in _burst(server.port, "/code")}  # no hit
        rates_file.write_text(f"{new} {on_change}")
        os.kill(server.proc.pid, signal.SIGHUP)  # a deploy: new workers with the new rates
        changed_ns = clock()
        deadline = time.monotonic() + 60
        while True:  # under load, the clock still, until only new workers answer
            bodies = burst() + [b for _, b in _burst(server.port, "/code")]
            if all(b.endswith(new) and b.split()[0] not in old_pids for b in bodies[-BURST:]):
                break
            assert time.monotonic() < deadline, server.output()
        clock.advance(ns=STEP_NS)
        settled_ns = clock()  # every worker runs the new rates from here
        for _ in range(60):
            burst()
            clock.advance(ns=STEP_NS)
        assert set(statuses) <= {200, 429}, server.output()  # no 500s
        before = [t for t in admitted if t < changed_ns]
        assert_strict(before, parse_many(old), since_ns=0)
        if on_change == "reset":  # the counts dropped (when the first new worker came): from then on
            assert_strict(admitted, parse_many(new), since_ns=settled_ns, counted_from_ns=changed_ns)
        else:  # the hits before the change count: every period across it holds the new rates
            assert_strict(admitted, parse_many(new), since_ns=changed_ns)
        with Limiter.attach(name) as lim:
            assert [str(r) for r in lim.rates] == new.split(";")
        assert any(t > changed_ns for t in admitted), "nothing admitted after the change"
    finally:
        server.stop()
        shmwin.unlink(name)
