"""What every role's engine shares: the shared-memory window it drives, checked to be of its
role, and the lock-free readings the tools take of its rows.

An engine is the one place a role's native methods are called from (``core/counters.c``,
``moving.c``, ``concurrency.c``, ``lease.c``): the fronts and adapters above the backend
(``integrations/``, ``concurrency.py``, ``token_bucket.py``, ``inspector/``) hold an engine and
never the core.
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeVar

from .... import _core
from ....errors import GeometryMismatchError, NotSupportedError
from ...contract import Key
from .. import native
from ..window import ShmWindow

E = TypeVar("E", bound="RoleEngine")
# a hot path's doc: the core's own method, read through contract.Of("method", "_core")
HOT_PATH = "The hot path, ``{}``: the core's own method (bind it once: no Python frame between)."


class RoleEngine:
    """One keyed segment of ``role``, and its core's sections for that role."""

    role: ClassVar[str]
    _core_type: ClassVar[type[_core.Core]] = _core.Core  # its segments' core type (_core.open builds it)

    def __init__(self, window: Any):
        """``window``: a front (``Window``, ``Limiter``) or a :class:`ShmWindow` itself."""
        backend = getattr(window, "_backend", window)
        if not isinstance(backend, ShmWindow):
            name = getattr(window, "name", window)
            raise NotSupportedError(f"{name!r}: role {self.role!r} lives in shared memory only")
        if backend.geometry.role != self.role:
            role = backend.geometry.role
            raise GeometryMismatchError(f"{backend.name!r} is not a {self.role} segment (role {role!r})")
        self.window = backend
        # the role's native type (typed by _core.pyi; each engine names its own): the role's sections
        self._core: _core.Core = native.core_as(backend._core, self._core_type)

    def now_ns(self) -> int:
        """The segment's clock now (its writers' clock)."""
        return int(self.window._clock())

    def all_keys(self) -> list[Key]:
        """Every key of the segment, idle ones too (a holder keeps its key whatever its age)."""
        return [key for _, key, _ in self.window._keyed().entries()]

    def key_states(self, words: int) -> list[tuple[Key, tuple[int, ...]]]:
        """``(key, its first ``words`` state words)`` of every live key, lock-free."""
        return self.window._key_states(words)

    def values(self, now_ns: int) -> list[tuple[Key, Any]]:
        """``(key, value)`` of every key, as the tools show it (the role's reader)."""
        raise NotImplementedError
