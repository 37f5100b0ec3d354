"""TokenBucket: x/time/rate's bucket per key (GCRA), on shared memory and on redis.

The rules with time driven by hand (a ManualClock, on both backends: redis takes the clock's
reading instead of TIME), the errors, attaching by name from an unrelated process, the wrong
kind of segment, junk in the state word, and four real processes racing on one key for about
a second of real time (a correctness bound: burst + rate x elapsed, within 2).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import subprocess
import sys
import textwrap
import time

import pytest
from support.helpers import ROOT, open_core_as

import shmwin
from shmwin import GeometryMismatchError, Limiter, ManualClock, TokenBucket, _core
from shmwin.backends.redis.testing import ServerTime
from shmwin.backends.shm import format as layout
from shmwin.errors import CorruptSegmentError

pytestmark = pytest.mark.integration

S = 1_000_000_000
T0 = 1_000 * S
T = S // 10  # "10/second": one token every 100 ms


@pytest.fixture(params=["shm", "redis"])
def backend(request: pytest.FixtureRequest) -> str | None:
    if request.param == "shm":
        return None
    pytest.importorskip("redis")
    return str(request.getfixturevalue("redis_server").url)


@pytest.fixture
def clock(backend) -> ManualClock:
    """On redis, the server's time (ServerTime: redis refuses a host's clock)."""
    return ManualClock(T0) if backend is None else ServerTime(ManualClock(T0))  # type: ignore[return-value]


def bucket(
    name: str, clock: ManualClock, backend: str | None, burst: int = 5, rate: str = "10/second"
) -> TokenBucket:
    return TokenBucket(name, rate, burst=burst, clock=clock, backend=backend)


def test_a_full_burst_passes_and_the_next_call_fails(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert [tb.hit("k") for _ in range(6)] == [True] * 5 + [False]
        assert tb.hit("other")  # every key has its own bucket
        assert not tb.test("k") and not tb.hit("k")
        tb.unlink()


def test_one_token_comes_back_per_interval_exactly(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert all(tb.hit("k") for _ in range(5))
        for _ in range(3):
            clock.advance(ns=T - 1)
            assert not tb.hit("k"), "a token came back before 1/rate"
            clock.advance(ns=1)
            assert tb.hit("k"), "no token after exactly 1/rate"
            assert not tb.hit("k")
        clock.advance(ns=3 * T)  # three intervals: three tokens, no more
        assert [tb.hit("k") for _ in range(4)] == [True, True, True, False]
        tb.unlink()


def test_a_long_idle_refills_to_burst_and_no_more(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert all(tb.hit("k") for _ in range(5))
        clock.advance(3600)
        assert tb.stats("k").remaining == 5
        assert [tb.hit("k") for _ in range(6)] == [True] * 5 + [False]
        tb.unlink()


def test_costs(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert tb.hit("k", 3) and not tb.hit("k", 3), "3 of 5 taken: 2 left, not 3"
        assert not tb.test("k", 3) and tb.test("k", 2)
        assert tb.hit("k", 2) and not tb.hit("k", 1)
        assert tb.hit("k", 0) and tb.test("k", 0), "taking nothing is always allowed"
        clock.advance(ns=5 * T)
        assert tb.hit("k", 5), "a cost of the whole burst, from a full bucket"
        with pytest.raises(ValueError, match="burst 5"):
            tb.hit("k", 6)
        with pytest.raises(ValueError, match="burst 5"):
            tb.test("k", 6)
        with pytest.raises(ValueError, match="burst 5"):
            tb.acquire("k", cost=6)
        for bad in (-1, 1.5, True, "1"):
            with pytest.raises(ValueError, match="cost"):
                tb.hit("k", bad)
        tb.unlink()


@pytest.mark.parametrize("burst", [0, -1, True, 1.0, 1_000_001])
def test_a_burst_below_one_or_not_whole_is_a_value_error(name, burst):
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(name, "10/second", burst=burst)


def test_one_rate_only(name):
    with pytest.raises(ValueError, match="one rate"):
        TokenBucket(name, "10/second;100/minute", burst=5)


def test_stats_remaining_and_reset_after(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        st = tb.stats("k")
        assert (st.limit, st.used, st.remaining, st.reset_after) == (5, 0, 5, 0.0)
        assert st.rate == shmwin.Rate(10, S)
        assert all(tb.hit("k") for _ in range(3))
        st = tb.stats("k")
        assert (st.used, st.remaining) == (3, 2) and st.reset_after == pytest.approx(0.3)
        clock.advance(0.15)  # 1.5 tokens back: 3 whole ones, full in 0.15 s
        st = tb.stats("k")
        assert (st.used, st.remaining) == (2, 3) and st.reset_after == pytest.approx(0.15)
        assert tb.stats_all("k") == [st]
        assert tb.stats("k").remaining == 3, "stats takes nothing"
        tb.unlink()


def test_clear_gives_a_full_bucket(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert all(tb.hit("k") for _ in range(5)) and not tb.hit("k")
        tb.clear("k")
        assert tb.stats("k").remaining == 5
        assert [tb.hit("k") for _ in range(6)] == [True] * 5 + [False]
        tb.clear("never seen")
        tb.unlink()


def test_acquire_waits_for_the_tokens(name, clock, backend):
    with bucket(name, clock, backend) as tb:
        assert all(tb.hit("k") for _ in range(5))
        assert not tb.acquire("k", timeout=0.05), "a token is 100 ms away"
        assert clock() == T0 + S // 20  # slept until the deadline, no longer
        assert tb.acquire("k", timeout=1)
        assert clock() == T0 + T, "woke when the token came back"
        assert asyncio.run(tb.acquire_async("k", cost=2))
        assert clock() == T0 + 3 * T
        tb.unlink()


def test_attach_reads_rate_and_burst(name, clock, backend):
    with bucket(name, clock, backend, burst=7, rate="30/minute") as tb:
        assert tb.hit("k", 4)
        with TokenBucket.attach(name, clock=clock, backend=backend) as other:
            assert (other.rate, other.burst) == (shmwin.Rate(30, 60 * S), 7)
            assert other.stats("k").remaining == 3
            assert other.hit("k", 3) and not tb.hit("k")
        tb.unlink()


def test_the_wrong_kind_of_segment_is_a_clear_error(name, clock, backend):
    with Limiter(name, "5/minute", clock=clock, backend=backend) as lim:
        lim.hit("k")
        with pytest.raises(GeometryMismatchError, match="token bucket"):
            TokenBucket.attach(name, backend=backend)
        with pytest.raises(GeometryMismatchError):
            TokenBucket(name, "5/minute", burst=5, backend=backend)
        lim.unlink()
    with bucket(name, clock, backend) as tb:
        with pytest.raises(GeometryMismatchError, match="not a limiter"):
            Limiter.attach(name, backend=backend)
        with pytest.raises(GeometryMismatchError):
            Limiter(name, "10/second", backend=backend)
        with pytest.raises(GeometryMismatchError):  # the same name with another burst
            TokenBucket(name, "10/second", burst=6, clock=clock, backend=backend, on_change="raise")
        # the default changes it live, on shared memory and on redis (docs/operating.md, docs/redis.md)
        with bucket(name, clock, backend, burst=6) as changed:
            assert changed.burst == 6
            tb.hit("k")  # the other handle follows at its next call
            assert tb.burst == 6
        tb.unlink()


def test_a_rate_the_limit_does_not_divide_rounds_the_interval_up(name, clock):
    with TokenBucket(name, "3/second", burst=1, clock=clock) as tb:
        assert tb.hit("k") and not tb.hit("k")
        clock.advance(ns=333_333_333)
        assert not tb.hit("k"), "a token never comes back early"
        clock.advance(ns=1)
        assert tb.hit("k")
        with TokenBucket.attach(name) as attached:  # read back as given: 3 x T is 1,000,000,002 ns
            assert attached.rate == shmwin.Rate(3, 10**9)  # but the roundest period with T is read
        tb.unlink()


# -- shared memory only -------------------------------------------------------------------------


def test_a_key_is_idle_once_its_bucket_is_full_again(name, clock):
    with bucket(name, clock, None) as tb:
        assert all(tb.hit("k") for _ in range(5))
        assert tb.window.geometry.role == "token-bucket"
        clock.set(T0 + 5 * T)
        assert tb.window.keys() == ["k"], "reclaimable before its bucket is full"
        clock.advance(ns=1)
        assert tb.window.keys() == [], "still held once its bucket is full"
        assert tb.stats("k").remaining == 5
        tb.unlink()


def test_a_token_bucket_refuses_window_writes(name, clock):
    with bucket(name, clock, None) as tb:
        with pytest.raises(shmwin.ShmwinError):
            tb.window.add(1, key="k")
        # its core (a TokenBucketCore) has no ring call; a window's or a limiter's type refuses it
        assert not hasattr(tb.window._backend._core, "hit") and not hasattr(tb.window._backend._core, "add")
        with pytest.raises(ValueError, match="state"):
            open_core_as(tb.window, _core.WindowCore)
        with pytest.raises(ValueError, match="not a limiter segment"):
            open_core_as(tb.window, _core.LimiterCore)
        tb.unlink()
    with Limiter(name, "5/minute", clock=clock) as lim:
        assert not hasattr(lim.window._backend._core, "token_hit")
        with pytest.raises(ValueError, match="not a token-bucket segment"):
            open_core_as(lim.window, _core.TokenBucketCore)
        lim.unlink()


def test_junk_in_the_state_word_is_an_error(name, clock):
    with bucket(name, clock, None) as tb:
        assert tb.hit("k")
        b = tb.window._backend
        row, _ = b._core.find("k")
        at = (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0] + layout.TOKEN_STATE_TAT
        assert b._q[at] == T0 + T
        for junk in (-5, layout.MAX_NOW_NS + 5 * T + 1):
            b._q[at] = junk
            with pytest.raises(CorruptSegmentError, match="arrival time"):
                tb.hit("k")
            with pytest.raises(CorruptSegmentError):
                tb.stats("k")
        b._q[at] = layout.EMPTY_EPOCH
        assert tb.stats("k").remaining == 5
        tb.unlink()


def test_an_unrelated_process_sees_the_same_tokens(name):
    with TokenBucket(name, "1/hour", burst=5) as tb:
        assert tb.hit("k", 3)
        code = textwrap.dedent(f"""
            import shmwin
            tb = shmwin.TokenBucket.attach({name!r})
            print(tb.rate, tb.burst, tb.stats("k").remaining, tb.hit("k"), tb.stats("k").remaining)
            tb.close()
        """)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        run = [sys.executable, "-c", code]
        out = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == ["1/hour", "5", "2", "True", "1"]
        assert tb.stats("k").remaining == 1 and tb.hit("k") and not tb.hit("k")
        tb.unlink()


def _hammer(name: str, start_ns: int, until_ns: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    """Hit "k" from start to until; (admitted, when the first try began, when the last began)."""
    tb = TokenBucket.attach(name)
    while time.monotonic_ns() < start_ns:
        pass
    admitted, first, last = 0, 0, 0
    while True:
        now = time.monotonic_ns()
        if now >= until_ns:
            break
        admitted += tb.hit("k")
        first, last = first or now, now
    tb.close()
    out.put((admitted, first, last))


def test_four_processes_admit_burst_plus_rate_times_elapsed(name):
    rate, burst = 50, 10  # a token every 20 ms: a descheduled try (ms) is off by less than one
    with TokenBucket(name, f"{rate}/second", burst=burst) as tb:
        ctx = mp.get_context("fork")
        out = ctx.Queue()
        start_ns = time.monotonic_ns() + 3 * S // 10
        procs = [ctx.Process(target=_hammer, args=(name, start_ns, start_ns + S, out)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
        admitted = sum(r[0] for r in results)
        # from the first try to the last one's start: the bucket was full at the first (the key
        # was made there), and the last try saw every token back by its start
        elapsed_ns = max(r[2] for r in results) - min(r[1] for r in results)
        expected = burst + rate * elapsed_ns / S
        took = f"{admitted} admitted in {elapsed_ns / S:.3f} s, expected {expected:.1f}"
        assert abs(admitted - expected) <= 2, took
        tb.unlink()


# -- the tools ------------------------------------------------------------------------------------


def test_ls_show_and_export_show_each_keys_tokens(name):
    from support.cli_support import cli

    with TokenBucket(name, "1/hour", burst=5) as tb:
        assert tb.hit("a", 5) and tb.hit("b", 2)
        listed = json.loads(cli("ls", "--json", name).stdout)["windows"]
        assert [(row["role"], row["rates"]) for row in listed] == [("token-bucket", ["1/hour burst 5"])]
        shown = cli("show", name, columns=120).stdout
        assert "token bucket" in shown and "1/hour, burst 5" in shown, shown
        assert "2 keys below a full bucket, 7 tokens taken in all" in shown, shown
        assert "0  a" in shown and "3  b" in shown, shown
        snap = json.loads(cli("show", "--json", name).stdout)
        assert snap["top"] == [["a", 0], ["b", 3]]
        assert json.loads(cli("show", "--json", name, "--key", "b").stdout)["value"] == 3
        assert json.loads(cli("show", "--json", name, "--key", "never").stdout)["value"] == 5
        text = cli("export", "--format", "prometheus", "--top", "1", name).stdout
        assert f'shmwin_window_keys{{window="{name}"}} 2.0' in text, text
        assert f'shmwin_limiter_limit{{resolution="1/hour",window="{name}"}} 5.0' in text, text
        assert f'shmwin_window_value{{field="tokens",resolution="1/hour",window="{name}"}} 7.0' in text, text
        assert f'shmwin_key_value{{field="tokens",key="a",resolution="1/hour",window="{name}"}} 0.0' in text
        tb.unlink()


def test_the_tools_show_a_redis_token_bucket(redis_server, name):
    pytest.importorskip("redis")
    from support.cli_support import cli

    url = redis_server.url
    with TokenBucket(name, "1/hour", burst=5, backend=url) as tb:
        assert tb.hit("a", 5) and tb.hit("b", 2)
        listed = {r["name"]: r for r in json.loads(cli("ls", "--backend", url, "--json").stdout)["windows"]}
        assert (listed[name]["role"], listed[name]["rates"]) == ("token-bucket", ["1/hour burst 5"])
        snap = json.loads(cli("show", name, "--backend", url, "--json").stdout)
        assert snap["top"] == [["a", 0], ["b", 3]] and snap["token-bucket"]["total"] == 7
        shown = cli("show", name, "--backend", url, columns=120).stdout
        assert "2 keys below a full bucket, 7 tokens taken in all" in shown, shown
        assert json.loads(cli("show", name, "--key", "b", "--backend", url, "--json").stdout)["value"] == 3
        text = cli("export", "--backend", url, "--format", "prometheus", name).stdout
        assert f'shmwin_limiter_limit{{resolution="1/hour",window="{name}"}} 5.0' in text, text
        tb.unlink()


@pytest.mark.parametrize("on_full", ["allow", "deny", "raise"])
def test_a_full_key_table_answers_as_on_full_says(name, clock, on_full):
    with TokenBucket(name, "10/second", burst=1, capacity=1, clock=clock, on_full=on_full) as tb:
        assert tb.hit("a") and not tb.hit("a")  # the one row: "a", an empty bucket (not idle)
        if on_full == "raise":
            with pytest.raises(shmwin.KeyTableFullError):
                tb.hit("b")
        else:
            assert tb.hit("b") is (on_full == "allow")
            assert tb.test("b"), "a test makes no key: an unknown key's bucket is full (as a Limiter's test)"
        assert tb.full_count() >= 1
        clock.advance(ns=T + 1)  # "a" is full again, so idle: its row is reclaimed for "b"
        assert tb.hit("b") and not tb.hit("b")
        assert tb.stats("a").remaining == 1
        tb.unlink()


def test_bytes_keys_and_junk_keys(name, clock):
    with bucket(name, clock, None) as tb:
        assert tb.hit(b"\xff\x00k", 5) and not tb.hit(b"\xff\x00k")
        assert tb.stats(b"\xff\x00k").remaining == 0 and tb.stats("\xff\x00k").remaining == 5
        for junk in (None, 3, ["k"]):
            with pytest.raises(TypeError):
                tb.hit(junk)  # type: ignore[arg-type]
        tb.unlink()


def test_acquire_of_nothing_takes_nothing(name, clock):
    with bucket(name, clock, None) as tb:
        assert tb.acquire("k", cost=0) and tb.window.keys() == [], "taking nothing makes no key"
        assert tb.hit("k", 5) and tb.acquire("k", cost=0) and clock() == T0
        assert tb.stats("k").remaining == 0
        tb.unlink()
