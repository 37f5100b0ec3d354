"""Role "lease": a two-tier (``shm+redis://``) limiter's host tier. Each key's row holds the lease
of hits the host took from Redis (``format.LEASE_STATE``), spent by every worker of the host
in one native section (``core/lease.c``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...._core import LeaseCore
from ...contract import Key, Of
from .base import HOT_PATH, RoleEngine


class LeaseEngine(RoleEngine):
    role = "lease"
    _core_type = LeaseCore
    _core: LeaseCore

    spend = Of[Callable[..., Any]]("lease_spend", "_core", HOT_PATH.format("spend(key, cost)"))

    def install(self, key: Key, *lease: int) -> tuple[bool, Any]:
        """Install a lease from Redis: (installed, the account of the lease it replaced)."""
        installed, replaced = self._core.lease_install(key, *lease)
        return bool(installed), replaced

    def deny(self, key: Key, until_ns: int) -> None:
        """Refuse ``key`` on this host until ``until_ns`` (Redis said wait)."""
        self._core.lease_deny(key, until_ns)

    def forget_refusal(self, key: Key) -> None:
        """Ask Redis again at ``key``'s next hit: this host gave hits back since it was refused."""
        self._core.lease_deny(key, 0)

    def get(self, key: Key) -> tuple[int, ...] | None:
        """The key's lease words, read under its lock, or None if it has no row."""
        words = self._core.lease_get(key)
        return None if words is None else tuple(words)

    def refund(self, key: Key, cost: int) -> int:
        return int(self._core.lease_refund(key, cost))

    def seal(self, key: Key) -> Any:
        """End the key's lease here: its account (None if it had none)."""
        return self._core.lease_seal(key)

    def values(self, now_ns: int) -> list[tuple[Key, tuple[int, ...]]]:
        """``(key, lease words)`` of every live key."""
        keys = self.window.keys()
        return [(key, words) for key in keys if (words := self.get(key)) is not None]
