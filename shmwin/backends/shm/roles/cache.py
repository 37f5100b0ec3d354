"""Role "counter-cache": each key's row holds an int counter and when it expires
(``format.CACHE_STATE``), changed by one native section under the key's row lock
(``core/cache.c``): Django's ``add`` (set if absent, with a timeout), ``set``, ``incr``, ``touch``,
``delete``, decided in C, so no caller's order of calls matters."""

from __future__ import annotations

from ...._core import CounterCacheCore
from ....geometry import EMPTY_EPOCH, MAX_SPAN_NS, Geometry, Ring, with_capacity
from ...contract import Key
from .base import RoleEngine

ROLE = "counter-cache"
STATE_WORDS = 2  # expires_ns, value


class CounterCacheEngine(RoleEngine):
    role = ROLE
    _core_type = CounterCacheCore
    _core: CounterCacheCore

    def __init__(self, window: object):
        super().__init__(window)
        core = self._core  # the hot methods: the core's own, no Python frame between
        self.add, self.set, self.incr = core.counter_add, core.counter_set, core.counter_incr
        self.get, self.touch, self.delete = core.counter_get, core.counter_touch, core.counter_delete

    @property
    def longest_ns(self) -> int:
        """The longest timeout a value may have (the ring's limit)."""
        return int(self.window.geometry.rings[0].limit)

    def values(self, now_ns: int) -> list[tuple[Key, int]]:
        """``(key, value)`` of each key holding a live value, read lock-free (for the tools)."""
        states = self.key_states(STATE_WORDS)
        return [(key, value) for key, (expires_ns, value) in states if live(expires_ns, now_ns)]


def live(expires_ns: int, now_ns: int) -> bool:
    """A value counts while now < its expiry (junk: none)."""
    return expires_ns != EMPTY_EPOCH and 0 <= now_ns < expires_ns


IDLE_NS = 1_000_000_000  # a key's row is reused this long after its value expired


def geometry(longest_ns: int, capacity: int | None) -> Geometry:
    """A counter cache's segment: a keyed window of one ring of one bucket of IDLE_NS (a key's
    idle time, after its value's expiry) whose limit is ``longest_ns`` (the longest timeout),
    its rows holding CACHE_STATE; ``capacity`` keys (None: the table grows as keys come)."""
    whole = isinstance(longest_ns, int) and not isinstance(longest_ns, bool)
    if not whole or not 0 < longest_ns <= MAX_SPAN_NS // 2:
        raise ValueError(f"the longest timeout must be 1 ns .. 2**59 ns (18 years), not {longest_ns!r}")
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1):
        raise ValueError(f"capacity must be a positive int or None (grow as keys come), not {capacity!r}")
    ring = Ring(IDLE_NS, 1, longest_ns)
    g = with_capacity(Geometry((ring,), ("value",), "int64", "locked", 0, 1), capacity)
    return Geometry(g.rings, g.fields, g.dtype, g.mode, g.n_stripes, g.capacity, g.kind, ROLE)
