"""The stripe table of an unkeyed striped window: which process writes which row.

Lookups here are lock-free; every write goes through the native core under lock
``LOCK_STRIPE_TABLE``, which re-checks that an entry still holds the owner seen here
before changing it. A row's data is never cleared when its owner leaves or dies: its
counts are still inside the window, so the next claimer adopts them.
"""

from __future__ import annotations

from . import _core, layout, owners

_W = layout.WORD_BYTES
_ENTRY_WORDS = layout.STRIPE_ENTRY_BYTES // _W


class StripeTable:
    def __init__(self, q: memoryview, lay: layout.Layout, core: _core.Core):
        self._q = q
        self._base = lay.stripes_off // _W
        self._n_rows = lay.n_rows
        self._core = core

    def _owner(self, row: int) -> tuple[int, int]:
        e = self._base + row * _ENTRY_WORDS
        return int(self._q[e]), int(self._q[e + 1])

    def _dead(self) -> list[tuple[int, int]]:
        """``(row, owner)`` of claimed rows whose owner has died."""
        out = []
        for row in range(1, self._n_rows):
            owner, started = self._owner(row)
            if owner and not owners.pid_alive(owner, started):
                out.append((row, owner))
        return out

    def candidates(self) -> tuple[list[tuple[int, int]], int, int]:
        """What the core asks when this process needs a stripe: ``(rows free or with a dead
        owner, each with the owner seen; this pid; its start ticks)``. The core claims the
        first candidate still as seen, under the stripe-table lock, and remembers it."""
        pid, started = owners.current_process()
        candidates = []
        for row in range(1, self._n_rows):
            owner, owner_started = self._owner(row)
            if not owner or not owners.pid_alive(owner, owner_started):
                candidates.append((row, owner))
        return candidates, pid, started

    def reclaim(self) -> int:
        """Free the rows of owners that have died; how many."""
        return int(self._core.free_stripes(self._dead()))

    def owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed row; lock-free, for inspection."""
        out = []
        for row in range(1, self._n_rows):
            owner, started = self._owner(row)
            if owner:
                pid = int(self._q[self._base + row * _ENTRY_WORDS + 2])
                out.append((row, pid, owners.pid_alive(owner, started)))
        return out
