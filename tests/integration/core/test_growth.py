"""Key tables that grow: no number of distinct clients fails a call by default, memory in
/dev/shm follows the keys in use (not a reserved capacity), and a full /dev/shm is a clear
OutOfSpaceError while growing -- never a SIGBUS, never a lost count."""

from __future__ import annotations

import multiprocessing as mp
import os

import pytest

import shmwin
from shmwin import KeyTableFullError, Limiter, ManualClock, Window
from shmwin.backends.shm import layout
from shmwin.backends.shm.segment import path_of

pytestmark = pytest.mark.integration

S = 1_000_000_000
MIB = 1 << 20


def allocated(name: str) -> int:
    """Bytes of /dev/shm the segment really holds (it is sparse: its size is its capacity)."""
    return os.stat(path_of(name)).st_blocks * 512


def test_twenty_thousand_clients_on_a_daily_limit_never_fail(name):
    """Flask-Limiter on a fixed 10,000-key table answered 7,497 HTTP 500s for 20,000 clients
    against '100 per day'. With the defaults every hit is answered and counted exactly."""
    clock = ManualClock(1000 * S)
    with Limiter(name, "100/day", clock=clock) as lim:
        for i in range(20_000):
            assert lim.hit(f"client-{i}")
        assert lim.hit("client-7", cost=99) and not lim.hit("client-7")
        assert lim.stats("client-19999").used == 1
        assert len(lim.window.keys()) == 20_000
        # ~1 KiB a key (a 512-byte row, its index entries), not the capacity's worth
        assert allocated(name) < 20_000 * 1200 + MIB
        lim.unlink()


def test_a_dozen_limits_with_a_handful_of_clients_fit_in_dockers_dev_shm(make_name):
    """Docker's /dev/shm is 64 MB; each limit used to reserve 6.4 MB up front."""
    rates = ["100/day", "10/minute", "1000/hour", "5/second", "50/hour;500/day", "3/minute",
             "200/day", "20/minute", "60/minute", "1/second", "10000/day", "30/hour"]  # fmt: skip
    limiters = [Limiter(make_name(f"l{i}"), rate) for i, rate in enumerate(rates)]
    try:
        for lim in limiters:
            for client in range(5):
                assert lim.hit(f"10.0.0.{client}")
        total = sum(allocated(lim.name) for lim in limiters)
        assert total <= 16 * MIB, f"a dozen limits hold {total / MIB:.1f} MiB of /dev/shm"
        assert total <= 2 * MIB  # in fact far less: tens of KiB each
    finally:
        for lim in limiters:
            lim.unlink()
            lim.close()


def test_memory_follows_the_keys_in_use_under_churn(name):
    """Keys that went idle are dropped when the index is rebuilt and their rows reused:
    waves of new clients do not grow the segment wave after wave."""
    clock = ManualClock(1000 * S)
    with Limiter(name, "10/minute", clock=clock) as lim:
        sizes = []
        for wave in range(8):
            for i in range(3000):
                assert lim.hit(f"w{wave}-{i}")
            sizes.append(allocated(name))
            assert lim.stats(f"w{wave}-0").used == 1 and lim.stats("w0-1").used == (wave == 0)
            clock.advance(90)  # every key of this wave is idle now
        assert sizes[-1] <= 2 * sizes[1], f"allocated bytes per wave: {sizes}"
        lim.unlink()


def test_a_capacity_is_a_hard_cap_with_on_full(name):
    clock = ManualClock(1000 * S)
    with Limiter(name, "5/minute", capacity=3, on_full="deny", clock=clock) as lim:
        assert all(lim.hit(k) for k in "abc")
        assert not lim.hit("d")  # a fourth live key: on_full
        assert lim.stats("d").used == 0 and lim.stats("a").used == 1
        clock.advance(120)  # a, b and c idle: their places are reused
        assert all(lim.hit(k) for k in "def")
        lim.unlink()
    with Window(name, span=60, buckets=6, capacity=2, clock=clock) as w:
        w.add(1, key="x")
        w.add(1, key="y")
        with pytest.raises(KeyTableFullError, match="capacity"):
            w.add(1, key="z")
        w.clear("x")  # frees its place at once
        w.add(1, key="z")
        assert (w.total(key="z"), w.total(key="x"), w.total(key="y")) == (1, 0, 1)
        w.unlink()


def test_a_keyed_window_grows_without_a_capacity(name):
    with Window(name, span=60, buckets=6, keyed=True) as w:
        for i in range(5000):
            w.add(i, key=f"k{i}")
        assert w.total(key="k4999") == 4999 and w.total() == sum(range(5000))
        assert sorted(k for k, _ in w.top(3)) == ["k4997", "k4998", "k4999"]
        w.unlink()


def _hit_many(name: str, start: int, n: int, clock_ns: int) -> int:
    lim = Limiter(name, "100/day", clock=ManualClock(clock_ns))
    admitted = sum(lim.hit(f"c{start + i}") for i in range(n))
    admitted += sum(lim.hit("shared") for _ in range(50))
    lim.close()
    return admitted


def test_processes_growing_one_table_together_lose_nothing(name):
    """Four processes insert 4 x 3000 new keys at once: the index is rebuilt and the heap
    grown under their feet, and every key is counted once, the shared one exactly 100."""
    with Limiter(name, "100/day", clock=ManualClock(1000 * S)) as lim:
        with mp.get_context("fork").Pool(4) as pool:
            admitted = pool.starmap(_hit_many, [(name, i * 3000, 3000, 1000 * S) for i in range(4)])
        assert sum(admitted) == 4 * 3000 + 100
        assert lim.stats("shared").used == 100
        assert all(lim.stats(f"c{i}").used == 1 for i in range(0, 12_000, 7))
        assert len(lim.window.keys()) == 12_001
        lim.unlink()


def _data_bytes(fd: int, lo: int, hi: int) -> int:
    """Bytes of [lo, hi) the file holds (SEEK_DATA / SEEK_HOLE): 0 for a hole."""
    held, at = 0, lo
    while at < hi:
        try:
            start = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after at
            break
        if start >= hi:
            break
        end = min(os.lseek(fd, start, os.SEEK_HOLE), hi)
        held, at = held + end - start, end
    return held


def test_index_copies_a_rebuild_replaced_give_their_pages_back_a_second_later(name):
    """Growing to 20,000 keys rebuilds the index into ever larger copies. Every copy but the
    current one is punched (a hole, SEEK_HOLE) at the first insert a second after the last
    rebuild, never before; every key still counts exactly, and a later rebuild reserves a
    punched copy again and writes it."""
    clock = ManualClock(1000 * 10**9)
    w = Window(name, span=10, buckets=10, keyed=True, clock=clock)
    fd = os.open(path_of(name), os.O_RDONLY)
    try:
        for i in range(20_000):
            w.add(1, key=f"k{i}")
        lay, g, keys = w._backend._lay, w.geometry, w._backend._keys
        current = keys._checked(layout.INDEX_OFF, 2 * g.index_levels - 1)

        def held_by_others() -> int:
            now = keys._checked(layout.INDEX_OFF, 2 * g.index_levels - 1)
            total = 0
            for index in range(2 * g.index_levels):
                off, slots = lay.index_copy(index, g.key_slots)
                lo = (off + layout.PAGE_BYTES - 1) // layout.PAGE_BYTES * layout.PAGE_BYTES
                hi = (off + slots * layout.KEY_ENTRY_BYTES) // layout.PAGE_BYTES * layout.PAGE_BYTES
                total += _data_bytes(fd, lo, hi) if index != now and hi > lo else 0
            return total

        assert held_by_others() > 0, "the copies the rebuilds replaced are held until a second has passed"
        w.add(1, key="same second")
        assert held_by_others() > 0
        clock.advance(1.5)
        w.add(1, key="a second later")  # the insert that gives them back
        assert held_by_others() == 0
        assert keys._checked(layout.INDEX_OFF, 2 * g.index_levels - 1) == current
        assert all(w.total(key=f"k{i}") == 1 for i in range(0, 20_000, 7))
        clock.advance(11)  # every key idle: the next growth rebuild drops them, into a punched copy
        for i in range(20_000, 45_000):  # past the load of 5/8 of its 65,536 entries
            w.add(2, key=f"k{i}")
        assert keys._checked(layout.INDEX_OFF, 2 * g.index_levels - 1) != current
        assert w.total(key="k0") == 0 and all(w.total(key=f"k{i}") == 2 for i in range(20_000, 45_000, 7))
        assert len(w.keys()) == 25_000
    finally:
        os.close(fd)
        w.close()
        shmwin.unlink(name)
