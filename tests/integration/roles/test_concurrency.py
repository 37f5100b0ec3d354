"""shmwin.Concurrency: at most ``limit`` holders per key, across processes (core/concurrency.c).

Here: the rules in one process; real processes (fork and spawn) holding slots of one key,
never more than the limit at once; a SIGKILLed holder's slots coming back by the kernel's word
(its stripe's robust mutex), within seconds and with no timeout; a ``python -c`` process
attaching by name and seeing the same counts; a waiting acquire taking the slot another
process gives back; idle keys reclaimed, held ones never.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from support.helpers import ROOT, open_core_as
from support.workers import concurrency_holder

import shmwin
from shmwin import Concurrency, ConcurrencyLimitError, ManualClock, NotHeldError, Window, _core
from shmwin.backends.shm.format import MAX_CONCURRENCY
from shmwin.errors import GeometryMismatchError, KeyTableFullError, ShmwinError

pytestmark = pytest.mark.integration

S = 1_000_000_000
DEADLINE_S = 10.0  # a bound for what must happen "within seconds" (it takes milliseconds)


def python_c(code: str, *args: str) -> subprocess.Popen[str]:
    """An unrelated ``python -c`` process (no fork: it shares nothing with this one)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def poll_until(predicate, what: str, within_s: float = DEADLINE_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"not within {within_s}s: {what}"
        time.sleep(0.01)


# -- the rules, in one process ------------------------------------------------------------------


def test_at_most_limit_holders_per_key_each_key_apart(name):
    with Concurrency(name, 3) as c:
        assert c.limit == 3
        assert [c.acquire("k", timeout=0) for _ in range(4)] == [True, True, True, False]
        assert c.count("k") == 3 and c.held("k") == 3
        assert c.try_acquire("k") is False
        assert c.acquire("other", timeout=0) and c.count("other") == 1  # another key: its own slots
        assert c.count("never") == 0 and c.held("never") == 0
        assert c.acquire(b"bytes", timeout=0) and c.count(b"bytes") == 1
        assert c.holders() == {"k": 3, "other": 1, b"bytes": 1}
    shmwin.unlink(name)


def test_release_gives_a_slot_back(name):
    with Concurrency(name, 2) as c:
        assert c.acquire("k", 0) and c.acquire("k", 0) and not c.acquire("k", 0)
        c.release("k")
        assert c.count("k") == 1 and c.held("k") == 1
        assert c.acquire("k", 0) and not c.acquire("k", 0)
        c.release("k")
        c.release("k")
        assert c.count("k") == 0
        with pytest.raises(NotHeldError, match="holds no slot"):
            c.release("k")  # never a negative count
        assert c.count("k") == 0 and c.acquire("k", 0) and c.acquire("k", 0) and not c.acquire("k", 0)
    shmwin.unlink(name)


def test_release_of_what_this_process_never_held_is_an_error(name):
    with Concurrency(name, 2) as c:
        with pytest.raises(NotHeldError):
            c.release("nothing")  # not even a key yet
        other = Concurrency.attach(name)
        try:
            assert other.acquire("k", 0)
            with pytest.raises(NotHeldError):  # another handle's slot is not ours to give back
                c.release("k")
            assert c.count("k") == 1
        finally:
            other.close()
        assert isinstance(NotHeldError("x"), ValueError) and isinstance(NotHeldError("x"), RuntimeError)
    shmwin.unlink(name)


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "3", MAX_CONCURRENCY + 1])
def test_a_bad_limit_is_a_value_error(name, limit):
    with pytest.raises(ValueError, match="limit"):
        Concurrency(name, limit)
    assert name not in shmwin.names()


def test_bad_arguments(name):
    with pytest.raises(ValueError, match="processes"):
        Concurrency(name, 2, processes=0)
    with Concurrency(name, 2) as c, pytest.raises(ValueError, match="negative"):
        c.acquire("k", timeout=-1)
    with Concurrency(name, 2) as c, pytest.raises(ValueError, match="NaN"):
        c.acquire("k", timeout=float("nan"))
    shmwin.unlink(name)


def test_hold_as_a_context_manager(name):
    with Concurrency(name, 1) as c:
        with c.hold("k", timeout=0) as held:
            assert held is c and c.count("k") == 1
            with pytest.raises(ConcurrencyLimitError, match="1 holders"), c.hold("k", timeout=0):
                pass
            assert c.count("k") == 1
        assert c.count("k") == 0
        with pytest.raises(RuntimeError, match="inside"), c.hold("k"):
            raise RuntimeError("inside")
        assert c.count("k") == 0  # given back on the way out of a failing block
        assert issubclass(ConcurrencyLimitError, TimeoutError)
    assert c.closed
    with pytest.raises(shmwin.WindowClosedError):
        c.count("k")
    shmwin.unlink(name)


def test_a_waiting_acquire_sleeps_on_the_manual_clock(name):
    clock = ManualClock(1_000 * S)
    with Concurrency(name, 1, clock=clock) as c:
        assert c.acquire("k")
        started = time.monotonic()
        assert not c.acquire("k", timeout=2.5)
        assert time.monotonic() - started < 2.5, "slept in real time"  # a real 2.5 s sleep takes >= 2.5 s
        assert clock.sleeps and all(s > 0 for s in clock.sleeps), "spun without sleeping"
        assert abs(sum(clock.sleeps) - 2.5) < 1e-6 and clock() == 1_000 * S + int(2.5 * S)
        assert len(clock.sleeps) < 200
    shmwin.unlink(name)


def test_acquire_async(name):
    import asyncio

    async def main(c: Concurrency) -> tuple[bool, bool]:
        first = await c.acquire_async("k", timeout=0)
        second = await c.acquire_async("k", timeout=0.05)
        async with c.hold_async("j", timeout=0):
            assert c.count("j") == 1
        return first, second

    with Concurrency(name, 1) as c:
        assert asyncio.run(main(c)) == (True, False)
        assert c.count("j") == 0
    shmwin.unlink(name)


def test_closing_a_handle_gives_its_slots_back(name):
    c = Concurrency(name, 3)
    other = Concurrency.attach(name)
    try:
        assert other.acquire("k", 0) and other.acquire("k", 0) and c.acquire("k", 0)
        assert c.count("k") == 3
        other.close()
        assert c.count("k") == 1 and c.acquire("k", 0) and c.acquire("k", 0) and not c.acquire("k", 0)
    finally:
        c.close()
        shmwin.unlink(name)


def test_attach_reads_the_limit_and_refuses_other_segments(name, make_name):
    with Concurrency(name, 4) as c:
        a = Concurrency.attach(name)
        try:
            assert a.limit == 4 and a.acquire("k", 0) and c.count("k") == 1
        finally:
            a.close()
        with pytest.raises(GeometryMismatchError):
            Concurrency(name, 5, on_change="raise")  # another limit, refused
        with Concurrency(name, 5) as again:  # another limit: changed live (on_change="carry")
            assert again.limit == c.limit == 5 and again.count("k") == 0
    shmwin.unlink(name)
    plain = make_name("plain")
    w = Window(plain, capacity=8)
    try:
        with pytest.raises(GeometryMismatchError, match="not a concurrency"):
            Concurrency.attach(plain)
        # the window's core (_core.open's: a WindowCore) has no concurrency method, and the
        # concurrency type built over the window's segment refuses it
        assert not hasattr(w._backend._core, "conc_acquire")
        with pytest.raises(ValueError, match="not a concurrency segment"):
            open_core_as(w, _core.ConcurrencyCore)
    finally:
        w.close()
        shmwin.unlink(plain)


def test_the_window_of_a_concurrency_is_read_only_state(name):
    with Concurrency(name, 2) as c:
        assert c.acquire("k", 0)
        w = Window.attach(name)
        try:
            assert w.geometry.role == "concurrency" and "k" in w.keys()
            with pytest.raises(ShmwinError, match="Concurrency"):
                w.add(1, key="k")
        finally:
            w.close()
    shmwin.unlink(name)


def test_idle_keys_are_reclaimed_held_keys_never(name):
    """A table of 2 keys: once "free" is idle (no holder, nothing written for the idle time) a
    new key takes its row; "held" keeps its holder, however old."""
    clock = ManualClock(1_000 * S)
    with Concurrency(name, 2, capacity=2, idle="1s", clock=clock) as c:
        assert c.acquire("held", 0)
        assert c.acquire("free", 0)
        c.release("free")
        clock.advance(5)
        with pytest.raises(KeyTableFullError):  # "free" is idle, but not dropped before it must be
            for i in range(64):
                assert c.acquire(f"new{i}", 0)
        assert "free" not in c.keys() and c.count("held") == 1 and c.held("held") == 1
        clock.advance(3600)
        assert c.acquire("held", 0) and c.count("held") == 2  # never dropped: its holder lives
        assert not c.acquire("held", 0)
    shmwin.unlink(name)


def test_a_reused_row_starts_empty_past_dead_holders_entries(name):
    """A key whose holders went (their entries left in its row) goes idle, and a new key takes
    its row: the row is emptied as a copied empty row would be -- its top word 0, every entry
    under the old top free -- writing only those entries (format 11's empty hook)."""
    clock = ManualClock(1_000 * S)
    with Concurrency(name, 3, capacity=2, idle="1s", processes=8, clock=clock) as c:
        assert c.acquire("held", 0)
        gone = [Concurrency.attach(name, clock=clock) for _ in range(2)]
        assert all(g.acquire("gone", 0) for g in gone)
        for g in gone:  # gone holding it: their stripes given back, their entries left behind
            g.close()
        q = c.window._backend._q  # type: ignore[attr-defined]
        gone_top = _holder_word(c, "gone", 0) - 1
        assert q[gone_top] == 2 and q[gone_top + 1] != 0 and q[gone_top + 3] != 0  # dead, still there
        assert c.count("gone") == 0
        clock.advance(5)
        with pytest.raises(KeyTableFullError):
            for i in range(64):
                assert c.acquire(f"new{i}", 0)
        new = next(k for k in c.keys() if k != "held")
        top = _holder_word(c, new, 0) - 1
        assert top == gone_top and q[top] == 1, "the new key did not take the row, or kept its top"
        assert [q[top + 1 + 2 * i] != 0 for i in range(3)] == [True, False, False]
        assert c.count(new) == 1 and c.acquire(new, 0) and c.acquire(new, 0) and not c.acquire(new, 0)
    shmwin.unlink(name)


# -- real processes ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_four_processes_never_more_than_the_limit_at_once(name, method):
    ctx = mp.get_context(method)
    inside, most, violations = ctx.Value("i", 0), ctx.Value("i", 0), ctx.Value("i", 0)
    with Concurrency(name, 2) as c:
        work = (name, "k", 15, inside, most, violations, ctx.Barrier(4), DEADLINE_S)
        procs = [ctx.Process(target=concurrency_holder, args=work) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 4
        assert violations.value == 0, "count() saw more holders than the limit"
        assert most.value == 2, f"at most {most.value} holders at once: the limit is 2"
        assert c.count("k") == 0
    shmwin.unlink(name)


HOLDER = """
import sys, shmwin
c = shmwin.Concurrency.attach(sys.argv[1])
got = [c.acquire("k", timeout=0) for _ in range(int(sys.argv[2]))]
print(" ".join(str(int(g)) for g in got), c.count("k"), flush=True)
sys.stdin.read()  # held until killed (or stdin closes)
"""


def test_a_sigkilled_holders_slots_come_back_within_seconds(name):
    with Concurrency(name, 3) as c:
        assert c.acquire("other", 0)
        child = python_c(HOLDER, name, "2")
        try:
            assert child.stdout is not None
            assert child.stdout.readline().split() == ["1", "1", "2"]
            assert c.count("k") == 2
            assert c.acquire("k", 0) and not c.acquire("k", 0)  # 2 theirs + 1 ours
            child.send_signal(signal.SIGKILL)
            child.wait(DEADLINE_S)
        finally:
            child.kill()
            child.wait()
        # the kernel's word: its stripe's mutex is owner-dead now, no timeout to wait out
        poll_until(lambda: c.count("k") == 1, "the dead holder's 2 slots come back")
        assert c.acquire("k", 0) and c.acquire("k", 0) and not c.acquire("k", 0)
        assert c.count("other") == 1 and c.held("k") == 3
    shmwin.unlink(name)


def test_a_holder_that_exits_without_releasing_gives_its_slots_back(name):
    with Concurrency(name, 2) as c:
        child = python_c(HOLDER, name, "2")
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["1", "1", "2"]
        child.stdin.close()  # it exits normally, never releasing
        child.wait(DEADLINE_S)
        poll_until(lambda: c.count("k") == 0, "an exited holder's slots come back")
        assert c.acquire("k", 0) and c.acquire("k", 0)
    shmwin.unlink(name)


ATTACHER = """
import sys, shmwin
c = shmwin.Concurrency.attach(sys.argv[1])
print(c.limit, c.count("a"), c.count("b"), c.count("none"), sorted(c.holders().items()), flush=True)
c.close()
"""


def test_an_unrelated_process_attaching_by_name_sees_the_same_counts(name):
    with Concurrency(name, 5) as c:
        for _ in range(3):
            assert c.acquire("a", 0)
        assert c.acquire("b", 0)
        child = python_c(ATTACHER, name)
        out, _ = child.communicate(timeout=60)
        assert child.returncode == 0
        assert out.strip() == "5 3 1 0 [('a', 3), ('b', 1)]"
    shmwin.unlink(name)


WAITER = """
import sys, time, shmwin
c = shmwin.Concurrency.attach(sys.argv[1])
print("full" if c.count("k") == c.limit else "not full", flush=True)
started = time.monotonic()
got = c.acquire("k", timeout=float(sys.argv[2]))
print(int(got), round(time.monotonic() - started, 3), c.held("k"), flush=True)
sys.stdin.read()
"""


def test_a_waiting_acquire_takes_the_slot_another_process_gives_back(name):
    with Concurrency(name, 1) as c:
        assert c.acquire("k", 0)
        child = python_c(WAITER, name, str(DEADLINE_S))
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().strip() == "full"
            time.sleep(0.2)  # let it wait a little (it would take the slot whenever it comes)
            c.release("k")
            got, took, held = child.stdout.readline().split()
            assert (got, held) == ("1", "1"), "the waiter did not get the slot given back"
            assert 0.1 < float(took) < DEADLINE_S
            assert c.count("k") == 1 and not c.acquire("k", 0)
            child.stdin.close()
            child.wait(DEADLINE_S)
        finally:
            child.kill()
            child.wait()
        poll_until(lambda: c.count("k") == 0, "the waiter's slot comes back when it exits")
    shmwin.unlink(name)


def test_a_waiting_acquire_gives_up_at_its_timeout(name):
    with Concurrency(name, 1) as c:
        assert c.acquire("k", 0)
        child = python_c(WAITER, name, "0.3")
        out, _ = child.communicate("", timeout=60)
        full, result = out.strip().splitlines()
        got, took, held = result.split()
        assert full == "full" and got == "0" and held == "0"
        assert 0.25 < float(took) < 3.0
    shmwin.unlink(name)


def _forked_child(name: str, q) -> None:  # type: ignore[no-untyped-def]
    c = Concurrency.attach(name)
    try:
        q.put((c.held("k"), c.count("k")))
        c.close()
        q.put("closed")
    except BaseException as exc:
        q.put(repr(exc))


def test_a_forked_child_holds_none_of_its_parents_slots(name):
    ctx = mp.get_context("fork")
    with Concurrency(name, 3) as c:
        assert c.acquire("k", 0)

        def child(q) -> None:  # type: ignore[no-untyped-def]
            try:
                with pytest.raises(NotHeldError):
                    c.release("k")  # the parent's handle, in the child: its slot is the parent's
                assert c.acquire("k", 0)  # the child's own slot
                q.put((c.held("k"), c.count("k")))
            except BaseException as exc:
                q.put(repr(exc))

        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        assert q.get(timeout=60) == (1, 2)
        p.join(60)
        assert p.exitcode == 0
        poll_until(lambda: c.count("k") == 1, "the child's slot comes back when it exits")
        assert c.held("k") == 1
    shmwin.unlink(name)


# -- the tools ---------------------------------------------------------------------------------


def test_ls_and_show_list_the_role_and_the_holders_per_key(name):
    import json

    from support.cli_support import cli

    with Concurrency(name, 3) as c:
        for key, n in (("a", 2), ("b", 1)):
            for _ in range(n):
                assert c.acquire(key, 0)
        listed = json.loads(cli("ls", "--json", name).stdout)["windows"]
        assert [row["role"] for row in listed] == ["concurrency"]
        assert "concurrency" in cli("ls", name, columns=120).stdout
        shown = cli("show", name, columns=120).stdout
        assert "per-key concurrency" in shown and "limit 3 holders per key: 2 keys held, 3 holders" in shown
        assert "2  a" in shown and "1  b" in shown, shown
        snap = json.loads(cli("show", "--json", name).stdout)
        assert snap["role"] == "concurrency" and snap["top"] == [["a", 2], ["b", 1]]
        assert snap["concurrency"]["limit"] == 3 and snap["concurrency"]["total"] == 3
        assert "2 of its 3 slots held now" in cli("show", name, "--key", "a", columns=120).stdout
    shmwin.unlink(name)


def test_the_prometheus_export_has_the_holders(name):
    pytest.importorskip("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families

    from shmwin.integrations.prometheus import exposition

    with Concurrency(name, 4) as c:
        for key, n in (("a", 3), ("b", 1)):
            for _ in range(n):
                assert c.acquire(key, 0)
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(exposition([name], top_keys=1))
            for s in f.samples
        }
        assert samples[("shmwin_concurrency_limit", (("window", name),))] == 4
        assert samples[("shmwin_concurrency_holders", (("key", ""), ("window", name)))] == 4
        assert samples[("shmwin_concurrency_holders", (("key", "a"), ("window", name)))] == 3
        assert ("shmwin_concurrency_holders", (("key", "b"), ("window", name))) not in samples  # top 1 only
        assert samples[("shmwin_window_keys", (("window", name),))] == 2
    shmwin.unlink(name)


def test_rebuilds_drop_idle_keys_never_a_held_one(name):
    """The key table's rebuilds (as it grows) drop every idle key; one with a live holder
    stays, with its holder, however long since its last acquire."""
    clock = ManualClock(1_000 * S)
    with Concurrency(name, 2, idle="1s", clock=clock) as c:
        assert c.acquire("held", 0)
        for i in range(100):
            assert c.acquire(f"old{i}", 0)
            c.release(f"old{i}")
        clock.advance(3600)
        for i in range(300):
            assert c.acquire(f"new{i}", 0)
            c.release(f"new{i}")
        keys = c.keys()
        assert not any(str(k).startswith("old") for k in keys), "idle keys kept"
        assert "held" in keys and c.count("held") == 1 and c.held("held") == 1
        c.release("held")
        assert c.count("held") == 0
    shmwin.unlink(name)


# -- junk in the segment -------------------------------------------------------------------------


def _holder_word(c: Concurrency, key: str, entry: int) -> int:
    """The index (int64 words of the mapping) of holder entry ``entry``'s stripe word."""
    b = c.window._backend  # type: ignore[attr-defined]
    row, _ = b._core.find(key)
    return (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0] + 1 + 2 * entry


# slots past MAX_CONCURRENCY (a slot count past the limit is sound since format 11: a lowered limit)
TOO_MANY = 1 | (MAX_CONCURRENCY + 1) << 32


@pytest.mark.parametrize("junk", [-1, 2**63 - 1, 1, TOO_MANY, 1000 | 1 << 32, 0 | 1 << 32])
def test_a_junk_holder_entry_is_a_corrupt_segment_error(name, junk):
    from shmwin.errors import CorruptSegmentError

    with Concurrency(name, 3, processes=8) as c:
        assert c.acquire("k", 0) and c.acquire("ok", 0)
        q = c.window._backend._q  # type: ignore[attr-defined]
        q[_holder_word(c, "k", 1)] = junk  # a free entry, spoilt, below the row's top word:
        q[_holder_word(c, "k", 0) - 1] = 2  # (an entry past it is never read: format 11)
        for call in (lambda: c.acquire("k", 0), lambda: c.count("k"), lambda: c.release("k")):
            with pytest.raises(CorruptSegmentError, match="impossible holder entry"):
                call()
        assert c.count("ok") == 1 and c.acquire("ok", 0)  # other keys go on
        q[_holder_word(c, "k", 1)] = 0
        assert c.count("k") == 1
    shmwin.unlink(name)


@pytest.mark.parametrize("top", [-1, 9, 2**63 - 1, -(2**63)])
def test_a_junk_top_word_looks_at_every_entry(name, top):
    """The row's top word bounds the entries read: junk there (outside 0..processes) reads
    them all, so a holder past it is still counted -- more read, never a holder fewer."""
    with Concurrency(name, 2, processes=8) as c, Concurrency.attach(name) as other:
        assert c.acquire("k", 0) and other.acquire("k", 0)
        q = c.window._backend._q  # type: ignore[attr-defined]
        q[_holder_word(c, "k", 0) - 1] = top
        assert c.count("k") == 2 and not c.acquire("k", 0)
        other.release("k")
        assert c.acquire("k", 0) and c.count("k") == 2
    shmwin.unlink(name)


def test_the_top_word_goes_down_as_the_last_holders_leave(name):
    """Entries from the top on are free: it goes up as holders come, down when the last one
    under it leaves (so a call reads as many entries as the key has holders, not processes)."""
    with Concurrency(name, 3, processes=8) as a, Concurrency.attach(name) as b, Concurrency.attach(name) as d:
        q = a.window._backend._q  # type: ignore[attr-defined]
        assert a.acquire("k", 0) and b.acquire("k", 0) and d.acquire("k", 0)
        top = _holder_word(a, "k", 0) - 1
        assert q[top] == 3
        b.release("k")
        assert q[top] == 3  # a free entry under a held one
        d.release("k")
        assert q[top] == 1  # the last two gone: down past both
        assert b.acquire("k", 0) and q[top] == 2
        a.release("k")
        b.release("k")
        assert q[top] == 0
    shmwin.unlink(name)


def test_a_junk_claim_word_makes_an_entry_dead_never_a_crash(name):
    with Concurrency(name, 2) as c:
        assert c.acquire("k", 0)
        q = c.window._backend._q  # type: ignore[attr-defined]
        q[_holder_word(c, "k", 0) + 1] = -(2**63)  # our entry names another claim: not ours, dead
        assert c.count("k") == 0 and c.held("k") == 0
        assert c.acquire("k", 0) and c.acquire("k", 0) and not c.acquire("k", 0)
    shmwin.unlink(name)
