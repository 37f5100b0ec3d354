"""What the CLI and the Prometheus export ask of each overload tool: its ``describe()`` by name
(None when the name is not one of its kind), which starts with the facts of its window."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import GeometryMismatchError
from ..rate import NS_PER_S


class Describable(Protocol):
    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def described(
    attach: Callable[[], Describable], not_one: tuple[type[Exception], ...] = (GeometryMismatchError,)
) -> dict[str, Any] | None:
    """``attach().describe()``, detached again whatever it raised; None if ``attach()`` raised
    one of ``not_one`` (the segment under the name is not of that kind)."""
    try:
        tool = attach()
    except not_one:
        return None
    try:
        return tool.describe()
    finally:
        tool.close()


def window_facts(kind: str, window: Any) -> dict[str, Any]:
    """The start of a windowed tool's ``describe()``: its kind, its name, and its window's span
    (seconds) and buckets."""
    span_s = window.span_ns / NS_PER_S
    return {"kind": kind, "name": window.name, "window_s": span_s, "buckets": window.buckets}
