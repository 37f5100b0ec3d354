"""Shedder: go-zero's conditions checked decision by decision against a model, the cool-off,
host CPU from /proc/stat, the in-flight count after SIGKILLed processes, the middleware
(in process and under a real gunicorn)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from support.helpers import ROOT

import shmwin
from shmwin import ManualClock
from shmwin.integrations.middleware import ASGIShedderMiddleware, ShedderMiddleware
from shmwin.overload.cpu import HostCpu, busy_and_total
from shmwin.overload.inflight import InFlight
from shmwin.overload.shedder import OverloadedError, Shedder, overload_factor

S = 1_000_000_000
MS = 1_000_000


class Cpu:
    """An injected CPU source: millicpu, set by the test."""

    def __init__(self, value: int = 0):
        self.value = value

    def __call__(self) -> int:
        return self.value


def _shedder(name, clock, cpu, **kwargs) -> Shedder:
    return Shedder(name, clock=clock, cpu=cpu, **kwargs)


def _drop(s: Shedder) -> None:
    s.unlink()
    s.close()


@contextlib.contextmanager
def shedding(name, clock, cpu, **kwargs) -> Iterator[Shedder]:
    """A shedder for the test (as :func:`_shedder` makes it), unlinked and closed after it."""
    s = _shedder(name, clock, cpu, **kwargs)
    try:
        yield s
    finally:
        _drop(s)


# -- go-zero's conditions, written out independently --------------------------------------------


class GoZeroModel:
    """adaptiveshedder.go's decision for one process, over plain Python state:
    drop = (cpu >= threshold or still hot) and avg_flying > max_flight and flying > max_flight."""

    def __init__(self, threshold=900, window_s=5, buckets=50, cool_off_ns=S):
        self.threshold, self.buckets, self.cool_off_ns = threshold, buckets, cool_off_ns
        self.bucket_ns = window_s * S // buckets
        self.flying, self.avg_flying = 0, 0.0
        self.overload_ns, self.dropped_recently = None, False
        self.passes: dict[int, int] = {}  # bucket epoch -> passes
        self.rt_us: dict[int, int] = {}  # bucket epoch -> summed response times
        self.rt_min: dict[int, int] = {}  # bucket epoch -> the shortest response time (the real minimum)

    def max_flight(self, now_ns: int, cpu: int) -> float:
        current = now_ns // self.bucket_ns
        done = range(current - self.buckets + 1, current)  # the window without its partial bucket
        max_pass = max([1] + [self.passes.get(e, 0) for e in done])
        shortest = [self.rt_min[e] for e in done if self.passes.get(e, 0) > 0]
        min_rt_ms = min(shortest) / 1000 if shortest else 1000.0
        flight = max(1.0, max_pass * min_rt_ms * (S / self.bucket_ns / 1000))
        factor = min(1.0, max(0.1, (1000 - cpu) / (1000 - self.threshold)))
        return flight * factor

    def should_drop(self, now_ns: int, cpu: int) -> bool:
        if cpu >= self.threshold:
            self.overload_ns = now_ns
        elif not (self.dropped_recently and self.overload_ns is not None):
            return False
        elif now_ns - self.overload_ns >= self.cool_off_ns:
            self.dropped_recently = False
            return False
        limit = self.max_flight(now_ns, cpu)
        return self.avg_flying > limit and self.flying > limit

    def allow(self, now_ns: int, cpu: int) -> bool:
        if self.should_drop(now_ns, cpu):
            self.dropped_recently = True
            return False
        self.flying += 1
        return True

    def finish(self, now_ns: int, start_ns: int, passed: bool) -> None:
        self.flying -= 1
        self.avg_flying = self.avg_flying * 0.9 + self.flying * 0.1
        if passed:
            epoch = now_ns // self.bucket_ns
            rt_us = math.ceil((now_ns - start_ns) / 1000)
            self.rt_us[epoch] = self.rt_us.get(epoch, 0) + rt_us
            self.rt_min[epoch] = min(self.rt_min.get(epoch, rt_us), rt_us)
            self.passes[epoch] = self.passes.get(epoch, 0) + 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_drops_exactly_when_go_zeros_conditions_hold(name, seed):
    """A random script of arrivals, completions, CPU readings and time steps; every
    decision of the shedder must be the model's."""
    rnd = random.Random(seed)
    clock, cpu = ManualClock(S), Cpu()
    s = _shedder(name, clock, cpu)
    model = GoZeroModel()
    open_tickets: list[tuple[object, int]] = []
    decisions = {True: 0, False: 0}
    try:
        for step in range(3000):
            action = rnd.random()
            if action < 0.45:
                expected = model.allow(clock(), cpu.value)
                ticket = s.allow()
                assert (ticket is not None) == expected, f"step {step}: model says allow={expected}"
                decisions[expected] += 1
                if ticket is not None:
                    open_tickets.append((ticket, clock()))
            elif action < 0.8 and open_tickets:
                ticket, start_ns = open_tickets.pop(rnd.randrange(len(open_tickets)))
                passed = rnd.random() < 0.9
                model.finish(clock(), start_ns, passed)
                ticket.done() if passed else ticket.fail()  # type: ignore[attr-defined]
            elif action < 0.95:
                clock.advance(ns=rnd.choice([0, 1, 3, 20, 70, 150, 400, 1500]) * MS + rnd.randrange(MS))
            else:
                cpu.value = rnd.choice([0, 500, 899, 900, 950, 1000])
        assert decisions[True] > 100 and decisions[False] > 100, decisions  # both sides were tested
        assert s.flying.count() == len(open_tickets) == model.flying
    finally:
        _drop(s)


def test_never_drops_below_the_cpu_threshold_without_a_recent_drop(name):
    clock, cpu = ManualClock(S), Cpu(899)
    with shedding(name, clock, cpu) as s:
        tickets = [s.allow() for _ in range(200)]
        for t in tickets[:100]:
            t.done()  # avg_flying climbs towards 100
        assert all(tickets) and s.allow() is not None
        cpu.value = 900
        assert s.allow() is None  # hot: 101 in flight, avg ~ 100 > max_flight 10


def test_cool_off_keeps_dropping_for_a_second_after_the_cpu_calms(name):
    clock, cpu = ManualClock(S), Cpu(1000)
    with shedding(name, clock, cpu) as s:
        held = [s.allow() for _ in range(30)]  # 30 in flight before anything looks hot
        cpu.value = 0
        for t in [s.allow() for _ in range(20)]:
            t.done()  # avg_flying ~ 26 (30 always left in flight)
        cpu.value = 1000
        assert s.allow() is None  # max_flight 10 * 0.1 = 1; the drop starts the cool-off
        cpu.value = 0
        clock.advance(0.999)
        assert s.allow() is None  # still hot: within 1 s of the last overloaded reading
        assert s.stats().hot
        clock.advance(0.001)
        assert s.allow() is not None  # cooled off
        cpu.value = 500
        assert s.allow() is not None  # and no drop since: not hot again until the CPU is
        assert len(held) == 30


def test_max_flight_comes_from_the_completed_buckets(name):
    """40 passes of 5 ms each in one 100 ms bucket: max_flight = 40 * 5 ms * 10/s / 1000 = 2."""
    clock, cpu = ManualClock(S), Cpu(900)
    with shedding(name, clock, cpu) as s:
        tickets = [s.allow() for _ in range(40)]
        clock.advance(0.005)
        for t in tickets:
            t.done()
        clock.set((clock() // (100 * MS) + 1) * 100 * MS)  # the next bucket: the last one completed
        stats = s.stats()
        assert (stats.max_pass, stats.min_rt_ms, stats.max_flight) == (40, 5.0, 2.0)
        assert stats.passes == 40 and stats.drops == 0
        assert overload_factor(1000, 900) == 0.1 and overload_factor(950, 900) == 0.5
        assert overload_factor(100, 900) == 1.0


def test_min_rt_is_the_shortest_response_not_the_lowest_bucket_mean(name):
    """1 ms and 9 ms requests in one bucket: go-zero's window says 5 ms (their mean); the
    shedder's distribution of response times says 1 ms, and max_flight is 5x lower."""
    clock, cpu = ManualClock(S), Cpu(900)
    with shedding(name, clock, cpu) as s:
        quick, slow = [s.allow() for _ in range(20)], [s.allow() for _ in range(20)]
        clock.advance(0.001)
        for t in quick:
            t.done()
        clock.advance(0.008)
        for t in slow:
            t.done()
        clock.set((clock() // (100 * MS) + 1) * 100 * MS)  # the next bucket: the last one completed
        stats = s.stats()
        assert (stats.max_pass, stats.min_rt_ms) == (40, 1.0)
        assert stats.max_flight == max(1.0, 40 * 1.0 * 10 / 1000)
        assert Shedder.attach(name, cpu=cpu, clock=clock).stats().min_rt_ms == 1.0


def test_admit_and_tickets(name):
    clock, cpu = ManualClock(S), Cpu(0)
    with shedding(name, clock, cpu) as s:
        held = [s.admit() for _ in range(5)]
        with s.admit():
            assert s.flying.count() == 6
        assert s.flying.count() == 5
        with pytest.raises(ZeroDivisionError), s.admit():
            1 / 0  # noqa: B018  -- a failure: out of flight, no pass
        assert s.stats().passes == 1
        for _ in range(20):
            s.admit().done()  # ends with 5 in flight: avg_flying climbs towards 5
        cpu.value = 1000
        with pytest.raises(OverloadedError, match="shedding"):
            s.admit()
        for t in held:
            t.done()
            t.done()  # a second end does nothing
        assert s.flying.count() == 0 and s.stats().passes == 26 and s.stats().drops == 1
        assert isinstance(OverloadedError("x"), shmwin.ShmwinError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cpu_threshold": 1000}, "cpu_threshold"),
        ({"cpu_threshold": -1}, "cpu_threshold"),
        ({"cpu_threshold": True}, "cpu_threshold"),
        ({"cpu_threshold": 9.5}, "cpu_threshold"),
        ({"cool_off": "later"}, "cool_off"),
        ({"max_processes": 0}, "max_processes"),
        ({"flying_span": "15ns"}, "flying_span"),
        ({"window": "5s", "buckets": 7}, "buckets"),
    ],
)
def test_bad_arguments_raise_and_create_nothing(name, kwargs, match):
    with pytest.raises(ValueError, match=match):
        Shedder(name, **kwargs)
    assert name not in shmwin.names() and name + ".flying" not in shmwin.names()
    assert name + ".rt" not in shmwin.names()


# -- host CPU -------------------------------------------------------------------------------------


@pytest.mark.unit
def test_host_cpu_from_proc_stat_lines():
    lines = iter(
        [
            "cpu  100 0 100 800 0 0 0 0 0 0\n",  # baseline
            "cpu  400 0 400 1000 0 0 0 0 0 0\n",  # +600 busy of +800: 750 millicpu
            "cpu  400 0 400 1200 0 0 0 0 0 0\n",  # +0 busy of +200: 0
        ]
    )
    clock = ManualClock(S)
    cpu = HostCpu(clock=clock, read_stat=lambda: next(lines), beta=0.5)
    assert cpu() == 0 and not cpu.known
    assert cpu() == 0  # within the interval: no new sample
    clock.advance(0.25)
    assert cpu() == 750 and cpu.known  # the first measurement is taken as it is
    clock.advance(0.25)
    assert cpu() == 375  # 750 * 0.5 + 0 * 0.5
    assert busy_and_total("cpu 1 2 3 4 5 6 7 8 9 10") == (
        1 + 2 + 3 + 6 + 7 + 8,
        1 + 2 + 3 + 6 + 7 + 8 + 4 + 5,
    )
    with pytest.raises(ValueError, match="cpu"):
        busy_and_total("intr 1 2 3")
    with pytest.raises(ValueError, match="beta"):
        HostCpu(beta=1)


def test_host_cpu_reads_the_real_proc_stat():
    clock = ManualClock(S)
    cpu = HostCpu(clock=clock)
    cpu()
    deadline = time.monotonic() + 10
    while not cpu.known:  # waits for the kernel to count a tick, not for a time boundary
        assert time.monotonic() < deadline
        x = sum(i * i for i in range(20000))  # burn a little CPU so ticks pass
        assert x
        clock.advance(0.25)
        cpu()
    assert 0 <= cpu() <= 1000


# -- in flight across processes --------------------------------------------------------------------

HOLDER = """
import sys
from shmwin.overload.inflight import InFlight
flying = InFlight(sys.argv[1])
stamps = [flying.begin() for _ in range(int(sys.argv[2]))]
for stamp in stamps[: int(sys.argv[3])]:
    flying.end(stamp)
print("ready", flush=True)
sys.stdin.read()  # held until killed (or stdin closes)
"""


def _holder(name: str, begun: int, ended: int = 0) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), name, str(begun), str(ended)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_in_flight_forgets_sigkilled_processes(name):
    flying = InFlight(name)
    procs = [_holder(name, 3), _holder(name, 2), _holder(name, 4, ended=4)]
    try:
        mine = flying.begin()
        assert flying.count(rescan=True) == 3 + 2 + 0 + 1
        assert sorted(n for _, n in flying.processes()) == [0, 1, 2, 3]
        for p in procs[:2]:
            p.send_signal(signal.SIGKILL)
            p.wait()  # reaped: the pidfd has long said so
        assert flying.count() == 1  # no rescan needed: known processes are polled every time
        assert len(flying.window.keys()) == 2  # the dead ones' keys were cleared
        flying.end(mine)
        assert flying.count() == 0
        procs[2].stdin.close()  # a clean exit with nothing in flight
        procs[2].wait()
        assert flying.count(rescan=True) == 0 and flying.processes() == [(os.getpid(), 0)]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        flying.unlink()
        flying.close()


def test_in_flight_from_many_threads_while_a_process_dies(name):
    """gthread workers: threads begin, count and end at once; a holder is killed meanwhile."""
    import threading

    flying = InFlight(name, rescan="1ns")  # every count() rescans: the most concurrent path
    holder = _holder(name, 5)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(300):
                stamp = flying.begin()
                assert flying.count() >= 1
                flying.end(stamp)
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        holder.kill()
        holder.wait()
        for t in threads:
            t.join(120)
        assert errors == []
        assert flying.count(rescan=True) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        flying.unlink()
        flying.close()


def test_in_flight_in_a_forked_child_and_across_buckets(name):
    clock = ManualClock(S)
    flying = InFlight(name, clock=clock)
    try:
        stamp = flying.begin()
        pid = os.fork()
        if pid == 0:  # the child counts as a process of its own
            code = 1
            try:
                s2 = flying.begin()
                code = 0 if flying.count(rescan=True) == 2 else 3
                flying.end(s2)
            finally:
                os._exit(code)
        assert os.waitpid(pid, 0)[1] == 0
        assert flying.count(rescan=True) == 1
        clock.advance(150)  # the request ends 2.5 minutes later, in another bucket
        flying.end(stamp)
        assert flying.count() == 0
        clock.advance(600)  # its +1 and -1 aged out together: never a -1 alone
        assert flying.window.total(key=shmwin.overload.inflight.self_key()) == 0
        long = flying.begin()
        clock.advance(601)  # longer than the span: the +1 is gone, the -1 is not written
        flying.end(long)
        assert flying.count() == 0
    finally:
        flying.unlink()
        flying.close()


# -- the middleware, in process ------------------------------------------------------------------


def _wsgi_call(app, path="/"):
    seen: dict[str, object] = {}

    def start_response(status, headers, exc_info=None):
        seen["status"], seen["headers"] = status, dict(headers)

    body = app({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, start_response)
    try:
        data = b"".join(body)
    finally:
        getattr(body, "close", lambda: None)()
    return seen["status"], seen["headers"], data


def test_wsgi_middleware(name):
    clock, cpu = ManualClock(S), Cpu(0)
    with shedding(name, clock, cpu) as s:

        def inner(environ, start_response):
            if environ["PATH_INFO"] == "/boom":
                raise RuntimeError("boom")
            status = "503 Service Unavailable" if environ["PATH_INFO"] == "/busy" else "200 OK"
            start_response(status, [("Content-Type", "text/plain")])
            assert s.flying.count() == 1  # in flight while the app runs
            return iter([b"a", b"b"])

        app = ShedderMiddleware(inner, s, retry_after=2)
        assert _wsgi_call(app)[::2] == ("200 OK", b"ab")
        assert _wsgi_call(app, "/busy")[0].startswith("503")  # the app's own 503: a failure
        with pytest.raises(RuntimeError):
            _wsgi_call(app, "/boom")
        assert s.flying.count() == 0 and s.stats().passes == 1
        held = [s.allow() for _ in range(5)]
        for _ in range(20):
            s.allow().done()  # avg_flying ~ 5
        cpu.value = 1000
        status, headers, body = _wsgi_call(app)
        assert status == "503 Service Unavailable" and headers["Retry-After"] == "2"
        assert b"shedding" in body and s.stats().drops == 1
        assert len(held) == 5
        with pytest.raises(TypeError):
            ShedderMiddleware(inner, s, cpu=cpu)  # options only for a shedder given by name
        with pytest.raises(ValueError, match="retry_after"):
            ShedderMiddleware(inner, s, retry_after=-1)


def test_asgi_middleware(name):
    clock, cpu = ManualClock(S), Cpu(0)
    s = _shedder(name, clock, cpu)

    async def inner(scope, receive, send):
        if scope["type"] == "lifespan":
            await send({"type": "lifespan.startup.complete"})
            return
        assert s.flying.count() == 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def call(app, scope_type="http"):
        sent = []

        async def send(message):
            sent.append(message)

        async def receive():
            return {"type": "http.request"}

        await app({"type": scope_type}, receive, send)
        return sent

    try:
        app = ASGIShedderMiddleware(inner, s)
        sent = asyncio.run(call(app))
        assert sent[0]["status"] == 200 and s.stats().passes == 1 and s.flying.count() == 0
        assert asyncio.run(call(app, "lifespan")) == [{"type": "lifespan.startup.complete"}]
        held = [s.allow() for _ in range(5)]
        for _ in range(20):
            s.allow().done()
        cpu.value = 1000
        sent = asyncio.run(call(app))
        assert sent[0]["status"] == 503 and (b"retry-after", b"1") in sent[0]["headers"]
        assert len(held) == 5
    finally:
        _drop(s)


# -- under a real gunicorn ----------------------------------------------------------------------------


def _get(port: int, path: str = "/") -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=60) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


@pytest.mark.integration
def test_gunicorn_sigkilled_workers_leave_nothing_in_flight_and_shedding_answers_503(name, tmp_path):
    import threading

    from support.servers import Server, free_port, python_module

    gunicorn_config = pytest.importorskip("gunicorn.config")
    hold, cpu_file = tmp_path / "hold", tmp_path / "cpu"
    hold.mkdir()
    cpu_file.write_text("0")
    clock = ManualClock(S, path=tmp_path / "clock")
    port = free_port()
    env = {
        "SHMWIN_TEST_NAME": name, "SHMWIN_CLOCK": str(tmp_path / "clock"), "SHMWIN_CPU": str(cpu_file),
        "SHMWIN_HOLD": str(hold), "SHMWIN_LOG_DIR": str(tmp_path),
    }  # fmt: skip
    args = ["-w", "4", "-b", f"127.0.0.1:{port}", "wsgi_shed:app"]
    if hasattr(gunicorn_config, "ControlSocket"):
        args.append("--no-control-socket")
    server = Server(python_module("gunicorn", *args), port, env)
    clients: list[threading.Thread] = []

    def hold_one() -> None:
        def run() -> None:
            with contextlib.suppress(OSError):  # its worker was killed
                _get(port, "/hold")

        clients.append(threading.Thread(target=run, daemon=True))
        clients[-1].start()

    def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + 60
        while not predicate():
            assert time.monotonic() < deadline, f"timed out waiting for {what}\n{server.output()}"
            time.sleep(0.02)

    try:
        for _ in range(4):
            hold_one()
        wait_for(lambda: len(list(hold.iterdir())) == 4, "4 workers holding a request")
        holders = [int(p.name) for p in hold.iterdir()]
        seen = Shedder.attach(name, clock=clock)
        assert seen.flying.count(rescan=True) == 4
        for pid in holders:
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: seen.flying.count() == 0, "the killed workers' requests to leave the count")
        for p in hold.iterdir():
            p.unlink()
        wait_for(lambda: _get(port)[0] == 200, "new workers")
        # three workers held again (3 in flight); the fourth serves alone, with the CPU at 100 %
        for _ in range(3):
            hold_one()
        wait_for(lambda: len(list(hold.iterdir())) == 3, "3 workers holding a request")
        clock.advance(6)  # an empty window: max_flight = 1 * 1000 ms * 10/s / 1000 * 0.1 = 1
        cpu_file.write_text("1000")
        answers = [_get(port) for _ in range(5)]
        # the free worker's avg_flying after k requests ended with 3 in flight: 3 * (1 - 0.9^k)
        assert [status for status, _ in answers] == [200, 200, 200, 200, 503], server.output()
        assert answers[-1][1]["Retry-After"] == "1"
        assert seen.flying.count() == 3 and seen.stats().drops == 1
        (hold / "release").write_text("")
        for thread in clients:
            thread.join(60)
        # a worker ends its ticket when gunicorn closes the response, just after the last byte
        wait_for(lambda: seen.flying.count() == 0, "the released requests to end")
        seen.close()
    finally:
        (hold / "release").write_text("")
        server.stop()
        shmwin.unlink(name)
        shmwin.unlink(name + ".flying")
        shmwin.unlink(name + ".rt")
