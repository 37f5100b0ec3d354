"""``backends.options.spelled_out``: keywords written once in a TypedDict group, shown and
checked as if each signature listed them (the fronts' shared store keywords, issue #28)."""

from __future__ import annotations

import inspect
from typing import TypedDict

import pytest

from shmwin.backends.options import Creating, spelled_out

pytestmark = pytest.mark.unit


class _Extra(Creating, total=False):
    colour: str


@spelled_out(_Extra, {"colour": "red"})
def _made(name: str, *, size: int = 1, **options: object) -> tuple[str, int, dict[str, object]]:
    return name, size, dict(options)


def _plain(name: str, *, size: int = 1) -> None: ...


def test_each_keyword_of_the_group_is_a_keyword_only_parameter_with_its_default():
    params = inspect.signature(_made).parameters
    assert list(params) == ["name", "size", "clock", "perm", "lock_timeout", "colour"]
    assert {n: p.default for n, p in params.items() if n != "name"} == {
        "size": 1, "clock": None, "perm": None, "lock_timeout": None, "colour": "red",
    }  # fmt: skip
    assert params["perm"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["perm"].annotation == "int | None"


def test_the_call_passes_only_what_was_given():
    assert _made("a", perm=0o640) == ("a", 1, {"perm": 0o640})


def test_an_unknown_keyword_is_python_s_own_type_error():
    with pytest.raises(TypeError) as plain:
        _plain("a", bogus=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError) as spelled:
        _made("a", bogus=1)
    assert str(spelled.value).replace("_made", "_plain") == str(plain.value)


def test_a_group_key_the_function_spells_itself_is_not_shown_twice():
    class Sized(TypedDict, total=False):
        size: int

    @spelled_out(Sized)
    def f(*, size: int = 2, **options: object) -> None: ...

    assert list(inspect.signature(f).parameters) == ["size"]
