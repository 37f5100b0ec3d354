"""Role "concurrency": each key's row holds one entry per holding process
(``format.CONC_STATE``, ``CONC_HOLDER``), taken and given back by ``core/concurrency.c``."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ...._core import ConcurrencyCore
from ....geometry import Geometry
from ...contract import Key
from .. import live
from ..layout import Layout, canonical_holders, holders_in_row
from ..window import ShmWindow
from .base import RoleEngine


class ConcurrencyEngine(RoleEngine):
    role = "concurrency"
    _core_type = ConcurrencyCore
    _core: ConcurrencyCore

    def __init__(self, window: Any):
        super().__init__(window)
        # the hot pair, the core's own methods (no Python frame between): ``take(key)`` answers
        # (taken, holders), ``give(key)`` whether this process held a slot to give back
        self.take: Callable[[Key], tuple[bool, int]] = self._core.conc_acquire
        self.give: Callable[[Key], bool] = self._core.conc_release

    def acquire(self, key: Key) -> bool:
        """Take a slot of ``key`` for this process if one is free."""
        taken, _ = self._core.conc_acquire(key)
        return bool(taken)

    def release(self, key: Key) -> bool:
        """Give back one of this process's slots of ``key``; False if it held none."""
        return bool(self._core.conc_release(key))

    def count(self, key: Key) -> int:
        """Slots of ``key`` held now by live processes (read under the key's lock)."""
        return int(self._core.conc_count(key))

    def mine(self, key: Key) -> int:
        return int(self._core.conc_mine(key))

    def moved(self) -> bool:
        """Was the segment replaced under its name (a reset's move)?"""
        return live.moved(self.window)

    def limit(self) -> int:
        """The limit in force (the header's live words, once changed: ``core/live.c``)."""
        return int(self._core.live()[2][0])

    def set_limit(self, limit: int) -> int:
        """Every process's limit from its next call, in place (section "live"): the generation."""
        return int(self._core.set_limits(((limit,), time.time_ns())))

    def maps_same_file(self, other: ShmWindow) -> bool:
        """Does ``other`` map this engine's segment (not one that replaced it under the name)?"""
        return bool(other._ino == self.window._ino)

    def no_mover(self, timeout_s: float) -> AbstractContextManager[None]:
        """Meanwhile no mover of the segment works (:func:`..live.no_mover`)."""
        return live.no_mover(self.window, timeout_s)

    def values(self, now_ns: int) -> list[tuple[Key, int]]:
        """``(key, slots held now)`` of every key, idle or not (nothing written)."""
        return [(key, int(self._core.conc_count(key))) for key in self.all_keys()]


def holders_of(g: Geometry) -> int:
    """The holder entries of a concurrency's rows: the most processes holding a key at once."""
    return holders_in_row(Layout.plan(g).row_bytes)


__all__ = ["ConcurrencyEngine", "canonical_holders", "holders_of"]
