"""Fail points: hit, exact: a log ring of hit times.

The harness and the rules it checks are in tests/support/failpoints.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import failpoints as fp
from support.failpoints import LOCK_TIMEOUT, PROGRESS, SIGNALS, T0, S

from shmwin import Limiter, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints]


class ExactModel:
    """An exact limiter's rule: a hit counts while it is at most P old (limits' moving window)."""

    def __init__(self, limit: int, period_ns: int):
        self.limit, self.period_ns, self.times = limit, period_ns, []  # type: list[int]

    def used(self, now: int) -> int:
        return sum(1 for t in self.times if t >= now - self.period_ns)

    def hit(self, now: int) -> bool:
        if self.used(now) >= self.limit:
            return False
        self.times.append(now)
        return True


EXACT_PRE_HITS = [T0, T0 + 10 * S, T0 + 20 * S, T0 + 20 * S, T0 + 30 * S]
EXACT_SCHEDULE = [(0, "here", 3), (5, "child", 3), (5, "here", 4), (10, "child", 4), (0.5, "here", 3),
                  (30, "child", 12), (20, "here", 12), (61, "here", 12)]  # fmt: skip


def _exact_hits(name: str, clock_path: Path, key: str, count: int) -> list[bool]:
    with Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=LOCK_TIMEOUT) as lim:
        return [bool(fp.promptly(lim.hit, key)) for _ in range(count)]


@pytest.mark.parametrize("exact", [True, 3], ids=["log", "merging-log"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_hit_exact(make_name, tmp_path, exact, sig):
    """An exact limiter's hit ("10/minute", a log of 10 times, or of 3, which merges) struck
    after each of its stores: every returned hit stays counted until P after it, the struck one
    counts at most once (a log of 10) or errs high (a torn merge), and the limit holds in every
    interval afterwards, for this process and another."""

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"exact{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        lim = Limiter(name, "10/minute", exact=exact, capacity=16, clock=clock, lock_timeout=LOCK_TIMEOUT)
        try:

            def before(report):
                mine = Limiter.attach(name, clock=ManualClock(path=clock_path), lock_timeout=5)
                for at in EXACT_PRE_HITS:
                    clock.set(at)
                    assert mine.hit("k")
                    report[PROGRESS] += 1
                clock.set(T0 + 50 * S)
                return mine

            with fp.strike("hit", n, sig, before, lambda mine: mine.hit("k")) as s:
                assert s.report[PROGRESS] == len(EXACT_PRE_HITS)
                now = clock()
                model = ExactModel(10, 60 * S)
                model.times += EXACT_PRE_HITS
                used = fp.promptly(lim.stats, "k").used  # the dead holder's lock: repaired at once
                inflight = used - model.used(now)
                if exact is True:
                    assert inflight in (0, 1), f"returned hits lost, or the one in flight twice: {inflight}"
                    assert inflight == 1 or not s.completed, "the hit completed: it is counted"
                else:  # a torn merge counts the oldest entry's hits (3 here) twice: more, never less
                    assert inflight >= 0, f"a merge lost returned hits: {inflight}"
                    assert inflight in (0, 1, 3) and (inflight == 1 or not s.completed), inflight
                struck = [now] if inflight == 1 else []  # counted: the struck hit was admitted
                admitted = [*EXACT_PRE_HITS, *struck]
                model.times += struck
                for advance, who, count in EXACT_SCHEDULE:
                    now = clock.advance(advance)
                    if who == "here":
                        got = [bool(fp.promptly(lim.hit, "k")) for _ in range(count)]
                    else:
                        got = fp.in_child(_exact_hits, name, clock_path, "k", count)
                    if exact is True:
                        want = [model.hit(now) for _ in range(count)]
                        assert got == want, (
                            f"{who} at T0+{(now - T0) / S}s: admitted {got}, the rule says {want}"
                        )
                        assert lim.stats("k").used == model.used(now)
                    else:  # merged times leave late: never more admitted than the exact rule would
                        exact_rule = ExactModel(10, 60 * S)
                        exact_rule.times = list(model.times)
                        assert sum(got) <= sum(exact_rule.hit(now) for _ in range(count))
                        model.times += [now] * sum(got)
                    admitted += [now] * sum(got)
                fp.assert_never_over(lim, admitted)
            return s.fired
        finally:
            fp.drop(lim, name)

    # intent, the run's total, the entry's hits and time, the run's position (published), the
    # row's last write; a merge first moves the oldest's hits, drops it from the run, empties it
    assert fp.every_store(strike_at) == (6 if exact is True else 9)
