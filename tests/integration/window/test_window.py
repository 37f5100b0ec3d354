"""One process: the Window API, expiry under a manual clock, and bad input."""

from __future__ import annotations

import math
import os
import stat

import numpy as np
import pytest
from support.helpers import in_threads

import shmwin
from shmwin import ManualClock, Window
from shmwin.backends.shm.segment import path_of

S = 1_000_000_000
T0 = 1_000 * S  # a clock far from 0, at a bucket boundary


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture(params=["striped", "locked"])
def win(request, name, clock):
    w = Window(name, span=10, buckets=10, fields=("ok", "error"), mode=request.param, clock=clock)
    yield w
    w.close()
    w.unlink()


def test_add_total_totals(win):
    win.add()
    win.add()
    win.add(5, "error")
    assert win.total() == 2
    assert win.total("ok") == 2
    assert win.total("error") == 5
    assert win.totals() == {"ok": 2, "error": 5}
    assert isinstance(win.total(), int)


def test_partial_slide(win, clock):
    win.add(1)  # bucket 0
    clock.advance(3)
    win.add(10)  # bucket 3
    clock.advance(0.5)
    win.add(100)  # still bucket 3
    assert win.total() == 111
    assert win.total(last=1) == 110  # the current bucket only
    assert win.total(last=4) == 111  # buckets 0..3
    clock.advance(6.5)  # now 10 s after the first add: bucket 0 slid out
    assert win.total() == 110
    assert win.total(last=8) == 110
    assert win.total(last=7) == 0  # buckets 4..10 hold nothing
    clock.advance(3)
    assert win.total() == 0


def test_gap_longer_than_span_clears_everything(win, clock):
    for _ in range(10):
        win.add(2, "error")
        clock.advance(1)
    assert win.total("error") == 18  # the first of ten buckets has just slid out
    clock.advance(10 * 3600)
    assert win.totals() == {"ok": 0, "error": 0}
    assert not win.series("error").any()
    win.add(1, "error")  # a recycled slot starts from zero, not from its old value
    assert win.total("error") == 1


def test_series_oldest_first_with_stale_buckets_zero(win, clock):
    for i in range(1, 6):
        win.add(i)
        clock.advance(1)
    # five buckets written (1..5), now in the sixth, nothing in it yet
    series = win.series()
    assert isinstance(series, np.ndarray) and len(series) == 10
    assert series.tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5, 0]
    assert win.series(last=3).tolist() == [4, 5, 0]
    clock.advance(7)  # now in epoch 12: the window is epochs 3..12, so 1, 2, 3 slid out
    assert win.series().tolist() == [4, 5, 0, 0, 0, 0, 0, 0, 0, 0]


def test_rate_divides_by_the_covered_interval(win, clock):
    clock.advance(0.5)
    win.add(30)
    clock.advance(0.5)  # exactly at the next bucket boundary: covered 1 s for last=1 ... 2
    win.add(10)
    assert win.rate(last=2) == pytest.approx(40.0)  # 40 events over [T0, T0+1s]
    clock.advance(0.25)
    assert win.rate(last=1) == pytest.approx(10 / 0.25)
    assert win.rate(last=10) == pytest.approx(40 / 9.25)  # 9 whole buckets + 0.25 s


def test_last_accepts_strings_and_rejects_longer_than_span(win):
    win.add(3)
    assert win.total(last="1s") == 3
    assert win.total(last="10s") == 3
    with pytest.raises(ValueError, match="longer than the window's span"):
        win.total(last=11)
    with pytest.raises(ValueError):
        win.total(last=0)
    with pytest.raises(ValueError):
        win.total(last="soon")


def test_reset(win, clock):
    win.add(4)
    win.add(4, "error")
    win.reset()
    assert win.totals() == {"ok": 0, "error": 0}
    win.add(1)
    clock.advance(1)
    win.add(1)
    assert win.series(last=2).tolist() == [1, 1]


def test_unknown_field_is_a_key_error(win):
    with pytest.raises(KeyError, match="unknown field 'nope'"):
        win.add(1, "nope")
    with pytest.raises(shmwin.UnknownFieldError):
        win.total("nope")
    assert win.totals() == {"ok": 0, "error": 0}


def test_bad_amounts_raise_and_lose_nothing(win):
    win.add(2)
    with pytest.raises(TypeError, match="int64"):
        win.add(1.5)
    with pytest.raises(TypeError):
        win.add("3")  # type: ignore[arg-type]
    with pytest.raises(OverflowError):
        win.add(2**64)
    assert win.total() == 2


def test_float_window(name, clock):
    with Window(name, span=60, buckets=6, fields=("latency_s",), dtype="float64", clock=clock) as w:
        w.add(0.25)
        w.add(0.5)
        w.add(1)
        assert w.total() == pytest.approx(1.75)
        assert isinstance(w.total(), float)
        assert w.series().dtype == np.float64
        w.unlink()


def test_span_spellings_and_geometry(name):
    with Window(name, span="1h", buckets=60, fields=("req",)) as w:
        assert w.span == 3600.0
        assert w.span_ns == 3600 * S
        assert w.bucket_ns == 60 * S
        assert w.buckets == 60
        assert w.fields == ("req",)
        assert w.mode == "striped" and w.stripes == 64 and w.dtype == "int64"
        assert w.nbytes == os.stat(path_of(name)).st_size
        w.unlink()


def test_attach_reads_geometry_from_the_segment(name):
    with Window(name, span="90s", buckets=30, fields=("a", "b", "c"), mode="locked") as w:
        w.add(7, "b")
        with Window.attach(name) as other:
            assert other.geometry == w.geometry
            assert other.total("b") == 7
        w.unlink()


def test_create_or_attach_with_same_geometry_shares_counts(name):
    a = Window(name, span=60, buckets=60, fields=("ok",))
    b = Window(name, span="1m", buckets=60, fields=("ok",))
    a.add(3)
    b.add(4)
    assert a.total() == b.total() == 7
    a.close()
    b.close()
    a.unlink()


def test_geometry_mismatch_names_both(name):
    with Window(name, span=60, buckets=60, fields=("ok",)) as w:
        with pytest.raises(shmwin.GeometryMismatchError) as err:
            Window(name, span=60, buckets=30, fields=("ok",))
        assert isinstance(err.value, ValueError)
        msg = str(err.value)
        assert "buckets=60x1s" in msg and "buckets=30x2s" in msg
        with pytest.raises(shmwin.GeometryMismatchError, match="mode=locked"):
            Window(name, span=60, buckets=60, fields=("ok",), mode="locked")
        with pytest.raises(shmwin.GeometryMismatchError, match=r"fields=\(ok,err\)"):
            Window(name, span=60, buckets=60, fields=("ok", "err"))
        w.unlink()


def test_exclusive_create(name):
    with Window.create(name) as w:
        with pytest.raises(FileExistsError):
            Window.create(name)
        with pytest.raises(shmwin.WindowExistsError):
            Window.create(name)
        w.unlink()


def test_attach_missing_is_file_not_found(name):
    with pytest.raises(FileNotFoundError):
        Window.attach(name)
    with pytest.raises(shmwin.WindowNotFoundError, match=name):
        Window.attach(name)


@pytest.mark.parametrize("bad_name", ["", "a/b", "/abs", "x" * 201, "has space", "tab\t", "nul\0", "é"])
def test_bad_names(bad_name):
    with pytest.raises(ValueError):
        Window(bad_name)
    with pytest.raises(ValueError):
        Window.attach(bad_name)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(span=0), dict(span=-5), dict(span="5 parsecs"), dict(span=10, buckets=3),
        dict(buckets=0), dict(buckets=2.5), dict(fields=()), dict(fields=("a", "a")),
        dict(fields=("has space",)), dict(fields=("x" * 40,)), dict(fields=tuple(f"f{i}" for i in range(17))),
        dict(dtype="int32"), dict(mode="fast"), dict(stripes=0), dict(stripes=100_000),
        dict(span=10, buckets=2_000_000),
    ],
)  # fmt: skip
def test_bad_geometry_is_a_value_error_and_creates_nothing(name, kwargs):
    with pytest.raises(ValueError):
        Window(name, **kwargs)
    assert name not in shmwin.names()


def test_names_lists_only_shmwin_segments(make_name):
    a, b = make_name("a"), make_name("b")
    with Window(a) as wa, Window(b) as wb:
        assert {a, b} <= set(shmwin.names())
        wa.unlink()
        assert a not in shmwin.names() and b in shmwin.names()
        wb.unlink()
    assert all(not n.startswith("/") for n in shmwin.names())


def test_permissions_default_0600_and_custom(make_name):
    a, b = make_name("a"), make_name("b")
    with Window(a) as wa, Window(b, perm=0o640) as wb:
        assert stat.S_IMODE(os.stat(path_of(a)).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(path_of(b)).st_mode) == 0o640
        wa.unlink()
        wb.unlink()


def test_close_and_unlink_are_idempotent_and_close_blocks_use(name):
    w = Window(name)
    w.add()
    w.close()
    w.close()
    assert w.closed
    with pytest.raises(shmwin.WindowClosedError):
        w.add()
    with pytest.raises(ValueError, match="closed"):
        w.total()
    assert w.unlink() is True
    assert w.unlink() is False
    assert shmwin.unlink(name) is False


def test_unlink_keeps_the_mapping_for_attached_users(name):
    w = Window(name)
    w.add(2)
    w.unlink()
    assert name not in shmwin.names()
    w.add(3)
    assert w.total() == 5
    with pytest.raises(FileNotFoundError):
        Window.attach(name)
    w.close()


def test_context_manager_closes(name):
    with Window(name) as w:
        w.add()
    assert w.closed
    shmwin.unlink(name)


def test_stripe_released_on_close_and_reused(name):
    w1 = Window(name, stripes=1)
    w1.add(5)
    assert [(row, pid) for row, pid, _ in w1.stripe_owners()] == [(1, os.getpid())]
    w1.close()
    w2 = Window.attach(name)
    assert w2.stripe_owners() == []
    w2.add(1)  # takes stripe 1 again: its counts are still inside the window
    assert w2.total() == 6
    w2.close()
    w2.unlink()


def test_threads_in_one_process_are_exact(name):
    import threading

    w = Window(name, span="1h", fields=("ok",))
    all_started = threading.Barrier(4)

    def work():
        w.add()
        all_started.wait()  # four live writers at once
        for _ in range(19_999):
            w.add()

    in_threads(work, 4)
    assert w.total() == 80_000
    # a stripe is a process's: each add is one native call under the GIL, so threads of
    # one process never interleave inside it
    assert [(row, pid) for row, pid, _ in w.stripe_owners()] == [(1, os.getpid())]
    w.close()
    w.unlink()


def test_the_front_adds_nothing_to_the_hot_path(name, clock):
    with Window(name, span=10, buckets=10, clock=clock) as w:
        assert w.add.__self__ is w._backend._core  # the native core's own method, bound on the instance
        assert w.add_and_total.__self__ is w._backend._core
        w.unlink()


def test_total_past_int64_raises_and_float_windows_do_not(make_name, clock):
    with Window(make_name("i"), span=10, buckets=10, clock=clock) as w:
        for _ in range(3):
            w.add(2**62)  # each bucket holds a valid count ...
            clock.advance(1)
        with pytest.raises(OverflowError, match="past int64"):
            w.total()  # ... their sum does not fit: an error, never a wrapped number
        assert w.total(last=1) == 0 and w.total(last=2) == 2**62
        with pytest.raises(OverflowError):
            w.add_many(np.full(4, 2**62, np.int64))  # the batch's sum is exact, then refused
        assert w.series().tolist()[-4:] == [2**62, 2**62, 2**62, 0]
        w.unlink()
    with Window(make_name("f"), span=10, buckets=10, dtype="float64", clock=clock) as f:
        for _ in range(3):
            f.add(2.0**62)
        assert f.total() == pytest.approx(3 * 2.0**62)
        f.unlink()


def test_a_wider_perm_creates_and_attaches(name):
    a = Window(name, perm=0o660)
    b = Window(name, perm=0o660)  # create-or-attach: the attach trusts what it asked for
    c = Window.attach(name, perm=0o660)
    a.add(1)
    assert b.total() == c.total() == 1
    with pytest.raises(shmwin.WindowPermissionError):
        Window.attach(name)  # group-writable: not trusted unless asked for
    for w in (a, b, c):
        w.close()
    a.unlink()


def test_the_rate_of_a_huge_finite_float_total_is_finite(make_name):
    """rate() divides before it scales to seconds: total * 1e9 overflowed to inf for a float
    total past 1.8e299 (red team rtwin: rate() and ``shmwin export`` said +Inf)."""
    clock = ManualClock(1_000 * 10**9)
    with Window(make_name("w"), span=10, buckets=10, dtype="float64", clock=clock) as w:
        w.add(1e300)
        clock.advance(5.5)
        rate = w.rate(last=None)
        assert math.isfinite(rate) and 1e299 / 2 < rate <= 1e300, rate
        w.unlink()
