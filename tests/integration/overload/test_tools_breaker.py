"""Breakers, shedders and adaptive limiters in the tools: `shmwin ls` tags them, `show` gives
what each decides by, and the Prometheus export carries it -- written by other processes,
read by the CLI in processes of its own.

The writers' clocks are ManualClocks set minutes in the past, and their windows span an
hour: the CLI reads with the real clock, and what was written sits in completed buckets
well inside the window whenever the CLI runs, however slow the machine is.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli_support import ENV, cells, cli, promtool_check
from support.helpers import run_python

import shmwin
from shmwin import Limiter, Window
from shmwin.overload.adaptive import AdaptiveLimiter

BREAKER_WRITER = """
import sys, time
from shmwin import Breaker, ManualClock

class Always:  # every draw below the drop probability: drops whenever p > 0
    def random(self):
        return 0.0

clock = ManualClock(max(time.monotonic_ns() - 120 * 10**9, 0))
breaker = Breaker(sys.argv[1], window="1h", buckets=60, clock=clock, rng=Always())
for _ in range(10):
    breaker.accept()
for _ in range(20):
    breaker.reject()
assert [breaker.allow() for _ in range(3)] == [False] * 3
breaker.close()
"""

# 600 requests of 250 ms in one bucket, then 4 drops while the host is hot in the next;
# then 5 requests held in flight until the test closes stdin (or kills the process)
SHEDDER_HOLDER = """
import sys, time
from shmwin import ManualClock
from shmwin.overload.shedder import Shedder

cpu = [0]
clock = ManualClock(max(time.monotonic_ns() - 180 * 10**9, 0))
shedder = Shedder(sys.argv[1], window="1h", buckets=60, clock=clock, cpu=lambda: cpu[0])
tickets = [shedder.allow() for _ in range(600)]
clock.advance(0.25)
for t in tickets:
    t.done()
clock.advance(60)
held = [shedder.allow() for _ in range(5)]
assert None not in held
cpu[0] = 950
assert [shedder.allow() for _ in range(4)] == [None] * 4
print("ready", flush=True)
sys.stdin.read()
"""


def _prom(name: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = cli("export", name, "--format", "prometheus").stdout
    promtool_check(text)
    return {
        (f.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "window"))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("window") == name
    }


def _shown(name: str) -> dict:
    return json.loads(cli("show", name, "--json").stdout)


def _roles(*patterns: str) -> dict[str, str | None]:
    return {r["name"]: r["role"] for r in json.loads(cli("ls", "--json", *patterns).stdout)["windows"]}


def test_a_breaker_written_by_another_process(name):
    run_python(BREAKER_WRITER, name)
    try:
        snap = _shown(name)
        assert snap["role"] == "breaker"
        ratio = (33 - 5 - 1.5 * 10) / 34  # the SRE formula over accepts 10, total 33
        assert snap["breaker"] == {
            "drop_ratio": pytest.approx(ratio), "accepts": 10, "failures": 20, "drops": 3, "total": 33,
            "k": 1.5, "protection": 5, "window_s": 3600.0,
        }  # fmt: skip
        text = cli("show", name).stdout
        assert text.startswith(f"{name} (breaker)\n")
        assert f"drop ratio {ratio:.3f}   accepts 10   total 33 over 1h" in text
        assert "(failures 20, drops 3)" in text
        prom = _prom(name)
        assert prom[("shmwin_breaker_drop_ratio", ())] == pytest.approx(ratio)
        requests = {dict(k[1])["outcome"]: v for k, v in prom.items() if k[0] == "shmwin_breaker_requests"}
        assert requests == {"accepted": 10, "failed": 20, "dropped": 3}  # their sum: the total
        assert prom[("shmwin_window_value", (("field", "drops"), ("resolution", "1h/1m")))] == 3
    finally:
        shmwin.unlink(name)


def _holder(name: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SHEDDER_HOLDER), name],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def test_a_shedder_with_requests_in_flight_in_another_process(name):
    holder = _holder(name)
    flying = name + ".flying"
    try:
        snap = _shown(name)
        assert snap["role"] == "shedder"
        view = snap["shedder"]
        assert view["in_flight"] == 5 and view["processes"] == [[holder.pid, 5]]
        assert (view["passes"], view["drops"], view["recent_drops"]) == (600, 4, 0)
        assert view["max_pass"] == 600 and view["min_rt_ms"] == 250.0
        assert view["max_in_flight"] == pytest.approx(600 * 250 / 60_000)  # 250 ms x 600 per minute
        assert 0 <= view["cpu"] <= 1000  # the host's, measured by the CLI
        text = cli("show", name).stdout
        assert text.startswith(f"{name} (shedder)\n")
        assert f"in flight 5 in 1 process (pid {holder.pid}: 5)" in text
        assert "max in flight 2.50 = max pass 600 per 1m × min RT 250.000ms" in text
        assert "passes 600   drops 4 over 1h (0 in the last 1s)" in text and "host cpu " in text
        assert f"in flight 5 in 1 process (pid {holder.pid}: 5)" in cli("show", flying).stdout
        prom = _prom(name)
        assert prom[("shmwin_shedder_in_flight", ())] == 5
        assert prom[("shmwin_shedder_passes", ())] == 600
        assert prom[("shmwin_shedder_drops", ())] == 4
        assert prom[("shmwin_shedder_min_rt_seconds", ())] == 0.25
        assert prom[("shmwin_shedder_max_in_flight", ())] == pytest.approx(2.5)

        holder.send_signal(signal.SIGKILL)
        holder.wait()
        after = _shown(name)["shedder"]
        assert after["in_flight"] == 0 and after["processes"] == []  # a dead worker's requests are not
        assert _prom(name)[("shmwin_shedder_in_flight", ())] == 0
        with Window.attach(flying) as w:
            assert len(w.keys()) == 1  # ... and the inspector cleared nothing: it writes nothing
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        shmwin.unlink(name)
        shmwin.unlink(flying)
        shmwin.unlink(name + ".rt")


def test_an_adaptive_limiter_shows_its_effective_rate(name):
    limiter = AdaptiveLimiter(name, "100/second;6000/minute")  # its own NAME.health, role recorded
    try:
        run_python(
            """
            import sys
            from shmwin.overload.adaptive import AdaptiveLimiter
            limiter = AdaptiveLimiter.attach(sys.argv[1])
            limiter.record(ok=True, n=5)
            limiter.record(ok=False, n=15)  # 75 % errors: past "bad", the floor (10 %)
            limiter.close()
            """,
            name,
        )
        snap = _shown(name)
        assert snap["role"] == "adaptive" and snap["kind"] == "limiter"
        view = snap["adaptive"]
        assert view["rates"] == ["100/second", "6000/minute"] and view["effective"] == [10, 600]
        assert (view["factor"], view["ok"], view["errors"], view["cost"]) == (0.1, 5, 15, 10_000)
        text = cli("show", name).stdout
        assert text.startswith(f"{name} (adaptive limiter)\n")
        assert "effective now 10/second of 100/second, 600/minute of 6000/minute (× 0.10)" in text
        assert "errors 75.0% of 20 outcomes" in text
        prom = _prom(name)
        limits = {dict(k[1])["resolution"]: v for k, v in prom.items() if k[0] == "shmwin_adaptive_limit"}
        assert limits == {"1s/50ms": 10, "1m/3s": 600}
        assert prom[("shmwin_adaptive_factor", ())] == 0.1
        assert _shown(name + ".health")["health"] == {"of": name}
    finally:
        limiter.unlink()
        limiter.close()


def test_roles_are_recorded_not_guessed(make_name):
    """A window of the user's with a breaker's fields, or named like a health window, is a
    plain window: only what shmwin's parts make carries a role."""
    breaker_like = Window(make_name("lookalike"), span=60, buckets=6, fields=("accepts", "failures", "drops"))
    health_like = Window(make_name("x") + ".health", span=10, buckets=10, fields=("ok", "error"))
    try:
        for w in (breaker_like, health_like):
            snap = _shown(w.name)
            assert snap["role"] is None and snap["kind"] == "window", snap
    finally:
        for w in (breaker_like, health_like):
            w.unlink()
            w.close()


def test_ls_tags_what_each_window_is_for(make_name):
    breaker, shedder, adaptive, plain, limiter = (
        make_name(s) for s in ("breaker", "shedder", "adaptive", "plain", "limiter")
    )
    run_python(BREAKER_WRITER, breaker)
    holder = _holder(shedder)
    made = [
        AdaptiveLimiter(adaptive, "100/second"),
        Window(plain, fields=("accepts", "failures")),  # a breaker's fields, but not all of them
        Limiter(limiter, "7/second"),  # beside a health window, but not in units of 1000
        Window(limiter + ".health", fields=("ok", "error")),
    ]
    try:
        pattern = make_name("*")
        assert _roles(pattern) == {
            breaker: "breaker", shedder: "shedder", shedder + ".flying": "in-flight",
            shedder + ".rt": "distribution", adaptive: "adaptive", adaptive + ".health": "health",
            plain: None, limiter: None, limiter + ".health": None, limiter + ".decisions": "decisions",
        }  # fmt: skip
        narrow = cli("ls", pattern, columns=80).stdout.splitlines()
        assert all(cells(line) <= 80 for line in narrow)  # names cut in the middle, kinds kept
        assert sorted(line.split()[1] for line in narrow[1:11]) == sorted(
            ["breaker", "shedder", "in-flight", "distribution", "adaptive", "health", "window", "limiter",
             "window", "decisions"]
        )
        for columns in (160, 240):
            out = cli("ls", pattern, columns=columns).stdout
            rows = [line.split() for line in out.splitlines()[1:] if line.startswith("t-")]
            kinds = {row[0]: row[1] for row in rows}
            assert kinds == {
                breaker: "breaker", shedder: "shedder", shedder + ".flying": "in-flight",
                shedder + ".rt": "distribution", adaptive: "adaptive", adaptive + ".health": "health",
                plain: "window", limiter: "limiter", limiter + ".health": "window",
                limiter + ".decisions": "decisions",
            }  # fmt: skip
        for n in (plain, limiter):
            assert _shown(n)["role"] is None
    finally:
        holder.kill()
        holder.wait()
        for x in made:
            x.unlink()
            x.close()
        for n in (breaker, shedder, shedder + ".flying", shedder + ".rt"):
            shmwin.unlink(n)


def test_show_fits_80_columns_for_each_role(make_name):
    """Long names, many processes in flight: every line fits, nothing is lost but by clipping."""
    breaker, shedder = make_name("breaker-" + "b" * 50), make_name("shedder-" + "s" * 50)
    run_python(BREAKER_WRITER, breaker)
    holders = [_holder(shedder)]
    try:
        for columns in (80, 100):
            out = cli("show", breaker, shedder, shedder + ".flying", columns=columns).stdout
            too_long = [line for line in out.splitlines() if cells(line) > columns]
            assert not too_long, (columns, too_long)
            assert "drop ratio" in out and "in flight 5" in out and "max in flight" in out
    finally:
        for h in holders:
            h.kill()
            h.wait()
        for n in (breaker, shedder, shedder + ".flying", shedder + ".rt"):
            shmwin.unlink(n)


def test_a_breaker_on_redis_in_ls_show_and_export(redis_server, name):
    from shmwin import Breaker

    url = redis_server.url
    breaker = Breaker(name, window="1h", buckets=60, backend=url)  # an hour: read well inside it
    try:
        for _ in range(2):
            breaker.accept()
        for _ in range(9):
            breaker.reject()
        listed = json.loads(cli("ls", "--json", "--backend", url, name).stdout)["windows"]
        assert [r["role"] for r in listed] == ["breaker"]
        snap = json.loads(cli("show", name, "--json", "--backend", url).stdout)
        assert (snap["breaker"]["accepts"], snap["breaker"]["total"]) == (2, 11)
        assert snap["breaker"]["drop_ratio"] == pytest.approx((11 - 5 - 3) / 12)
        text = cli("export", name, "--format", "prometheus", "--backend", url).stdout
        promtool_check(text)
        assert f'shmwin_breaker_requests{{outcome="failed",window="{name}"}} 9.0' in text
    finally:
        breaker.unlink()
        breaker.close()
