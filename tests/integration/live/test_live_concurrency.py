"""A concurrency segment opened with another limit: on_change= is a Limiter's; "raise" says what
to do for a concurrency limit (not a window's buckets), "carry" and "reset" change it live."""

from __future__ import annotations

import pytest

import shmwin
from shmwin import Concurrency

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("on_change", ["raise"])  # "carry" and "reset": tests/integration/live/
def test_another_limit_is_a_clear_error(name, on_change):
    with Concurrency(name, 3) as conc:
        assert conc.acquire("k", timeout=0)
        with pytest.raises(shmwin.GeometryMismatchError) as err:
            Concurrency(name, 5, on_change=on_change)
        message = str(err.value)
        assert "limit 3, not 5" in message and f"shmwin rm {name}" in message
        assert "buckets" not in message
        assert conc.count("k") == 1  # the slot held stays held
        conc.release("k")
        conc.unlink()


def test_the_same_limit_takes_on_change(name):
    with Concurrency(name, 3, on_change="carry") as conc, Concurrency(name, 3, on_change="raise") as again:
        assert conc.acquire("k", timeout=0) and again.count("k") == 1
        conc.release("k")
        conc.unlink()


def test_a_bad_on_change_is_a_clear_error(name):
    with pytest.raises(ValueError, match="on_change must be one of"):
        Concurrency(name, 3, on_change="keep")
