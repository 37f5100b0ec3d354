"""The stripe table of an unkeyed striped window: which thread writes which row.

Every entry is read and written under lock ``LOCK_STRIPE_TABLE``. A row's data
is never cleared when its owner leaves or dies: its counts are still inside the
window, so the next claimer adopts them.
"""

from __future__ import annotations

import time

from . import layout, owners
from .locks import LockTable

_W = layout.WORD_BYTES
_ENTRY_WORDS = layout.STRIPE_ENTRY_BYTES // _W
_ROWS_IN_USE = layout.ROWS_IN_USE_OFF // _W


class StripeTable:
    def __init__(self, q: memoryview, lay: layout.Layout, locks: LockTable):
        self._q = q
        self._base = lay.stripes_off // _W
        self._n_rows = lay.n_rows
        self._locks = locks

    def _entry(self, row: int) -> int:
        return self._base + row * _ENTRY_WORDS

    def claim(self) -> tuple[int, int] | None:
        """Give the calling thread a free row, or adopt a dead owner's: ``(row, tid)``.

        None when every stripe has a live owner (the caller falls back to row 0).
        """
        tid, started, pid = owners.current_thread()
        q = self._q
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row in range(1, self._n_rows):
                e = self._entry(row)
                if q[e] and owners.tid_alive(q[e], q[e + 1]):
                    continue
                q[e + 1], q[e + 2], q[e + 3] = started, pid, time.monotonic_ns()
                q[e] = tid
                q[_ROWS_IN_USE] = max(q[_ROWS_IN_USE], row + 1)
                return row, tid
            return None
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)

    def release(self, claims: list[tuple[int, int]]) -> None:
        """Hand rows back (data kept), skipping any that someone else has since adopted."""
        q = self._q
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row, tid in claims:
                if q[self._entry(row)] == tid:
                    q[self._entry(row)] = 0
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)

    def reclaim(self) -> int:
        """Free the rows of owners that have died; how many."""
        q, freed = self._q, 0
        self._locks.acquire(layout.LOCK_STRIPE_TABLE)
        try:
            for row in range(1, self._n_rows):
                e = self._entry(row)
                if q[e] and not owners.tid_alive(q[e], q[e + 1]):
                    q[e] = 0
                    freed += 1
        finally:
            self._locks.release(layout.LOCK_STRIPE_TABLE)
        return freed

    def owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every claimed row; lock-free, for inspection."""
        q, out = self._q, []
        for row in range(1, self._n_rows):
            e = self._entry(row)
            if q[e]:
                out.append((row, int(q[e + 2]), owners.tid_alive(q[e], q[e + 1])))
        return out
