"""What the CLI and the Prometheus export ask of each overload tool by name: its ``describe()``,
or None when the name is not one of its kind."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..errors import GeometryMismatchError


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
