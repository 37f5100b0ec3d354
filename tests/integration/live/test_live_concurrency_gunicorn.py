"""Real gunicorn (gthread workers): a deploy changes a Concurrency's limit (the app's limit file)
and HUPs the master while requests keep coming. No 500s; at every slot taken, the slots held at
once (read from the workers' ledger) are within the limit in force when the slot was asked for,
per carry rule; the old workers, still running the old limit, follow at their next request."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.servers import Server, free_port, get, python_module

import shmwin
from shmwin import Concurrency

gunicorn_config = pytest.importorskip("gunicorn.config")

OLD = 4
CLIENTS = 10  # requests in flight at once: more than any limit here, so every limit is reached


def _serve(name: str, tmp_path, limit_file, ledger) -> Server:
    port = free_port()
    args = ["-w", "3", "-k", "gthread", "--threads", "4", "--graceful-timeout", "5",
            "-b", f"127.0.0.1:{port}"]  # fmt: skip
    if hasattr(gunicorn_config, "ControlSocket"):  # gunicorn >= 24: one fixed socket path per user
        args.append("--no-control-socket")
    env = {"SHMWIN_TEST_NAME": name, "SHMWIN_TEST_RATES": str(limit_file), "SHMWIN_TEST_LEDGER": str(ledger),
           "SHMWIN_LOG_DIR": str(tmp_path)}  # fmt: skip
    return Server(python_module("gunicorn", *args, "wsgi_live_concurrency:app"), port, env)


class Load:
    """CLIENTS threads sending requests to ``/`` until stopped; the statuses they got."""

    def __init__(self, port: int):
        self.port, self.statuses, self._stop = port, [], threading.Event()
        self._pool = ThreadPoolExecutor(CLIENTS)
        self._runs = [self._pool.submit(self._run) for _ in range(CLIENTS)]

    def _run(self) -> None:
        while not self._stop.is_set():
            self.statuses.append(get(self.port)[0])

    def stop(self) -> list[int]:
        self._stop.set()
        for run in self._runs:
            run.result()
        self._pool.shutdown()
        return self.statuses


def _read_ledger(ledger) -> tuple[list[tuple[int, int, int]], list[tuple[int, int]]]:
    """The slots (asked_ns, entered_ns, left_ns) and the opens (t_ns, limit) the workers wrote."""
    slots, opens = [], []
    for line in ledger.read_text().splitlines():
        kind, *words = line.split()
        if kind == "slot":
            slots.append((int(words[0]), int(words[1]), int(words[2])))
        else:
            opens.append((int(words[0]), int(words[2])))
    return slots, opens


def _most_at_once(slots: list[tuple[int, int, int]], at_ns: int) -> int:
    return sum(1 for _, entered, left in slots if entered <= at_ns <= left)


def _wait_for(port: int, limit: int, old_pids: set[str]) -> None:
    """Until a round of /code answers comes only from new workers, with the new limit."""
    deadline = time.monotonic() + 60
    while True:
        with ThreadPoolExecutor(6) as pool:
            bodies = [body for _, body in pool.map(lambda _: get(port, "/code"), range(12))]
        if all(b.split()[1] == str(limit) and b.split()[0] not in old_pids for b in bodies):
            return
        assert time.monotonic() < deadline, bodies


@pytest.mark.parametrize(
    ("new", "on_change"), [(2, "carry"), (6, "carry"), (3, "reset")], ids=["lowered", "raised", "reset"]
)
def test_limit_changed_and_hupped_under_load(name, tmp_path, new, on_change):
    limit_file, ledger = tmp_path / "limit", tmp_path / "ledger"
    limit_file.write_text(f"{OLD} carry")
    server = _serve(name, tmp_path, limit_file, ledger)
    try:
        load = Load(server.port)
        time.sleep(1.5)  # the old limit under load (a duration of load, not a clock boundary)
        with ThreadPoolExecutor(6) as pool:
            answers = pool.map(lambda _: get(server.port, "/code"), range(12))
            old_pids = {body.split()[0] for _, body in answers}
        limit_file.write_text(f"{new} {on_change}")
        os.kill(server.proc.pid, signal.SIGHUP)  # a deploy: new workers with the new limit
        _wait_for(server.port, new, old_pids)
        time.sleep(1.5)  # the new limit under load, every worker new
        statuses = load.stop()
        slots, opens = _read_ledger(ledger)
        assert set(statuses) <= {200, 429}, server.output()  # no 500s
        changed_ns = min(t for t, limit in opens if limit == new)  # the first new worker's open
        before = [s for s in slots if s[0] < changed_ns]
        after = [s for s in slots if s[0] > changed_ns]  # asked for once the new limit was in
        assert before and after, (len(before), len(after))
        for _, entered, _ in before:
            assert _most_at_once(slots, entered) <= max(OLD, new)
        for _, entered, _ in slots:
            if entered < changed_ns:
                assert _most_at_once(before, entered) <= OLD
        counted = after if on_change == "reset" else slots  # reset forgets the slots held before it
        for _, entered, _ in after:
            held = _most_at_once(counted, entered)
            assert held <= new, f"{held} slots held at once under a limit of {new} ({on_change})"
        assert max(_most_at_once(after, e) for _, e, _ in after) == new, "the new limit never reached"
        with Concurrency.attach(name) as conc:
            assert conc.limit == new
    finally:
        server.stop()
        shmwin.unlink(name)
