"""The moving window's quantum as the docs state it is the one the code uses (#33: docs/
limits-storage.md said 1 ns for periods up to 8.6 s while ``moving_quantum_shift`` gives 32 ns).

Every "<q> <unit> for <period>" figure the pages give next to the word "quantum" is checked
against ``format.moving_quantum_shift`` (the core reads the same table)."""

from __future__ import annotations

import re

import pytest
from support.helpers import ROOT

from shmwin.backends.shm.format import moving_quantum_shift

PAGES = ("docs/limits-storage.md", "docs/deploying.md", "shmwin/integrations/limits_moving.py")
UNIT_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000}
PERIOD_NS = {"periods up to 8.6 s": 2**33, "a period up to 8.6 s": 2**33, "a minute": 60 * 10**9,
             "a day": 86_400 * 10**9}  # fmt: skip
FIGURE = re.compile(r"(\d+) (ns|us|ms)\s+for\s+(periods up to 8\.6 s|a period up to 8\.6 s|a minute|a day)")


def _figures(text: str) -> list[tuple[int, str]]:
    """(quantum ns as stated, the period it is stated for) near each mention of "quantum"."""
    found = []
    for mention in re.finditer("quantum", text):
        near = " ".join(text[mention.start() : mention.start() + 400].split())
        found += [(int(q) * UNIT_NS[unit], period) for q, unit, period in FIGURE.findall(near)]
    return found


@pytest.mark.parametrize("page", PAGES)
def test_the_stated_quantum_is_the_codes(page):
    figures = _figures((ROOT / page).read_text())
    assert figures, f"{page} states no quantum figure"
    for stated_ns, period in figures:
        actual_ns = 2 ** moving_quantum_shift(PERIOD_NS[period])
        # to three figures: "524 us" is 2**19 ns, 524,288 ns
        assert abs(stated_ns - actual_ns) * 1000 <= actual_ns, (page, period, stated_ns, actual_ns)
