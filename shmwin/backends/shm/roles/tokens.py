"""Role "token-bucket": each key's row holds its GCRA theoretical arrival time
(``format.TOKEN_STATE``); the native ``token_hit``/``token_check`` are ShmTokenBucket's."""

from __future__ import annotations

from ....geometry import EMPTY_EPOCH
from ...contract import Key
from .base import RoleEngine


class TokensEngine(RoleEngine):
    role = "token-bucket"

    def values(self, now_ns: int) -> list[tuple[Key, int]]:
        """``(key, whole tokens left)`` of each key whose bucket is not full."""
        ring = self.window.geometry.rings[0]
        states = self.key_states(1)
        found = [(key, tokens_at(tat, now_ns, ring.bucket_ns, ring.n_buckets)) for key, (tat,) in states]
        return [(key, tokens) for key, tokens in found if tokens < ring.n_buckets]


def tokens_at(tat_ns: int, now_ns: int, interval_ns: int, burst: int) -> int:
    """The whole tokens a bucket holds at ``now_ns`` from its state word (``core/counters.c``'s
    token_read: no state, or junk, is a full bucket here -- the tools never raise on it)."""
    if tat_ns == EMPTY_EPOCH or tat_ns < 0:
        return burst
    left_ns = now_ns + burst * interval_ns - max(tat_ns, now_ns)
    return min(max(left_ns // interval_ns, 0), burst)
