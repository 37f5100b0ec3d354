"""Role "concurrency": each key's row holds one entry per holding process
(``format.CONC_STATE``, ``CONC_HOLDER``), taken and given back by ``core/concurrency.c``."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ...._core import ConcurrencyCore
from ....geometry import (
    ADDRESS_BUDGET_BYTES,
    CONC_HOLDER_BYTES,
    DEFAULT_MAX_KEYS,
    MAX_CONCURRENCY,
    MAX_STRIPES,
    Geometry,
    Ring,
    window_geometry,
)
from ...contract import Key
from .. import live
from ..layout import Layout, canonical_holders, holders_in_row
from ..window import ShmWindow
from .base import RoleEngine

ROLE = "concurrency"
HOLDERS_PER_LIMIT = 2  # a key's default holder entries: twice its limit (room for a raise) ...
MIN_HOLDERS = 8  # ... or this many, at most one per process
FIELD = "holders"


def default_holders(limit: int, processes: int) -> int:
    """A key's holder entries when not chosen: room for twice the limit's processes (a limit
    raised live in place), at least MIN_HOLDERS, at most one per process."""
    return min(processes, max(HOLDERS_PER_LIMIT * limit, MIN_HOLDERS))


def geometry(
    limit: int, processes: int, idle_ns: int, capacity: int | None, holders: int | None = None
) -> Geometry:
    """A keyed window of one ring: one bucket of ``idle_ns`` (a key's idle time) whose limit
    is ``limit``; ``processes`` stripes, and rows of a top word and ``holders`` holder entries
    (one per process holding the key at once: the limit in force bounds the slots, the entries
    how many processes hold them)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY:
        raise ValueError(f"limit must be an int in 1..{MAX_CONCURRENCY}, not {limit!r}")
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= MAX_STRIPES:
        raise ValueError(f"processes must be an int in 1..{MAX_STRIPES}, not {processes!r}")
    if holders is None:
        holders = default_holders(limit, processes)
    if isinstance(holders, bool) or not isinstance(holders, int) or not 1 <= holders <= MAX_STRIPES:
        raise ValueError(f"holders must be an int in 1..{MAX_STRIPES}, not {holders!r}")
    if capacity is None:  # as many keys as the address budget maps (a key's row is its holders)
        per_key = 128 + CONC_HOLDER_BYTES * holders + 64 + 512
        capacity = max(1, min(DEFAULT_MAX_KEYS, ADDRESS_BUDGET_BYTES // per_key))
    g = window_geometry(f"{idle_ns}ns", 1, None, (FIELD,), "int64", None, None, capacity, keyed=True)
    ring = Ring(idle_ns, 1, limit)
    g = dataclasses.replace(g, rings=(ring,), n_stripes=processes, role=ROLE, holders=holders)
    return canonical_holders(g)  # as its header reads back (every entry its row's size holds)


def same_but_limit(have: Geometry, want: Geometry, holders_chosen: bool) -> bool:
    """Is ``have`` ``want`` but for the limit (a concurrency's, whose limit changes live) and,
    unless chosen, the holder entries (a default: the segment's stay)?"""
    if have.role != ROLE or len(have.rings) != 1:
        return False
    rings = (dataclasses.replace(want.rings[0], limit=have.rings[0].limit),)
    holders = want.holders if holders_chosen else have.holders
    return dataclasses.replace(want, rings=rings, holders=holders) == have


def reset_geometry(g: Geometry, limit: int) -> Geometry:
    """A reset's new segment: ``g`` with ``limit``, and the holder entries a new limit's opener
    gets by default if ``g`` has the default of its own (a raised limit gets room for its
    holders, as a fresh open of it would), else ``g``'s (chosen by its opener)."""
    ring, idle_ns = g.rings[0], g.rings[0].span_ns
    if g.holders == geometry(ring.limit, g.n_stripes, idle_ns, g.capacity).holders:
        return geometry(limit, g.n_stripes, idle_ns, g.capacity)
    return dataclasses.replace(g, rings=(dataclasses.replace(ring, limit=limit),))


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


__all__ = ["ROLE", "ConcurrencyEngine", "canonical_holders", "default_holders", "geometry", "holders_of",
           "reset_geometry", "same_but_limit"]  # fmt: skip
