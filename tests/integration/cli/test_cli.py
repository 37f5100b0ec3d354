"""The `shmwin` command, run as a user runs it: subprocesses against live segments."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import struct
import subprocess
import sys
import time

import pytest
from support.cli_support import cells, cli, hold, promtool_check, release
from support.helpers import FUTEX_TID_MASK, FUTEX_WAITERS, lock_words, run_python, stop_inside, wait_stopped

import shmwin
from shmwin import Limiter, ManualClock, Window
from shmwin.backends.shm import layout
from shmwin.inspector import snapshots


def _keep_adding(name: str, stop) -> None:
    w = Window.attach(name)
    while not stop.is_set():
        w.add(1, "ok")
    w.close()


@pytest.fixture
def busy(name):
    """A window that another process is writing while the test runs the CLI."""
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    w = Window(name, resolutions=("1m/1s", "1h/1m"), fields=("ok", "err"))
    w.add(7, "err")
    writer = ctx.Process(target=_keep_adding, args=(name, stop))
    writer.start()
    yield w, stop, writer
    stop.set()
    writer.join(30)
    w.close()
    w.unlink()


def _listing(*args: str) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads(cli("ls", "--json", *args).stdout)["windows"]}


def test_ls_and_show_against_a_live_writer(busy, name):
    w, stop, writer = busy
    listed = json.loads(cli("ls", "--json").stdout)
    row = {r["name"]: r for r in listed["windows"]}[name]
    assert row["kind"] == "window" and row["fields"] == ["ok", "err"]
    assert row["resolutions"] == ["1m/1s", "1h/1m"] and row["nbytes"] == w.nbytes
    assert row["creator_pid"] == os.getpid() and row["creator_alive"] is True
    assert row["stripes_in_use"] >= 1 and row["stripes"] == 64 and row["error"] is None
    assert writer.pid in row["attached_pids"] and os.getpid() in row["attached_pids"]
    assert row["attached"] == len(row["attached_pids"]) >= 2
    assert row["allocated_bytes"] == os.stat(shmwin.backends.shm.segment.path_of(name)).st_blocks * 512 > 0
    shm = listed["shm"]
    assert shm["size_bytes"] >= shm["used_bytes"] >= shm["windows_bytes"] >= row["allocated_bytes"]
    assert 0 < shm["free_bytes"] <= shm["size_bytes"]
    wide = cli("ls", columns=1000).stdout  # room for every name, whatever else /dev/shm holds
    assert name in wide and "/dev/shm:" in wide
    live = json.loads(cli("show", name, "--json").stdout)  # while the writer is busy
    assert live["resolutions"][0]["totals"]["err"] == 7
    stop.set()
    writer.join(30)
    snap = json.loads(cli("show", name, "--json").stdout)
    by_res = {r["resolution"]: r for r in snap["resolutions"]}
    assert by_res["1m/1s"]["totals"] == w.totals(resolution=0)
    assert by_res["1h/1m"]["totals"] == w.totals(resolution=1) == w.totals()
    assert len(by_res["1m/1s"]["series"]["ok"]) == 60
    assert sum(by_res["1h/1m"]["series"]["ok"]) == w.total("ok")
    one = json.loads(cli("show", name, "--last", "10s", "--json").stdout)
    assert [r["resolution"] for r in one["resolutions"]] == ["1m/1s"]
    text = cli("show", name).stdout
    assert "ok" in text and "1h/1m" in text and any(ch in text for ch in "▁▂▃▄▅▆▇█")


def test_export_prometheus_parses_back_to_the_windows_totals(busy, name):
    from prometheus_client.parser import text_string_to_metric_families

    w, stop, writer = busy
    stop.set()
    writer.join(30)
    text = cli("export", name, "--format", "prometheus").stdout
    promtool_check(text)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    totals = {
        (s.labels["resolution"], s.labels["field"]): s.value for s in families["shmwin_window_value"].samples
    }
    assert totals == {
        ("1m/1s", "ok"): w.total("ok", resolution=0), ("1m/1s", "err"): 7,
        ("1h/1m", "ok"): w.total("ok", resolution=1), ("1h/1m", "err"): 7,
    }  # fmt: skip
    rates = families["shmwin_window_rate_per_second"].samples
    assert all(s.value >= 0 for s in rates) and len(rates) == 4
    assert json.loads(cli("export", name).stdout)["resolutions"][1]["totals"] == w.totals()


def test_keyed_window_and_limiter_show_their_keys(make_name):
    routes, login = make_name("routes"), make_name("login")
    with Window(routes, fields=("req",), capacity=32) as w, Limiter(login, "5/minute;100/hour") as lim:
        for route, n in (("GET /a", 3), ("GET /b", 9), ("POST /c", 1)):
            w.add(n, key=route)
        for _ in range(7):
            lim.hit("203.0.113.7")
        lim.hit("198.51.100.1")
        snap = json.loads(cli("show", routes, "--json").stdout)
        assert snap["top"] == [["GET /b", 9], ["GET /a", 3], ["POST /c", 1]] and snap["keys"] == 3
        one = json.loads(cli("show", routes, "--key", "GET /a", "--json").stdout)
        assert one["resolutions"][0]["totals"] == {"req": 3}
        shown = json.loads(cli("show", login, "--json").stdout)
        assert shown["kind"] == "limiter"
        assert [(r["rate"], r["resolution"], r["limit"]) for r in shown["resolutions"]] == [
            ("5/minute", "1m/3s", 5), ("100/hour", "1h/3m", 100),
        ]  # fmt: skip
        assert [e["key"] for e in shown["top"]] == ["203.0.113.7", "198.51.100.1"]
        busiest = shown["top"][0]["rates"]
        assert [(s["used"], s["remaining"]) for s in busiest] == [(5, 0), (5, 95)]
        assert 0 < busiest[0]["reset_s"] <= 63 and 0 < busiest[1]["reset_s"] <= 3780
        text = cli("show", login).stdout
        assert "USED" in text and "LEFT" in text and "RESET" in text and "203.0.113.7" in text
        key = json.loads(cli("show", login, "--key", "198.51.100.1", "--json").stdout)
        assert [(s["used"], s["remaining"]) for s in key["stats"]["rates"]] == [(1, 4), (1, 99)]
        listing = _listing()
        assert listing[routes]["keys"] == 3 and listing[routes]["capacity"] == 32
        assert listing[login]["rates"] == ["5/minute", "100/hour"]
        assert listing[login]["resolutions"] == ["1m/3s", "1h/3m"]
        w.unlink()
        lim.unlink()


def test_limiter_view_agrees_with_the_limiters_own_stats(name):
    """used / remaining / reset read lock-free from the buckets are what Limiter.stats_all says."""
    clock = ManualClock(10**12)
    with Limiter(name, "5/minute;20/hour", clock=clock) as lim, Window.attach(name, clock=clock) as w:
        for step in range(40):
            lim.hit("a" if step % 3 else "b")
            clock.advance(0.7 + (step % 5) * 0.9)
            for key in ("a", "b", "never"):
                view = snapshots.limiter_key(w, key, clock())
                stats = lim.stats_all(key)
                assert [(s["used"], s["remaining"]) for s in view["rates"]] == [
                    (s.used, s.remaining) for s in stats
                ], (step, key)
                assert [s["reset_s"] for s in view["rates"]] == [round(s.reset_after, 3) for s in stats]
        lim.unlink()


def test_nan_and_inf_in_a_float_window_never_crash_the_inspector(name):
    """Values written as sentinels, then turned into nan / inf / -inf in the segment itself:
    whatever add() accepts, a segment may hold them (overflowing sums, other writers)."""
    with Window(name, fields=("a", "b", "c", "d"), dtype="float64") as w:
        sentinels = {1111.25: float("nan"), 2222.5: float("inf"), 3333.75: float("-inf")}
        for field, value in zip("abc", sentinels, strict=True):
            w.add(value, field)
        w.add(1.5, "d")
        fd = os.open(shmwin.backends.shm.segment.path_of(name), os.O_RDWR)
        try:
            data = os.pread(fd, w.nbytes, 0)
            for sentinel, bad in sentinels.items():
                at = data.find(struct.pack("<d", sentinel))
                assert at >= 0
                while at >= 0:
                    os.pwrite(fd, struct.pack("<d", bad), at)
                    at = data.find(struct.pack("<d", sentinel), at + 8)
        finally:
            os.close(fd)
        text = cli("show", name).stdout
        assert "nan" in text and "-inf" in text and "Traceback" not in text
        strict = {"parse_constant": lambda c: pytest.fail(f"JSON holds {c}")}
        snap = json.loads(cli("show", name, "--json").stdout, **strict)
        assert snap["resolutions"][0]["totals"] == {"a": "nan", "b": "inf", "c": "-inf", "d": 1.5}
        json.loads(cli("export", name).stdout, **strict)
        prom = cli("export", name, "--format", "prometheus").stdout
        promtool_check(prom)
        assert 'field="a",resolution="1m/1s"' in prom and " NaN" in prom and " +Inf" in prom
        w.unlink()


def test_globs_and_export_of_everything(make_name):
    a, b, other = make_name("api-a"), make_name("api-b"), make_name("other")
    for n, value in ((a, 1), (b, 2), (other, 3)):
        with Window(n) as w:
            w.add(value)
    pattern = make_name("api-*")
    shown = json.loads(cli("show", pattern, "--json").stdout)
    assert [s["name"] for s in shown] == [a, b]
    assert cli("show", pattern).stdout.count("(window)") == 2
    exported = {s["name"]: s for s in json.loads(cli("export").stdout)}
    assert {a, b, other} <= set(exported)
    assert exported[other]["resolutions"][0]["totals"] == {"count": 3}
    prom = cli("export", "--format", "prometheus").stdout
    assert all(f'window="{n}"' in prom for n in (a, b, other))
    promtool_check(prom)
    assert json.loads(cli("export", a).stdout)["name"] == a  # one name: one object
    missing = cli("show", make_name("nothing-*"), check=False)
    assert missing.returncode == 2 and "no window matches" in missing.stderr
    removed = cli("rm", pattern).stdout
    assert removed.count("removed") == 2 and set(shmwin.names()) & {a, b} == set()
    assert other in shmwin.names()
    shmwin.unlink(other)


def test_rm_refuses_a_window_in_use_and_names_who_holds_it(name):
    Window(name).close()
    holder = hold(name)
    try:
        refused = cli("rm", name, check=False)
        assert refused.returncode == 1 and f"pid {holder.pid} (python" in refused.stdout
        assert "--force" in refused.stdout and name in shmwin.names()
        forced = cli("rm", "--force", name)
        assert f"removed {name}" in forced.stdout and f"pid {holder.pid}" in forced.stdout
        assert name not in shmwin.names()
    finally:
        release(holder)
    Window(name).close()  # no one holds it now: removed without --force
    assert f"removed {name}" in cli("rm", name).stdout


def test_unreadable_segments_are_explained_not_fatal(make_name):
    junk, future = make_name("junk"), make_name("future")
    with open(shmwin.backends.shm.segment.path_of(junk), "wb") as f:
        f.write(b"\x07" * 8192)
    Window(future).close()
    fd = os.open(shmwin.backends.shm.segment.path_of(future), os.O_RDWR)
    os.pwrite(fd, (layout.FORMAT_VERSION + 1).to_bytes(4, "little"), 8)
    os.close(fd)
    listing = _listing()
    assert "CorruptSegmentError" in listing[junk]["error"]
    assert "version" in listing[future]["error"]
    assert f"{junk}" in cli("ls").stdout and "unreadable" in cli("ls").stdout
    bad = cli("show", future, check=False)
    assert bad.returncode == 2 and "format version" in bad.stderr and "Traceback" not in bad.stderr
    missing = cli("show", make_name("missing"), check=False)
    assert missing.returncode == 2 and "no window named" in missing.stderr
    gc = cli("gc", "--dry-run", junk).stdout
    assert f"skip {junk}" in gc
    prom = cli("export", junk, "--format", "prometheus").stdout
    assert f'shmwin_window_readable{{window="{junk}"}} 0.0' in prom
    assert cli("rm", junk, future).stdout.count("removed") == 2
    assert cli("rm", junk, check=False).returncode == 1


@pytest.mark.failpoints
def test_the_inspector_never_waits_on_a_workers_lock(make_name):
    name = make_name("locked")
    ctx = mp.get_context("fork")
    with Window(name, mode="locked", lock_timeout=30) as w:
        w.add(5)
        holding = ctx.Event()
        holder = ctx.Process(target=stop_inside, args=(name, "add_locked", holding))  # holds the row lock
        holder.start()
        try:
            assert holding.wait(30)
            wait_stopped(holder.pid)
            held = [i for i, word in enumerate(lock_words(name)) if word & FUTEX_TID_MASK == holder.pid]
            assert held, "the stopped add holds no lock: the test would prove nothing"
            totals = json.loads(cli("show", name, "--json").stdout)["resolutions"][0]["totals"]
            assert totals in ({"count": 5}, {"count": 6})  # the stopped add may be visible: one store
            cli("ls")
            cli("export", name, "--format", "prometheus")
            # none of the three runs blocked on a lock at all (not only: none waited long): a
            # sleeper leaves FUTEX_WAITERS in the word until the stopped holder unlocks, whatever
            # the machine's load; the holder still holds what it held
            words = lock_words(name)
            assert [words[i] & FUTEX_TID_MASK for i in held] == [holder.pid] * len(held)
            assert not [i for i, word in enumerate(words) if word & FUTEX_WAITERS], [hex(x) for x in words]
        finally:
            holder.kill()  # a stopped child left alive would hang the run at exit (multiprocessing joins it)
            holder.join()
        w.unlink()


def test_show_and_ls_fit_80_columns_and_use_wider_ones(make_name):
    wide, login = make_name("wide-" + "n" * 60), make_name("login")
    fields = ("requests_total_ok", "errors", "bytes_sent_upstream")
    with (
        Window(wide, resolutions=("1m/1s", "1h/1m", "1d/1h"), fields=fields, capacity=64) as w,
        Limiter(login, "10/second;1000/minute;100000/hour;1000000/day") as lim,
    ):
        for i, key in enumerate(("GET /" + "x" * 300, "日本語のキー" * 10, "evil\x1b[2J\x07key", "plain")):
            w.add(10**12 * (i + 1), "bytes_sent_upstream", key=key)
            w.add(i + 1, "errors", key=key)
            lim.hit(key)
        for columns in (80, 100, 240):
            runs = (("show", wide), ("show", login), ("ls",))
            outputs = [cli(*args, columns=columns).stdout for args in runs]
            for out in outputs:
                assert "\x1b" not in out  # a key's escape sequence is shown escaped, never sent
                too_long = [line for line in out.splitlines() if cells(line) > columns]
                assert not too_long, (columns, too_long)
            if columns == 240:
                assert max(cells(line) for line in outputs[0].splitlines()) > 100  # the room is used
        assert "\\x1b[2J" in cli("show", wide).stdout
        w.unlink()
        lim.unlink()


def test_every_command_has_help_with_an_example():
    for command in ("ls", "show", "watch", "export", "rm", "gc"):
        out = cli(command, "--help").stdout
        assert "example:" in out and f"shmwin {command}" in out and "--backend" in out, command
    assert "watch" in cli("--help").stdout
    assert cli("--version").stdout.strip() == f"shmwin {shmwin.__version__}"


def test_console_script_is_installed():
    exe = os.path.join(os.path.dirname(sys.executable), "shmwin")
    assert os.path.exists(exe)
    assert "watch" in subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=30).stdout


def test_gc_keeps_what_is_in_use_or_recent(make_name):
    """On this host (the scan may be incomplete here: see test_cli_gc for complete scans)."""
    old, held = make_name("old"), make_name("held")
    run_python(
        """
        import sys, time
        from shmwin import ManualClock, Window
        then = ManualClock(max(time.monotonic_ns() - 30 * 10**9, 0))
        for name in sys.argv[1:]:
            Window(name, span=2, buckets=2, clock=then).add(1)
        """,
        old,
        held,
    )
    holder = hold(held)
    try:
        out = cli("gc", "--force", old, held).stdout
        assert f"removed {old}" in out and f"keep {held}" in out and f"pid {holder.pid}" in out
        assert held in shmwin.names() and old not in shmwin.names()
    finally:
        release(holder)
    assert f"removed {held}" in cli("gc", "--force", held).stdout


def test_segments_written_with_the_wall_clock_are_read_with_it(name):
    """shm:// storages for limits write with time.time(); their header says so, and the
    inspector reads them with the wall clock (with the monotonic one every bucket is stale)."""
    from prometheus_client.parser import text_string_to_metric_families

    from shmwin.integrations.limits_segments import wall_ns

    with Limiter(name, "5/minute", clock=wall_ns) as lim:
        for _ in range(3):
            lim.hit("203.0.113.7")
        with Window.attach(name) as w:
            assert w.meta.clock == "wall"
        snap = json.loads(cli("show", name, "--json").stdout)
        assert snap["resolutions"][0]["totals"] == {"hits": 3}
        used = snap["top"][0]["rates"][0]
        assert (used["used"], used["remaining"]) == (3, 2) and 0 < used["reset_s"] <= 63
        text = cli("export", name, "--format", "prometheus").stdout
        values = [s.value for f in text_string_to_metric_families(text) if f.name == "shmwin_window_value"
                  for s in f.samples]  # fmt: skip
        assert values == [3]
        lim.unlink()


def test_limits_counters_are_shown_by_their_role(make_name):
    """ls names a shm:// storage's fixed windows, sliding counters and moving windows by their
    role; show lists each key's value (a fixed window's live count, a sliding counter's
    weighted count, a moving window's hits of the last period)."""
    pytest.importorskip("limits")
    from limits import RateLimitItemPerMinute
    from limits.storage import storage_from_string
    from limits.strategies import STRATEGIES

    import shmwin.integrations.limits  # noqa: F401  (registers shm://)

    for attempt in range(3):  # the wall clock's minute must not turn between the hits and the reads
        prefix = make_name(f"lim{attempt}")
        minute = time.time() // 60
        if _show_limits_counters(prefix, STRATEGIES, storage_from_string, RateLimitItemPerMinute(5), minute):
            return
    raise AssertionError("a minute turned during each of 3 attempts")


def _show_limits_counters(prefix, strategies, storage_from_string, item, minute) -> bool:
    """One attempt: True if it ran within one wall-clock minute (and passed), False to retry."""
    storage = storage_from_string(f"shm://{prefix}")
    try:
        for strategy in ("fixed-window", "sliding-window-counter", "moving-window"):
            for who in ("a", "a", "b"):
                strategies[strategy](storage).hit(item, who)
        listed = cli("ls", "--json", f"{prefix}.*").stdout
        roles = sorted(row["role"] for row in json.loads(listed)["windows"])
        assert roles == ["fixed-window", "moving-log", "sliding-counter"]
        titles = (("fixed", "limits' fixed windows"), ("sliding", "limits' sliding window counters"),
                  ("moving.5", "limits' moving windows"))  # fmt: skip
        for kind, title in titles:
            shown = cli("show", f"{prefix}.{kind}.1m", columns=120).stdout
            assert title in shown and "2 keys counting, 3 in all" in shown, shown
            snap = json.loads(cli("show", "--json", f"{prefix}.{kind}.1m").stdout)
            if time.time() // 60 != minute:
                return False  # the sliding counter's weights moved: not this test's subject
            assert f"2  {item.key_for('a')}" in shown and f"1  {item.key_for('b')}" in shown, shown
            assert snap["top"] == [[item.key_for("a"), 2], [item.key_for("b"), 1]]
        return True
    except AssertionError:
        if time.time() // 60 != minute:
            return False
        raise
    finally:
        storage.segments.close()
        for n in storage.segments.names():
            shmwin.unlink(n)
