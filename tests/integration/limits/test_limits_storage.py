"""The shm:// and async+shm:// limits storages, against limits' own contract and memory://.

Time is driven by hand: ``time.time`` is patched to read a ManualClock, which is how
limits (and the storage) read the time.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("limits")

import limits.aio.strategies
from limits import RateLimitItemPerMinute, RateLimitItemPerSecond, parse
from limits.errors import ConfigurationError, StorageError
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import STRATEGIES, MovingWindowRateLimiter

import shmwin
from shmwin import ManualClock
from shmwin.errors import KeyTableFullError
from shmwin.integrations.limits import ShmStorage, StorageOptionError
from shmwin.integrations.limits_async import AsyncShmStorage

S = 1_000_000_000
START_S = 1_800_000_000  # a wall-clock time that is a multiple of every period used here
STRATEGY_NAMES = list(STRATEGIES)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> ManualClock:
    """time.time() (limits' clock, and the storage's) reads this manual clock."""
    c = ManualClock(START_S * S)
    monkeypatch.setattr(time, "time", lambda: c() / S)
    return c


def unlink_storage(prefix: str) -> list[str]:
    mine = [n for n in shmwin.names() if n.startswith(prefix + ".")]
    for n in mine:
        shmwin.unlink(n)
    return mine


@pytest.fixture
def uri(name: str) -> Iterator[str]:
    yield f"shm://{name}"
    unlink_storage(name)


# -- the URI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "options", "complaint"),
    [
        ("?capacity=0", {}, "capacity must be 1"),
        ("?capacity=lots", {}, "capacity must be a whole number"),
        ("?buckets=7", {}, "must divide one second"),
        ("?buckets=0", {}, "buckets must be 1"),
        ("?on_full=maybe", {}, "on_full must be one of"),
        ("?bogus=1", {}, "unknown option"),
        ("", {"colour": "red"}, "unknown option"),
        ("", {"capacity": 1.5}, "capacity must be a whole number"),
        ("?capacity", {}, "cannot read the query"),
    ],
)
def test_a_bad_uri_fails_when_the_storage_is_built(uri, query, options, complaint):
    with pytest.raises(StorageOptionError, match=complaint) as err:
        storage_from_string(uri + query, **options)
    assert isinstance(err.value, ConfigurationError) and isinstance(err.value, ValueError)
    assert unlink_storage(uri.removeprefix("shm://")) == []  # nothing was created


def test_a_bad_name_fails_when_the_storage_is_built():
    with pytest.raises(StorageOptionError, match="not usable"):
        storage_from_string("shm://two words")
    with pytest.raises(StorageOptionError, match="not usable"):
        storage_from_string("async+shm://a/b")


def test_uri_options_reach_the_segments(uri, clock):
    storage = storage_from_string(uri + "?capacity=64&buckets=10&on_full=deny")
    assert storage.segments.capacity == 64 and storage.segments.on_full == "deny"
    item = RateLimitItemPerMinute(5)
    STRATEGIES["moving-window"](storage).hit(item, "k")
    STRATEGIES["fixed-window"](storage).hit(item, "k")
    name = uri.removeprefix("shm://")
    with shmwin.Limiter.attach(f"{name}.moving.5.1m") as lim:
        assert lim.window.capacity >= 64 and lim.window.geometry.rings[0].n_buckets == 11
    with shmwin.Window.attach(f"{name}.fixed.1m") as w:  # one row per key: its start and count
        assert w.capacity >= 64 and w.buckets == 1 and w.geometry.role == "fixed-window"


def test_the_moving_window_is_an_exact_log_by_default(uri, clock):
    """Each key keeps its hit times (min(limit, times) of them, ?times= default 1024), the
    segment says it is written with the wall clock, and ?buckets= and ?times= exclude each other.
    The sliding window counter is limits' own: one segment per period, role sliding-counter."""
    storage = storage_from_string(uri + "?times=3")
    name = uri.removeprefix("shm://")
    STRATEGIES["moving-window"](storage).hit(RateLimitItemPerMinute(5), "k")
    STRATEGIES["moving-window"](storage).hit(RateLimitItemPerMinute(2), "k")
    with shmwin.Window.attach(f"{name}.moving.5.1m") as w:  # role moving-log: hit times, row and chunks
        assert w.geometry.rings[0] == shmwin.geometry.Ring(60 * 10**9, 3, 5, log=True)
        assert w.geometry.role == "moving-log" and w.meta.clock == "wall"
    with shmwin.Window.attach(f"{name}.moving.2.1m") as w:
        assert w.geometry.rings[0].n_buckets == 2  # a limit under times: exact
    STRATEGIES["sliding-window-counter"](storage).hit(RateLimitItemPerMinute(5), "k")
    STRATEGIES["sliding-window-counter"](storage).hit(RateLimitItemPerMinute(2), "k")
    with shmwin.Window.attach(f"{name}.sliding.1m") as w:
        assert w.geometry.role == "sliding-counter" and w.meta.clock == "wall" and len(w.keys()) == 2
    with pytest.raises(ConfigurationError, match="exclude"):
        storage_from_string(uri + "x?times=3&buckets=10")
    for bad in ("0", "4097", "x"):
        with pytest.raises(ConfigurationError, match="times"):
            storage_from_string(f"{uri}x?times={bad}")


def test_without_a_capacity_the_storage_passes_none(uri):
    assert storage_from_string(uri).segments.capacity is None
    assert storage_from_string(uri + "?capacity=12").segments.capacity == 12


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@pytest.mark.parametrize("on_full", ["allow", "deny", "raise"])
def test_on_full_decides_for_a_new_key_when_the_table_is_full(uri, clock, strategy, on_full):
    storage = storage_from_string(f"{uri}?capacity=4&on_full={on_full}")
    limiter = STRATEGIES[strategy](storage)
    item = RateLimitItemPerMinute(1)
    answers = []
    try:
        for i in range(200):
            answers.append(limiter.hit(item, f"client-{i}"))
    except KeyTableFullError:
        answers.append("raised")
    if on_full == "raise":
        assert answers[-1] == "raised" and all(a is True for a in answers[:-1])
    elif on_full == "allow":
        assert answers == [True] * 200
    else:
        assert answers[:4] == [True] * 4 and answers[-1] is False
        assert limiter.test(item, "client-0") is False  # live keys keep their counts


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_a_segment_first_opened_by_a_read_answers_on_full_too(uri, clock, strategy):
    """The core answers on_full for every role: a storage's segment is opened with its on_full
    whichever call opens it first -- here a read of another storage (attach), then its hits."""
    item = RateLimitItemPerMinute(1)
    filler = STRATEGIES[strategy](storage_from_string(f"{uri}?capacity=4&on_full=raise"))
    with pytest.raises(KeyTableFullError):
        for i in range(200):
            assert filler.hit(item, f"client-{i}")
    for on_full, answer in (("deny", False), ("allow", True)):
        reader = STRATEGIES[strategy](storage_from_string(f"{uri}?capacity=4&on_full={on_full}"))
        assert reader.get_window_stats(item, "client-0").remaining == 0  # opens the segment: attach
        assert reader.hit(item, "a-new-client") is answer  # no row for it: the core's on_full answers


def test_wrap_exceptions_wraps_shmwin_errors(uri, clock):
    storage = storage_from_string(f"{uri}?capacity=4&on_full=raise", wrap_exceptions=True)
    limiter = STRATEGIES["moving-window"](storage)
    with pytest.raises(StorageError) as err:
        for i in range(200):
            limiter.hit(RateLimitItemPerMinute(1), f"client-{i}")
    assert isinstance(err.value.storage_error, KeyTableFullError)


# -- costs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_an_integral_float_cost_counts_as_an_int(uri, clock, strategy):
    limiter = STRATEGIES[strategy](storage_from_string(uri))
    item = RateLimitItemPerMinute(5)
    assert limiter.hit(item, "k", cost=2.0)
    assert limiter.get_window_stats(item, "k").remaining == 3
    assert limiter.hit(item, "k", cost=3.0)
    assert not limiter.hit(item, "k", cost=1.0)


@pytest.mark.parametrize("cost", [6, 2**62, 2**63, 2**64, 10**30])
def test_a_moving_window_cost_above_the_limit_is_refused_as_memory_refuses_it(uri, clock, cost):
    """limits' memory storage refuses any cost above the limit (False); shm:// does the same
    once the moving log is open (acquire_entry's fast path), not only at the first call."""
    item = RateLimitItemPerMinute(5)
    on_shm = MovingWindowRateLimiter(storage_from_string(uri))
    on_memory = MovingWindowRateLimiter(storage_from_string("memory://"))
    for limiter in (on_shm, on_memory):
        assert limiter.hit(item, "k")  # the first call opens the log: later ones take the fast path
        assert limiter.hit(item, "k", cost=cost) is False
        assert limiter.get_window_stats(item, "k").remaining == 4


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@pytest.mark.parametrize(
    ("cost", "error"),
    [(1.5, ValueError), (-1, ValueError), (-0.5, ValueError), (math.inf, ValueError), ("2", TypeError),
     (True, TypeError)],
)  # fmt: skip
def test_a_cost_that_is_not_a_number_of_hits_is_a_clear_error(uri, clock, strategy, cost, error):
    """A fractional cost is counted by the fixed window and the sliding counter (below); the
    moving window keeps hit times, whole ones (limits' memory storage fails on 1.5 there too)."""
    if cost == 1.5 and strategy != "moving-window":
        return
    limiter = STRATEGIES[strategy](storage_from_string(uri))
    item = RateLimitItemPerMinute(5)
    with pytest.raises(error, match="cost"):
        limiter.hit(item, "k", cost=cost)
    assert limiter.get_window_stats(item, "k").remaining == 5  # nothing counted


@pytest.mark.parametrize("strategy", ["fixed-window", "sliding-window-counter"])
def test_fractional_costs_are_counted_as_memory_counts_them(uri, clock, strategy):
    """slowapi's callable costs may be floats (its suite uses 7.5): random fractional costs and
    times, the same calls on memory:// and shm://, every answer and every count alike."""
    import random

    rng = random.Random(11)
    memory, shm = MemoryStorage(), storage_from_string(uri)
    on_memory, on_shm = STRATEGIES[strategy](memory), STRATEGIES[strategy](shm)
    item = RateLimitItemPerMinute(20)
    for _ in range(400):
        clock.advance(ns=rng.randrange(0, 3 * S))
        key, cost = f"k{rng.randrange(3)}", rng.choice([0.5, 1, 1.25, 2.5, 7.5, 0.001, 3])
        assert on_shm.hit(item, key, cost=cost) == on_memory.hit(item, key, cost=cost), (key, cost)
        mine, theirs = on_shm.get_window_stats(item, key), on_memory.get_window_stats(item, key)
        # memory:// sums floats (11.498999...), shm:// thousandths (11.499): the same count
        assert math.isclose(mine.remaining, theirs.remaining, abs_tol=1e-6), (key, cost, mine, theirs)
        assert on_shm.test(item, key, cost=cost) == on_memory.test(item, key, cost=cost)


def test_a_fractional_cost_is_counted_to_a_thousandth(uri, clock):
    shm = storage_from_string(uri)
    key = RateLimitItemPerMinute(10).key_for("k")
    assert shm.incr(key, 60, amount=7.5) == 7.5
    assert shm.incr(key, 60, amount=0.25) == 7.75 == shm.get(key)
    assert shm.incr(key, 60, amount=0.25) == 8  # whole again: an int
    assert isinstance(shm.get(key), int)
    assert shm.incr(key, 60, amount=0.0001) == 8.001  # finer than a thousandth: rounded up


# -- reset() and clear(): limits' contract ------------------------------------------------------------


def test_reset_returns_the_number_of_keys_as_memory_does(uri, clock):
    memory, shm = MemoryStorage(), storage_from_string(uri)
    one, other = RateLimitItemPerMinute(10), RateLimitItemPerMinute(10, namespace="OTHER")
    for storage in (memory, shm):  # limits' own test: 20 counters
        for i in range(10):
            storage.incr(one.key_for(str(i)), one.get_expiry())
            storage.incr(other.key_for(str(i)), other.get_expiry())
    assert shm.get(one.key_for("3")) == 1
    assert memory.reset() == 20 == shm.reset()
    assert shm.get(one.key_for("3")) == 0
    assert shm.reset() == 0 == memory.reset()
    for strategy in ("moving-window", "sliding-window-counter"):  # strict windows' keys count too
        STRATEGIES[strategy](shm).hit(one, "m")
    assert shm.reset() == 2


def test_clear_returns_none_and_forgets_the_key_in_every_strategy(uri, clock):
    storage = storage_from_string(uri)
    item = RateLimitItemPerMinute(2)
    for strategy in STRATEGY_NAMES:
        limiter = STRATEGIES[strategy](storage)
        assert limiter.hit(item, "k") and limiter.hit(item, "k") and not limiter.hit(item, "k")
    assert storage.clear(item.key_for("k")) is None
    for strategy in STRATEGY_NAMES:
        assert STRATEGIES[strategy](storage).get_window_stats(item, "k").remaining == 2


def test_a_key_limits_did_not_build_is_still_found(uri, clock):
    storage = storage_from_string(uri)
    assert storage.incr("plain-key", 60, 3) == 3
    assert storage.get("plain-key") == 3
    assert storage.get_expiry("plain-key") == pytest.approx(START_S + 60, abs=1e-5)
    assert storage.acquire_sliding_window_entry("plain-key", 5, 60, 2)
    previous, previous_ttl, current, _ = storage.get_sliding_window("plain-key", 60)
    assert math.floor(previous * previous_ttl / 60 + current) == 2  # limits' weighting
    storage.clear("plain-key")
    assert storage.get("plain-key") == 0 and storage.get_sliding_window("plain-key", 60)[:3] == (0, 0.0, 0)
    memory = MemoryStorage()  # as memory:// answers for a key it never saw: the current window's ttl
    assert storage.get_sliding_window("plain-key", 60) == memory.get_sliding_window("plain-key", 60)


# -- the fixed window starts at a key's first hit, as in limits' storages ------------------------


def test_a_fixed_window_starts_at_the_first_hit_and_lasts_one_period(uri, clock):
    memory, shm = (
        STRATEGIES["fixed-window"](MemoryStorage()),
        STRATEGIES["fixed-window"](storage_from_string(uri)),
    )
    item = RateLimitItemPerMinute(2)
    clock.advance(17.25)  # an arbitrary moment, not a multiple of the period
    answers: dict[str, list[object]] = {"memory": [], "shm": []}
    for step_s in (0, 0, 0, 30, 29.75, 0, 0.25, 0, 0, 59.75, 0, 0.25):
        clock.advance(step_s)
        for kind, limiter in (("memory", memory), ("shm", shm)):
            stats = limiter.get_window_stats(item, "k")
            answers[kind].append(
                (limiter.hit(item, "k"), stats.remaining, round(stats.reset_time - START_S, 3))
            )
    assert answers["shm"] == answers["memory"]
    hits = [True, True, False, False, False, False, True, True, False, False, False, True]
    assert [hit for hit, _, _ in answers["shm"]] == hits


def test_clearing_a_fixed_window_lets_the_next_hit_start_a_new_one(uri, clock):
    storage = storage_from_string(uri)
    limiter, item = STRATEGIES["fixed-window"](storage), RateLimitItemPerMinute(1)
    assert limiter.hit(item, "k") and not limiter.hit(item, "k")
    clock.advance(20)
    limiter.clear(item, "k")
    assert limiter.hit(item, "k")
    assert limiter.get_window_stats(item, "k").reset_time == pytest.approx(START_S + 80, abs=1e-5)


# -- reset times ------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["fixed-window", "moving-window"])  # the sliding counter: below
@pytest.mark.parametrize("hit_at_ms", [0, 1, 17, 49, 50, 333, 999])  # within the first second
@pytest.mark.parametrize("ask_after_ms", [0, 2, 500, 1000, 1040])
def test_a_client_that_waits_until_the_reported_reset_is_admitted(
    uri, clock, strategy, hit_at_ms, ask_after_ms
):
    """The reported reset is when the request passes: never earlier (a client waiting for
    it gets in) and at most a microsecond later (just before it, still refused). For the
    strict windows that is up to a bucket past one period after the oldest hit."""
    limiter = STRATEGIES[strategy](storage_from_string(uri))
    item = RateLimitItemPerSecond(3)
    clock.advance(ns=hit_at_ms * 1_000_000)
    assert all(limiter.hit(item, "k") for _ in range(3))
    clock.advance(ns=ask_after_ms * 1_000_000)
    if limiter.test(item, "k"):
        return  # the window already moved on: nothing to wait for
    stats = limiter.get_window_stats(item, "k")
    assert stats.remaining == 0
    reset_ns = round(stats.reset_time * S)
    assert reset_ns > clock()
    if reset_ns - 2_000 > clock():  # (time.time() is a float: its 238 ns steps, below that)
        clock.set(reset_ns - 2_000)
        assert not limiter.test(item, "k")
    clock.set(reset_ns)
    assert limiter.test(item, "k") and limiter.hit(item, "k")


def test_the_bucketed_moving_window_resets_up_to_a_bucket_past_the_period(uri, clock):
    """Where the old cap at 0.999 x period reported too early: a hit late in a bucket."""
    limiter = STRATEGIES["moving-window"](storage_from_string(uri + "?buckets=20"))
    item = RateLimitItemPerSecond(1)
    clock.advance(ns=49_000_000)  # late in the first 50 ms bucket
    assert limiter.hit(item, "k")
    reset_in_s = limiter.get_window_stats(item, "k").reset_time - clock() / S
    assert 1.0 < reset_in_s <= 1.001 + 2e-6  # the bucket ends at 50 ms, then one period


# -- the sliding window counter is limits' own: it answers as memory:// does ------------------------


@pytest.mark.parametrize("steps_ms", [
    (7, 0, 0, 0, 0, 0, 1000, 0, 0, 203, 0, 301, 0, 0, 333, 167, 1000, 1000, 0),
    (17, 0, 250, 0, 981, 0, 0, 1, 0, 499, 0, 2500, 0),
    (999, 0, 1, 0, 0, 0, 0, 0, 601, 0, 0, 0, 399, 1, 0),
])  # fmt: skip  # never where a weighted count is whole: there memory's floats round either way
def test_the_sliding_window_counter_answers_as_memory_does(uri, clock, steps_ms):
    """Hits, the remaining count and the reset time, step by step, against memory:// (the
    previous window weighted, windows aligned on the period): one limiter each, side by side."""
    memory = STRATEGIES["sliding-window-counter"](MemoryStorage())
    shm = STRATEGIES["sliding-window-counter"](storage_from_string(uri))
    item = RateLimitItemPerSecond(5)
    for step_ms in steps_ms:
        clock.advance(ns=step_ms * 1_000_000)
        said = []
        for limiter in (memory, shm):
            stats = limiter.get_window_stats(item, "k")
            said.append((limiter.test(item, "k"), limiter.hit(item, "k"), stats.remaining, stats.reset_time))
        (m_test, m_hit, m_left, m_reset), (s_test, s_hit, s_left, s_reset) = said
        assert (s_test, s_hit, s_left) == (m_test, m_hit, m_left), clock() / S - START_S
        assert s_reset == pytest.approx(m_reset, abs=1e-6)


def test_the_sliding_window_counter_weighs_the_previous_window(uri, clock):
    """limits' weighted count: 4 hits in the last window, a quarter into this one: 3 of them
    still weigh; every 250 ms another leaves."""
    storage = storage_from_string(uri)
    limiter, item = STRATEGIES["sliding-window-counter"](storage), RateLimitItemPerSecond(4)
    assert all(limiter.hit(item, "k") for _ in range(4)) and not limiter.hit(item, "k")
    clock.advance(1.25)
    assert storage.get_sliding_window(item.key_for("k"), 1) == pytest.approx((4, 0.75, 0, 1.75), abs=1e-6)
    assert limiter.hit(item, "k") and not limiter.hit(item, "k")
    clock.advance(0.25)
    assert limiter.hit(item, "k") and not limiter.hit(item, "k")


# -- time-mocking libraries: shm:// moves as memory:// does ---------------------------------------------


def _scenario(uri: str, travel) -> list[bool]:
    """Hits around the edges of each strategy's window, under a time-mocking library."""
    answers = []
    for strategy in STRATEGY_NAMES:
        limiter = STRATEGIES[strategy](storage_from_string(uri))
        item = RateLimitItemPerMinute(2)
        answers += [limiter.hit(item, strategy) for _ in range(3)]
        travel(30)
        answers.append(limiter.hit(item, strategy))
        travel(150)  # past the previous window too (limits' sliding counter weighs it), to
        # a whole minute: the next strategy starts where memory's and shm's fixed windows agree
        answers += [limiter.hit(item, strategy) for _ in range(3)]
    return answers


def _with_hiro(uri):
    hiro = pytest.importorskip("hiro")
    with hiro.Timeline().freeze(START_S) as timeline:
        return _scenario(uri, timeline.forward)


def _with_freezegun(uri):
    freezegun = pytest.importorskip("freezegun")
    with freezegun.freeze_time("2027-01-15 08:00:00") as frozen:  # a whole minute
        return _scenario(uri, lambda s: frozen.tick(s))


def _with_time_machine(uri):
    time_machine = pytest.importorskip("time_machine")
    with time_machine.travel(START_S, tick=False) as traveller:
        return _scenario(uri, traveller.shift)


@pytest.mark.parametrize("run", [_with_hiro, _with_freezegun, _with_time_machine])
def test_time_mocking_libraries_move_shm_as_they_move_memory(uri, run):
    expected = [True, True, False, False, True, True, False] * 3
    assert run("memory://") == expected
    assert run(uri) == expected


# -- async+shm:// ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
def test_async_storage_answers_as_the_sync_one_and_shares_its_counts(uri, clock, strategy):
    async_storage = storage_from_string("async+" + uri)
    assert isinstance(async_storage, AsyncShmStorage)
    aio = limits.aio.strategies.STRATEGIES[strategy](async_storage)
    sync = STRATEGIES[strategy](storage_from_string(uri))
    item = parse("3/minute")

    async def scenario() -> list[object]:
        out: list[object] = [await aio.hit(item, "k"), await aio.hit(item, "k", cost=2.0)]
        out += [
            sync.hit(item, "k"),
            await aio.test(item, "k"),
            (await aio.get_window_stats(item, "k")).remaining,
        ]
        out += [await async_storage.check(), await async_storage.reset(), await aio.hit(item, "k")]
        await aio.clear(item, "k")
        out.append(await aio.test(item, "k", cost=3))
        return out

    assert asyncio.run(scenario()) == [True, True, False, False, 0, True, 1, True, True]
    assert isinstance(storage_from_string(uri), ShmStorage)


# -- Flask-Limiter's command line -----------------------------------------------------------------


def test_flask_limiter_config_command_shows_the_shm_storage(uri, clock):
    flask_limiter = pytest.importorskip("flask_limiter")
    pytest.importorskip("rich")
    from flask import Flask
    from flask_limiter.commands import cli
    from flask_limiter.util import get_remote_address

    app = Flask(__name__)
    flask_limiter.Limiter(get_remote_address, app=app, storage_uri=uri, default_limits=["10/minute"])

    @app.route("/")
    def index() -> str:
        return "ok"

    with app.test_client() as client:
        assert client.get("/").status_code == 200
    runner = app.test_cli_runner()
    config = runner.invoke(cli, ["config"])
    assert config.exit_code == 0, config.output
    assert "ShmStorage" in config.output and "OK" in config.output
    assert "/dev/shm/shmwi" in config.output  # (cut to the column: /dev/shm/shmwin.NAME.*)
    limits = runner.invoke(cli, ["limits", "--key=127.0.0.1"])
    assert limits.exit_code == 0 and "9 out of 10 remaining" in limits.output


def test_fixed_windows_memory_plateaus_as_the_same_clients_come_back(uri, clock):
    """Each window of a key reuses its key's entries: period after period of the same
    clients, the segments stop growing (they grew every period with a name per window)."""
    import os

    from shmwin.backends.shm.segment import path_of

    storage = storage_from_string(uri)
    limiter, item = STRATEGIES["fixed-window"](storage), RateLimitItemPerMinute(5)
    sizes = []
    for _ in range(8):
        for client in range(2000):
            assert limiter.hit(item, f"client-{client}")
        sizes.append(sum(os.stat(path_of(n)).st_blocks for n in storage.segments.names()))
        clock.advance(61)
    assert sizes[-1] == sizes[3], f"512-byte blocks after each minute: {sizes}"
