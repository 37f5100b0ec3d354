"""The keywords a front passes through to its backend's open, named once.

``Window``, ``Distribution``, ``Limiter`` and ``TokenBucket`` each take the same store
keywords (``clock``, ``perm``, ``lock_timeout``, ...) on their constructor, ``create`` and
``attach``. They are written here once, as ``TypedDict`` groups that a signature takes as
``**options: Unpack[Group]`` (PEP 692: a type checker sees every keyword and its type), and
:func:`spelled_out` shows them to ``help()`` and ``inspect.signature`` one by one, with their
defaults, as if each signature had listed them. A keyword no group names is still a
``TypeError``, in Python's own words.

Every store keyword defaults to None: "the backend's default" (``backends.open`` drops a None).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ForwardRef, TypedDict, TypeVar

if TYPE_CHECKING:
    from ..clock import Clock

F = TypeVar("F", bound=Callable[..., Any])
NO_DEFAULTS: Mapping[str, Any] = MappingProxyType({})


class Creating(TypedDict, total=False):
    """What every create of a segment takes: the clock, the segment's mode bits, the lock's wait."""

    clock: Clock | None
    perm: int | None
    lock_timeout: float | None


class Opening(Creating, total=False):
    """A create that may attach instead: it waits ``ready_timeout`` for a segment another
    process is still making."""

    ready_timeout: float | None


class Remote(TypedDict, total=False):
    """Where the store is (a URL; None: shared memory), and how long a remote one may take."""

    backend: str | None
    timeout: float | None


class CreatingAnywhere(Creating, Remote, total=False):
    """A create on any backend (``Window.create``)."""


class OpeningAnywhere(Opening, Remote, total=False):
    """A create-or-attach, or an attach, on any backend."""


def _annotation(value: Any) -> Any:
    """A TypedDict's annotation as the function's own read (a string, under PEP 563)."""
    return value.__forward_arg__ if isinstance(value, ForwardRef) else value


def spelled_out(group: type, defaults: Mapping[str, Any] = NO_DEFAULTS) -> Callable[[F], F]:
    """``fn(..., **options: Unpack[group])`` shown and checked as keyword-only parameters: one
    per key of ``group`` (a TypedDict), defaulting to ``defaults``' value or None. An unknown
    keyword raises the TypeError Python raises for a spelled-out signature."""

    def spell(fn: F) -> F:
        names = tuple(group.__annotations__)
        shown = inspect.signature(fn)
        fixed = [p for p in shown.parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in fixed}
        fixed += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(name),
                              annotation=_annotation(group.__annotations__[name]))
            for name in names if name not in taken
        ]  # fmt: skip
        allowed = frozenset(names) | taken

        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> Any:
            for name in kwargs:
                if name not in allowed:
                    raise TypeError(f"{fn.__qualname__}() got an unexpected keyword argument {name!r}")
            return fn(*args, **kwargs)

        checked.__signature__ = shown.replace(parameters=fixed)  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return spell
