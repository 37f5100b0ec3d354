"""What a concurrency's errors say: the shape that differs (not two alike geometries), a junk
holder entry's word in hex, and `shmwin set`'s limit read as ASCII digits only."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.helpers import ROOT

import shmwin
from shmwin import Concurrency
from shmwin.errors import CorruptSegmentError

pytestmark = pytest.mark.integration


def test_another_processes_count_says_what_differs(name):
    with Concurrency(name, 3) as conc:
        with pytest.raises(shmwin.GeometryMismatchError) as err:
            Concurrency(name, 3, processes=64)
        message = str(err.value)
        assert "exists with processes=128" in message and "not processes=64" in message
        assert f"`shmwin rm {name}`" in message
        conc.unlink()


def test_a_junk_holder_entry_shows_its_word_in_hex(name):
    with Concurrency(name, 3, processes=8) as c:
        assert c.acquire("k", 0)
        b = c.window._backend  # type: ignore[attr-defined]
        row, _ = b._core.find("k")
        first = (b._lay.rows_off + row * b._lay.row_bytes) // 8 + b._lay.ring_words[0] + 1
        b._q[first] = 0x7 | 2000 << 32  # stripe 7, 2000 slots: past MAX_CONCURRENCY
        with pytest.raises(CorruptSegmentError) as err:
            c.count("k")
        assert "holder entry 0x7d000000007:" in str(err.value) and "%" not in str(err.value)
        b._q[first] = 0
    shmwin.unlink(name)


@pytest.mark.parametrize("limit", ["3_0", "+3", "\uff13", "\u0663", "3.0", ""])
def test_shmwin_set_takes_a_limit_of_ascii_digits_only(name, limit):
    """int() reads "3_0" as 30 and a fullwidth or Arabic-Indic three as 3: a typo went through."""
    with Concurrency(name, 3) as conc:
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "shmwin", "set", name, limit], capture_output=True,
                              text=True, env=env, timeout=60)  # fmt: skip
        assert done.returncode == 2 and "a whole number of holders, such as 8" in done.stderr, done.stderr
        assert conc.limit == 3
        conc.unlink()
