"""The stripe table of an unkeyed striped window: which process writes which row.

Who owns a row is decided in the native core, by the kernel: the owner process's keeper
thread holds the row's robust liveness mutex, so a row is adopted only once its owner is
dead (owner-dead) or gone (free) -- never while it lives, whatever ``/proc`` shows
(``hidepid``, another uid, another PID namespace). A row's data is never cleared when its
owner leaves or dies: its counts are still inside the window, so the next claimer adopts them.
"""

from __future__ import annotations

from ... import _core


class StripeTable:
    def __init__(self, core: _core.Core):
        self._core = core

    def reclaim(self) -> int:
        """Clear the owner of every row whose owner has died; how many."""
        return self._core.free_stripes()

    def owners(self) -> list[tuple[int, int, bool]]:
        """``(row, pid, alive)`` for every row with an owner recorded."""
        return [(int(r), int(pid), bool(alive)) for r, pid, alive in self._core.stripe_owners()]
