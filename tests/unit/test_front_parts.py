"""``backends.contract``'s pieces every front shares (issue #28): ``Of``, a read-only attribute
that is one of the front's parts', and ``Closing``, the context manager that closes it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from shmwin.backends.contract import Closing, Of

pytestmark = pytest.mark.unit


class _Front(Closing):
    buckets = Of[int]("n_buckets")
    closed = Of[bool]("closed", "_backend", "True once closed.")

    def __init__(self) -> None:
        self._g = SimpleNamespace(n_buckets=10)
        self._backend = SimpleNamespace(closed=False)

    def close(self) -> None:
        self._backend.closed = True


def test_a_part_s_attribute_reads_through_and_follows_it():
    front = _Front()
    assert (front.buckets, front.closed) == (10, False)
    front._backend = SimpleNamespace(closed=True)  # the part replaced: the attribute follows
    assert front.closed is True


def test_it_is_read_only_and_says_whose_it_is():
    with pytest.raises(AttributeError, match=r"^_Front\.buckets is read-only$"):
        _Front().buckets = 3  # type: ignore[misc]


def test_its_doc_is_its_own_on_the_class():
    assert _Front.buckets.__doc__ == "The geometry's ``n_buckets`` (read-only)."
    assert _Front.closed.__doc__ == "True once closed."


def test_closing_closes_after_the_block_even_when_it_raises():
    with _Front() as front:
        assert not front.closed
    assert front.closed
    with pytest.raises(KeyError), _Front() as raised:
        raise KeyError("x")
    assert raised.closed
