"""The public constructors' and openers' signatures, held as they are: a fold of their shared
keywords (issue #28) must leave every name, kind, default and annotation where a caller,
``help()`` or a type checker meets it. Keyword-only parameters are compared as a set (their
order is no part of a call); positional ones in order."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import shmwin
from shmwin.overload.inflight import InFlight

pytestmark = pytest.mark.contract


def shape(fn: Any) -> str:
    """The signature with its keyword-only parameters sorted by name."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    keyword_only = sorted((p for p in params if p.kind is p.KEYWORD_ONLY), key=lambda p: p.name)
    others = [p for p in params if p.kind is not p.KEYWORD_ONLY]
    return str(sig.replace(parameters=others + keyword_only))


OPENERS: dict[str, Any] = {
    "Window": shmwin.Window,
    "Window.create": shmwin.Window.create,
    "Window.attach": shmwin.Window.attach,
    "Window.open_geometry": shmwin.Window.open_geometry,
    "Limiter": shmwin.Limiter,
    "Limiter.attach": shmwin.Limiter.attach,
    "TokenBucket": shmwin.TokenBucket,
    "TokenBucket.attach": shmwin.TokenBucket.attach,
    "Distribution": shmwin.Distribution,
    "Distribution.create": shmwin.Distribution.create,
    "Distribution.attach": shmwin.Distribution.attach,
    "AdaptiveLimiter": shmwin.AdaptiveLimiter,
    "AdaptiveLimiter.attach": shmwin.AdaptiveLimiter.attach,
    "Breaker": shmwin.Breaker,
    "Breaker.attach": shmwin.Breaker.attach,
    "Shedder": shmwin.Shedder,
    "Shedder.attach": shmwin.Shedder.attach,
    "InFlight": InFlight,
    "InFlight.attach": InFlight.attach,
    "Concurrency": shmwin.Concurrency,
    "Concurrency.attach": shmwin.Concurrency.attach,
}

SIGNATURES = {
    "Window": (
        "(name: 'str', span: 'Duration | None' = None, buckets: 'int | None' = None, "
        "fields: 'Fields' = ('count',), *, backend: 'str | None' = None, "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, "
        "dtype: 'str' = 'int64', keyed: 'bool' = False, lock_timeout: 'float | None' = None, "
        "mode: 'str | None' = None, on_error: 'str' = 'raise', on_full: 'str' = 'raise', "
        "perm: 'int | None' = None, ready_timeout: 'float | None' = None, "
        "resolutions: 'tuple[str, ...] | list[str] | None' = None, "
        "stripes: 'int | None' = None, timeout: 'float | None' = None)"
    ),
    "Window.create": (
        "(name: 'str', span: 'Duration | None' = None, buckets: 'int | None' = None, "
        "fields: 'Fields' = ('count',), *, backend: 'str | None' = None, "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, "
        "dtype: 'str' = 'int64', keyed: 'bool' = False, lock_timeout: 'float | None' = None, "
        "mode: 'str | None' = None, perm: 'int | None' = None, resolutions: 'tuple[str, "
        "...] | list[str] | None' = None, stripes: 'int | None' = None, "
        "timeout: 'float | None' = None) -> 'Window'"
    ),
    "Window.attach": (
        "(name: 'str', *, backend: 'str | None' = None, clock: 'Clock | None' = None, "
        "lock_timeout: 'float | None' = None, on_error: 'str' = 'raise', "
        "on_full: 'str' = 'raise', perm: 'int | None' = None, "
        "ready_timeout: 'float | None' = None, timeout: 'float | None' = None) -> 'Window'"
    ),
    "Window.open_geometry": (
        "(name: 'str', want: 'Geometry', *, backend: 'str | None' = None, "
        "clock: 'Clock | None' = None, lock_timeout: 'float | None' = None, "
        "on_full: 'str' = 'raise', perm: 'int | None' = None, "
        "ready_timeout: 'float | None' = None) -> 'Window'"
    ),
    "Limiter": (
        "(name: 'str', rates: 'Rates', *, backend: 'str | None' = None, buckets: 'int' = 20, "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, "
        "decisions: 'bool' = True, exact: 'bool | int' = False, "
        "fallback: 'Rates | None' = None, lock_timeout: 'float | None' = None, "
        "on_change: 'str' = 'carry', on_error: 'str' = 'raise', on_full: 'str' = 'allow', "
        "perm: 'int | None' = None, ready_timeout: 'float | None' = None, "
        "shadow: 'bool' = False, timeout: 'float | None' = None)"
    ),
    "Limiter.attach": (
        "(name: 'str', *, backend: 'str | None' = None, clock: 'Clock | None' = None, "
        "fallback: 'Rates | None' = None, lock_timeout: 'float | None' = None, "
        "on_error: 'str' = 'raise', on_full: 'str' = 'allow', perm: 'int | None' = None, "
        "ready_timeout: 'float | None' = None, shadow: 'bool' = False, "
        "timeout: 'float | None' = None) -> 'Limiter'"
    ),
    "TokenBucket": (
        "(name: 'str', rate: 'str | Rate', *, backend: 'str | None' = None, burst: 'int', "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, "
        "decisions: 'bool' = True, lock_timeout: 'float | None' = None, "
        "on_change: 'str' = 'carry', on_error: 'str' = 'raise', on_full: 'str' = 'allow', "
        "perm: 'int | None' = None, ready_timeout: 'float | None' = None, "
        "shadow: 'bool' = False, timeout: 'float | None' = None)"
    ),
    "TokenBucket.attach": (
        "(name: 'str', *, backend: 'str | None' = None, clock: 'Clock | None' = None, "
        "lock_timeout: 'float | None' = None, on_error: 'str' = 'raise', "
        "on_full: 'str' = 'allow', perm: 'int | None' = None, "
        "ready_timeout: 'float | None' = None, shadow: 'bool' = False, "
        "timeout: 'float | None' = None) -> 'TokenBucket'"
    ),
    "Distribution": (
        "(name: 'str', resolutions: 'Sequence[str] | str' = ('1m/1s', '1h/1m', '24h/1h'), *, "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, keyed: 'bool' = False, "
        "lock_timeout: 'float | None' = None, on_full: 'str' = 'raise', "
        "perm: 'int | None' = None, ready_timeout: 'float | None' = None, "
        "relative_error: 'float' = 0.01, value_range: 'tuple[float, float]' = (1e-06, "
        "100000.0))"
    ),
    "Distribution.create": (
        "(name: 'str', resolutions: 'Sequence[str] | str' = ('1m/1s', '1h/1m', '24h/1h'), *, "
        "capacity: 'int | None' = None, clock: 'Clock | None' = None, keyed: 'bool' = False, "
        "lock_timeout: 'float | None' = None, on_full: 'str' = 'raise', "
        "perm: 'int | None' = None, relative_error: 'float' = 0.01, "
        "value_range: 'tuple[float, float]' = (1e-06, 100000.0)) -> 'Distribution'"
    ),
    "Distribution.attach": (
        "(name: 'str', *, clock: 'Clock | None' = None, lock_timeout: 'float | None' = None, "
        "perm: 'int | None' = None, ready_timeout: 'float | None' = None) -> 'Distribution'"
    ),
    "AdaptiveLimiter": (
        "(name: 'str', rates: 'str | Rate | list[str | Rate] | tuple[str | Rate, ...]', *, "
        "bad: 'float' = 0.5, capacity: 'int' = 10000, clock: 'Clock | None' = None, "
        "error_field: 'str' = 'error', floor: 'float' = 0.1, good: 'float' = 0.05, "
        "health: 'Window | None' = None, last: 'Duration | None' = None, "
        "min_samples: 'int' = 20, ok_field: 'str' = 'ok', perm: 'int' = 384, "
        "refresh: 'Duration' = '100ms', scale: 'int' = 1000)"
    ),
    "AdaptiveLimiter.attach": (
        "(name: 'str', *, bad: 'float' = 0.5, clock: 'Clock | None' = None, "
        "error_field: 'str' = 'error', floor: 'float' = 0.1, good: 'float' = 0.05, "
        "health: 'Window | None' = None, last: 'Duration | None' = None, "
        "min_samples: 'int' = 20, ok_field: 'str' = 'ok', refresh: 'Duration' = '100ms', "
        "scale: 'int' = 1000) -> 'AdaptiveLimiter'"
    ),
    "Breaker": (
        "(name: 'str', window: 'Duration' = '10s', buckets: 'int' = 40, k: 'float' = 1.5, "
        "protection: 'int' = 5, *, acceptable: 'Callable[[Any], bool] | None' = None, "
        "backend: 'str | None' = None, clock: 'Clock | None' = None, "
        "is_failure: 'Callable[[BaseException], bool] | None' = None, perm: 'int' = 384, "
        "refresh: 'Duration' = '1ms', rng: 'Random | None' = None)"
    ),
    "Breaker.attach": (
        "(name: 'str', *, acceptable: 'Callable[[Any], bool] | None' = None, "
        "backend: 'str | None' = None, clock: 'Clock | None' = None, "
        "is_failure: 'Callable[[BaseException], bool] | None' = None, k: 'float' = 1.5, "
        "protection: 'int' = 5, refresh: 'Duration' = '1ms', "
        "rng: 'Random | None' = None) -> 'Breaker'"
    ),
    "Shedder": (
        "(name: 'str', *, buckets: 'int' = 50, clock: 'Clock | None' = None, "
        "cool_off: 'Duration' = '1s', cpu: 'Callable[[], int] | None' = None, "
        "cpu_threshold: 'int' = 900, flying_span: 'Duration' = '10m', "
        "max_processes: 'int' = 128, perm: 'int' = 384, window: 'Duration' = '5s')"
    ),
    "Shedder.attach": (
        "(name: 'str', *, clock: 'Clock | None' = None, cool_off: 'Duration' = '1s', "
        "cpu: 'Callable[[], int] | None' = None, cpu_threshold: 'int' = 900) -> 'Shedder'"
    ),
    "InFlight": (
        "(name: 'str', *, buckets: 'int' = 10, capacity: 'int' = 128, "
        "clock: 'Clock | None' = None, perm: 'int' = 384, rescan: 'Duration' = '100ms', "
        "span: 'Duration' = '10m')"
    ),
    "InFlight.attach": (
        "(name: 'str', *, clock: 'Clock | None' = None, rescan: 'Duration' = '100ms') -> 'InFlight'"
    ),
    "Concurrency": (
        "(name: 'str', limit: 'int', *, capacity: 'int | None' = None, "
        "clock: 'Clock | None' = None, holders: 'int | None' = None, "
        "idle: 'Duration' = '1s', on_change: 'str' = 'carry', perm: 'int | None' = None, "
        "processes: 'int' = 128)"
    ),
    "Concurrency.attach": ("(name: 'str', *, clock: 'Clock | None' = None) -> 'Concurrency'"),
}


@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_the_signature_is_as_it_was(opener: str) -> None:
    assert shape(OPENERS[opener]) == SIGNATURES[opener]


def test_no_keyword_is_folded_out_of_sight() -> None:
    """``help()`` and ``inspect.signature`` show each keyword by name, none as ``**options``."""
    for opener, fn in OPENERS.items():
        kinds = {p.kind for p in inspect.signature(fn).parameters.values()}
        assert inspect.Parameter.VAR_KEYWORD not in kinds, opener
