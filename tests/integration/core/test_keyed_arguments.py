"""A keyed method's arguments, as the core parses them (methods.h, parse_keyed): the key alone,
positional, is the hot path; by keyword, or with the others, it is parsed by name; a call with
no key is a TypeError that names the method, and a wrong keyword or too many arguments too.
One row a keyed method of each role's type that takes keywords."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

import shmwin
from shmwin.backends.shm.roles import cache, moving
from shmwin.geometry import lease_geometry, token_geometry
from shmwin.integrations import limits_fixed, limits_sliding
from shmwin.rate import parse

S = 10**9


def _open(want: Callable[[], Any]) -> Callable[[str], shmwin.Window]:
    return lambda name: shmwin.Window.open_geometry(name, want(), clock=shmwin.ManualClock())


# (method, its second argument's name and a value for it, how to open a segment of its role)
KEYED = {
    "hit": ("cost", 1, None),
    "token_hit": ("cost", 1, _open(lambda: token_geometry(parse("10/second"), 5, 16))),
    "fixed_incr": ("amount", 1, _open(lambda: limits_fixed.geometry(60 * S, 16))),
    "moving_hit": ("cost", 1, _open(lambda: moving.geometry(5, 60 * S, 5, 16))),
    "lease_spend": ("cost", 1, _open(lambda: lease_geometry([parse("10/second")], 16))),
    "counter_incr": ("delta", 1, _open(lambda: cache.geometry(60 * S, 16))),
}


@pytest.fixture(params=sorted(KEYED))
def keyed(request, name) -> Iterator[tuple[str, str, int, Any]]:
    method = request.param
    other, value, opener = KEYED[method]
    if opener is None:  # a limiter's own segment: its core is the limiter's
        lim = shmwin.Limiter(name, "100/minute")
        core = lim._backend._core  # type: ignore[attr-defined]
        closer, unlinker = lim.close, lim.unlink
    else:
        w = opener(name)
        core = w._backend._core  # type: ignore[attr-defined]
        closer, unlinker = w.close, w.unlink
    try:
        yield method, other, value, getattr(core, method)
    finally:
        closer()
        unlinker()


def test_the_key_alone_positional_or_by_keyword_is_taken(keyed):
    _method, other, value, call = keyed
    call("k")  # the hot path: no name looked at
    call(key="k")
    call("k", value)
    call("k", **{other: value})
    call(**{other: value, "key": "k"})


def test_a_call_with_no_key_names_the_method(keyed):
    method, other, value, call = keyed
    with pytest.raises(TypeError, match=rf"^{method}\(\) needs a key$"):
        call()
    with pytest.raises(TypeError, match=rf"^{method}\(\) needs a key$"):
        call(**{other: value})


def test_a_wrong_keyword_or_too_many_arguments_is_a_type_error(keyed):
    method, _other, value, call = keyed
    with pytest.raises(TypeError, match=rf"^{method}\(\) got an unexpected keyword argument 'nope'$"):
        call("k", nope=1)
    with pytest.raises(TypeError, match=rf"^{method}\(\) got a repeated keyword argument 'key'$"):
        call("k", key="k")
    with pytest.raises(TypeError, match=rf"^{method}\(\) takes at most"):
        call("k", value, value, value, value, value, value, value, value)


# (method, what its error says it needs, how to open a segment of its role): methods whose first
# two arguments are both required (methods.h, parse_required)
TWO_REQUIRED = {
    "refund": ("a key and a cost", None),
    "charge": ("a key and a cost", None),
    "sliding_hit": ("a key and a limit", _open(lambda: limits_sliding.geometry(60 * S, 16))),
    "lease_deny": ("key and until_ns", _open(lambda: lease_geometry([parse("10/second")], 16))),
    "lease_refund": ("key and cost", _open(lambda: lease_geometry([parse("10/second")], 16))),
}


@pytest.mark.parametrize("method", sorted(TWO_REQUIRED))
def test_a_call_missing_either_required_argument_says_both(name, method):
    needs, opener = TWO_REQUIRED[method]
    if opener is None:
        front: Any = shmwin.Limiter(name, "100/minute")
    else:
        front = opener(name)
    try:
        call = getattr(front._backend._core, method)
        for args, kwargs in (((), {}), (("k",), {}), ((), {"key": "k"})):
            with pytest.raises(TypeError, match=rf"^{method}\(\) needs {needs}$"):
                call(*args, **kwargs)
        with pytest.raises(TypeError, match=rf"^{method}\(\) got an unexpected keyword argument 'nope'$"):
            call("k", 1, nope=1)
    finally:
        front.close()
        front.unlink()
