"""Fail points: a Distribution's record (unkeyed, keyed) and record_many, struck at every
store (core/distribution.c: the bucket's recycling, then the value's bin, min, max, sum and
count, ring after ring), by SIGKILL and by an exception.

The harness is tests/support/failpoints.py. A small sketch (9 bins: 5 words per bucket) keeps
the section's stores few enough to strike every one. After each strike a fresh process
records one value at once (no lock held, nothing to repair) and reads: every value recorded
before is still there, whole; the struck value counts at most once per resolution, and once
a store n leaves it counted, so does every later n; nothing of the recycled bucket's old
values survives; a completed section (the exception) counts its value whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.failpoints import (
    LOCK_TIMEOUT,
    SIGNALS,
    T0,
    assert_monotone,
    every_store,
    in_child,
    promptly,
    strike,
)

from shmwin import Distribution, ManualClock

pytestmark = [pytest.mark.integration, pytest.mark.failpoints, pytest.mark.sanitize]

SMALL: dict[str, Any] = {"resolutions": ("1m/1s", "1h/1m"), "relative_error": 0.2, "value_range": (1.0, 10.0)}
MODES: dict[str, dict[str, Any]] = {"record": {}, "record_keyed": {"capacity": 8}, "record_many": {}}
CONFIRMED = (2.0, 3.0, 5.0)
SURVIVOR = 1.25


def _open(name: str, clock_path: Path, section: str) -> Distribution:
    clock = ManualClock(path=clock_path)
    return Distribution(name, **SMALL, **MODES[section], clock=clock, lock_timeout=LOCK_TIMEOUT)


def _survive(name: str, clock_path: Path, section: str, key: str | None) -> dict[str, Any]:
    """A fresh process: one record at once, then what each resolution holds."""
    d = _open(name, clock_path, section)
    promptly(d.record, SURVIVOR, key=key)
    out = {}
    for last in ("1s", "1h"):
        m = d._merged(last, key)
        out[last] = (m.count, int(m.bins.sum()), m.sum, m.min, m.max, d.quantile(0.0, last=last, key=key))
    d.close()
    return out


@pytest.mark.parametrize("section", ["record", "record_keyed", "record_many"])
@pytest.mark.parametrize("sig", SIGNALS)
def test_record(make_name, tmp_path, sig, section):
    key = "k" if section == "record_keyed" else None
    struck = (7.0, 8.0) if section == "record_many" else (7.0,)
    seen: dict[int, tuple[int, ...]] = {}

    def strike_at(n: int) -> bool:
        name, clock_path = make_name(f"{section}{n}"), tmp_path / f"clock{n}"
        clock = ManualClock(T0, path=clock_path)
        d = _open(name, clock_path, section)
        try:
            for v in CONFIRMED:
                d.record(v, key=key)
            clock.advance(1.5)  # the struck record opens a new 1 s bucket: its recycling is struck too

            def op(victim: Distribution) -> None:
                if section == "record_many":
                    victim.record_many(list(struck), key=key)
                else:
                    victim.record(struck[0], key=key)

            with strike(section, n, sig, lambda report: _open(name, clock_path, section), op) as s:
                got = in_child(_survive, name, clock_path, section, key)
            newest, hour = got["1s"], got["1h"]
            counted = hour[0] - len(CONFIRMED) - 1
            assert 0 <= counted <= len(struck), f"store {n}: {hour}"
            if s.completed:
                assert counted == len(struck) and newest[0] == 1 + len(struck)
            # what was recorded before is whole: every confirmed value, the survivor's, exact
            assert hour[3] == SURVIVOR == hour[5] and hour[4] >= max(CONFIRMED)
            assert hour[2] >= sum(CONFIRMED) + SURVIVOR
            # the recycled 1 s bucket kept nothing of before it: the survivor's value, the struck ones
            assert newest[3] == SURVIVOR and newest[4] in (SURVIVOR, *struck)
            for count, bins, *_ in (newest, hour):  # a torn value may be in its bin, not yet its count
                assert count <= bins <= count + len(struck)
            seen[n] = tuple(int(counted > i) for i in range(len(struck)))
            return s.fired
        finally:
            d.unlink()

    stores = every_store(strike_at)
    assert stores >= 10  # the recycling's and the value's stores, in two rings
    assert_monotone(seen, f"{section}'s struck value")
