"""Breaker: the SRE formula at its boundaries (seeded RNG, manual clock, binomial error),
what counts as a failure, shared evidence between processes and hosts (Redis)."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.helpers import run_python

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.redis.testing import ServerTime
from shmwin.overload.breaker import Breaker, BreakerOpenError, drop_ratio, is_breaker

S = 1_000_000_000


class Constant:
    """An RNG stub: every draw is ``value``."""

    def __init__(self, value: float):
        self.value = value

    def random(self) -> float:
        return self.value


def _breaker(name, clock=None, rng=None, **kwargs) -> Breaker:
    return Breaker(name, clock=clock or ManualClock(S), rng=rng or random.Random(12345), **kwargs)


@contextmanager
def breaking(name, clock=None, rng=None, **kwargs) -> Iterator[Breaker]:
    """A breaker for the test (as :func:`_breaker` makes it), unlinked and closed after it."""
    b = _breaker(name, clock, rng, **kwargs)
    try:
        yield b
    finally:
        b.unlink()
        b.close()


def _fill(b: Breaker, accepts: int, failures: int) -> None:
    for _ in range(accepts):
        b.accept()
    for _ in range(failures):
        b.reject()


# -- the formula -------------------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize(
    ("accepts", "total", "expected"),
    [
        (0, 0, 0.0),
        (0, 5, 0.0),  # total <= protection: never
        (0, 6, 1 / 7),  # the first request past the protection
        (100, 100, 0.0),  # accepts == total
        (0, 100, 95 / 101),  # all failing
        (20, 100, (100 - 5 - 30) / 101),
        (64, 100, 0.0),  # k * accepts > total - protection: clamped at 0
    ],
)
def test_drop_ratio(accepts, total, expected):
    assert drop_ratio(accepts, total, 1.5, 5) == pytest.approx(expected)


def _measure(b: Breaker, calls: int, accepts: int, total: int) -> tuple[int, float, float]:
    """Call allow() ``calls`` times with time frozen; every drop is a request too, so the
    formula moves as drops add up. Returns (drops, expected drops, variance) -- the sum of
    the per-call probabilities and of p(1 - p): a Poisson-binomial count."""
    drops, expected, variance = 0, 0.0, 0.0
    for _ in range(calls):
        p = drop_ratio(accepts, total + drops, 1.5, 5)
        expected += p
        variance += p * (1 - p)
        drops += not b.allow()
    return drops, expected, variance


@pytest.mark.parametrize(
    ("accepts", "failures"),
    [(0, 0), (0, 5), (100, 0), (20, 80), (0, 6), (0, 100), (400, 600)],
    ids=["empty", "at-protection", "accepts-eq-total", "interior", "past-protection", "all-failing", "wide"],
)
def test_measured_drops_match_the_formula_within_binomial_error(name, accepts, failures):
    with breaking(name) as b:
        _fill(b, accepts, failures)
        drops, expected, variance = _measure(b, 4000, accepts, accepts + failures)
        if variance == 0:
            assert drops == round(expected)  # p is exactly 0 (or 1) at every call
        else:
            assert abs(drops - expected) <= 4 * math.sqrt(variance), (drops, expected, variance)
        stats = b.stats()  # every drop was counted as a request, in the shared window
        assert (stats.accepts, stats.failures, stats.drops) == (accepts, failures, drops)
        assert stats.drop_ratio == pytest.approx(drop_ratio(accepts, stats.total, 1.5, 5))


def test_a_draw_below_p_drops_and_one_at_or_above_passes(name):
    with breaking(name, rng=Constant(1 / 7 - 1e-9)) as b:
        _fill(b, 0, 6)
        assert not b.allow()  # p = 1/7
        b.unlink()
        b.close()
        b = _breaker(name, rng=Constant(1 / 7))
        _fill(b, 0, 6)
        assert b.allow()


def test_custom_k_and_protection(name):
    with breaking(name, k=2.0, protection=0, rng=Constant(0.3)) as b:
        b.reject()
        assert not b.allow()  # (1 - 0 - 0) / 2 = 0.5 > 0.3: dropped, a request too
        b.accept()
        assert b.allow()  # (3 - 0 - 2 * 1) / 4 = 0.25 <= 0.3


def test_failures_age_out_with_the_window(name):
    clock = ManualClock(S)
    with breaking(name, clock=clock, rng=Constant(0.0), window="10s", buckets=40) as b:
        _fill(b, 0, 20)
        assert not b.allow()
        clock.advance(9.5)
        assert not b.allow()  # still inside the 10 s window
        clock.advance(0.75)
        assert b.stats().total == 1  # only the drop of 9.5 s ago is left
        assert b.allow()


def test_recovers_when_the_backend_does(name):
    """All failing, then the backend heals: with a real (seeded) RNG a share of calls still
    goes through, each success weighs k, and the drop ratio falls back to 0."""
    clock = ManualClock(S)
    with breaking(name, clock=clock) as b:
        _fill(b, 0, 50)
        assert b.stats().drop_ratio > 0.8
        passed = []
        for _ in range(3000):  # 30 s in steps of 10 ms: the drops of the bad time age out too
            clock.advance(0.01)
            if b.allow():
                b.accept()
                passed.append(1)
            else:
                passed.append(0)
        assert sum(passed[:100]) >= 1  # a share got through while it was still failing
        assert b.stats().drop_ratio == 0  # the successes outweigh what is left of the failures
        assert all(passed[-100:]) and all(b.allow() for _ in range(100))


# -- what counts as a failure --------------------------------------------------------------------


def test_call_decorator_and_context_manager_record_outcomes(name):
    not_key_error = lambda exc: not isinstance(exc, KeyError)  # noqa: E731
    with breaking(name, is_failure=not_key_error, acceptable=lambda r: r != "bad") as b:

        @b
        def work(result, exc=None):
            if exc is not None:
                raise exc
            return result

        assert work("good") == "good"  # accepted
        assert work("bad") == "bad"  # returned, but not acceptable: a failure
        with pytest.raises(KeyError):
            work(None, KeyError("missing"))  # an exception that is not a failure: accepted
        with pytest.raises(ValueError):
            work(None, ValueError("boom"))  # a failure
        with b:
            pass  # accepted
        with pytest.raises(RuntimeError), b:
            raise RuntimeError("down")  # a failure
        with pytest.raises(KeyboardInterrupt), b:
            raise KeyboardInterrupt  # not an Exception: counts as nothing
        assert b.call(lambda x: x * 2, 21) == 42
        stats = b.stats()
        assert (stats.accepts, stats.failures, stats.drops) == (4, 3, 0)


def test_async_decorator_and_context_manager(name):
    with breaking(name) as b:

        @b
        async def fetch(fail: bool) -> str:
            await asyncio.sleep(0)
            if fail:
                raise ConnectionError("down")
            return "ok"

        async def main() -> None:
            assert await fetch(False) == "ok"
            with pytest.raises(ConnectionError):
                await fetch(True)
            async with b:
                pass
            with pytest.raises(asyncio.CancelledError):
                async with b:
                    raise asyncio.CancelledError  # cancellation says nothing about the backend

        asyncio.run(main())
        assert asyncio.iscoroutinefunction(fetch)
        stats = b.stats()
        assert (stats.accepts, stats.failures) == (2, 1)


def test_a_dropped_call_raises_and_never_runs(name):
    b = _breaker(name, rng=Constant(0.0))
    ran = []
    try:
        _fill(b, 0, 10)
        with pytest.raises(BreakerOpenError, match="dropped"):
            b.call(ran.append, 1)
        with pytest.raises(BreakerOpenError), b:
            ran.append(2)
        assert ran == []
        assert isinstance(BreakerOpenError("x"), shmwin.ShmwinError)
        assert b.stats().drops == 2
    finally:
        b.unlink()
        b.close()


# -- shared evidence ----------------------------------------------------------------------------


def test_another_process_failures_reach_this_one_after_refresh(name, tmp_path):
    """An unrelated process records the failures; this one drops once it re-reads (its
    cached view lasts one ``refresh`` of its clock, here a manual one shared by file)."""
    clock_path = tmp_path / "clock"
    clock = ManualClock(S, path=clock_path)
    with breaking(name, clock=clock, rng=Constant(0.0), refresh="1ms") as b:
        assert b.allow()  # reads the (empty) shared counts
        run_python(
            """
            import sys
            from shmwin import ManualClock
            from shmwin.overload.breaker import Breaker
            b = Breaker(sys.argv[1], clock=ManualClock(path=sys.argv[2]))
            for _ in range(10):
                b.reject()
            b.close()
            """,
            name,
            str(clock_path),
        )
        assert b.allow()  # within refresh: this process has not looked again
        clock.advance(ns=1_000_000)
        assert not b.allow()  # 10 failures of the other process: p = 5/11 > 0
        assert b.stats().failures == 10


def test_attach_and_describe(name):
    with breaking(name) as b:
        _fill(b, 3, 7)
        other = Breaker.attach(name, clock=ManualClock(S))
        info = other.describe()
        other.close()
        assert info == {
            "kind": "breaker", "name": name, "window_s": 10.0, "buckets": 40, "k": 1.5, "protection": 5,
            "drop_ratio": drop_ratio(3, 10, 1.5, 5), "accepts": 3, "failures": 7, "drops": 0, "total": 10,
        }  # fmt: skip
        assert shmwin.overload.breaker.describe(name)["kind"] == "breaker"  # (its clock: the counts aged)
        assert is_breaker(b.window)


def test_attach_refuses_a_plain_window(name):
    with Window(name, span=10, buckets=10) as w:
        try:
            with pytest.raises(shmwin.GeometryMismatchError, match="not a breaker"):
                Breaker.attach(name)
            assert shmwin.overload.breaker.describe(name) is None
        finally:
            w.unlink()


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"k": 0}, ValueError),
        ({"k": float("nan")}, ValueError),
        ({"k": True}, ValueError),
        ({"protection": -1}, ValueError),
        ({"protection": 1.5}, ValueError),
        ({"refresh": "soon"}, ValueError),
        ({"rng": object()}, TypeError),
        ({"is_failure": "yes"}, TypeError),
        ({"window": "10s", "buckets": 7}, ValueError),
    ],
)
def test_bad_arguments_raise_and_create_nothing(name, kwargs, error):
    with pytest.raises(error):
        Breaker(name, **kwargs)
    assert name not in shmwin.names()


# -- across hosts ---------------------------------------------------------------------------------


def test_two_hosts_share_one_breaker_on_redis(redis_server, name):
    pytest.importorskip("redis")
    clock = ManualClock(S)
    host_a = Breaker(name, clock=ServerTime(clock), rng=Constant(0.0), backend=redis_server.url)
    host_b = Breaker(name, clock=ServerTime(clock), rng=Constant(0.0), backend=redis_server.url)
    try:
        assert host_b.allow()
        for _ in range(6):
            host_a.reject()
        assert host_b.allow()  # its view is one refresh old
        clock.advance(ns=1_000_000)
        assert not host_b.allow()  # host A's failures: 6 > protection
        assert host_a.stats() == host_b.stats()
        assert host_b.stats().failures == 6 and host_b.stats().drops == 1
        clock.advance(10.25)
        assert host_b.allow() and host_b.stats().total == 0  # aged out on the server too
    finally:
        host_a.unlink()
        host_a.close()
        host_b.close()


# -- a real server -------------------------------------------------------------------------------


class Upstream:
    """A local stub upstream answering ``status``; with ``hold`` set, each request waits until
    that many are in at once (so that many sync workers must be serving at the same time)."""

    def __init__(self) -> None:
        import http.server
        import threading

        stub = self
        self.status, self.calls, self.hold = 500, 0, None
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with stub._lock:
                    stub.calls += 1
                    barrier = stub.hold
                if barrier is not None:
                    barrier.wait(timeout=60)
                self.send_response(stub.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.integration
def test_gunicorn_workers_share_the_evidence_and_recover(name, tmp_path):
    """4 workers, a failing upstream: the server stops calling it after 6 failures in all --
    what one process needs (protection 5) -- although no worker saw more than 3 of them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from support.servers import Server, free_port, get, python_module

    upstream = Upstream()
    clock = ManualClock(S, path=tmp_path / "clock")
    port = free_port()
    env = {
        "SHMWIN_TEST_NAME": name, "SHMWIN_CLOCK": str(tmp_path / "clock"), "SHMWIN_UPSTREAM": upstream.url,
        "SHMWIN_LOG_DIR": str(tmp_path),
    }  # fmt: skip
    args = ["-w", "4", "-b", f"127.0.0.1:{port}", "wsgi_breaker:app"]
    if hasattr(pytest.importorskip("gunicorn.config"), "ControlSocket"):  # gunicorn >= 24
        args.append("--no-control-socket")
    server = Server(python_module("gunicorn", *args), port, env)
    try:
        # four requests held at the upstream together: four workers, one failure each
        upstream.hold = threading.Barrier(4)
        with ThreadPoolExecutor(4) as pool:
            first = list(pool.map(lambda _: get(port), range(4)))
        upstream.hold = None
        assert [status for status, _ in first] == [502] * 4, server.output()
        assert len({pid for _, pid in first}) == 4  # every worker holds a single failure of its own
        # then one request at a time, each after a refresh: 2 more failures, then drops
        statuses = []
        for _ in range(12):
            clock.advance(ns=2_000_000)
            statuses.append(get(port)[0])
        assert statuses == [502, 502] + [503] * 10
        assert upstream.calls == 6  # one process alone would need 6; four unshared ones, 24
        # the upstream heals; the breaker lets calls through once the bad window has passed
        upstream.status = 200
        clock.advance(5)
        assert get(port)[0] == 503  # half a window on, the failures still count
        clock.advance(5.5)
        served = []
        for _ in range(20):
            clock.advance(ns=2_000_000)
            served.append(get(port))
        assert [status for status, _ in served] == [200] * 20
        assert upstream.calls == 26
        seen = Breaker.attach(name, clock=clock)
        stats = seen.stats()
        seen.close()
        assert (stats.accepts, stats.failures, stats.drop_ratio) == (20, 0, 0)
    finally:
        server.stop()
        upstream.close()
        shmwin.unlink(name)
