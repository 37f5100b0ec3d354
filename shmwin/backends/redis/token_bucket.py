"""RedisTokenBucket: ``TokenBucket`` on Redis -- the GCRA take in one atomic script.

A key's state is one string, ``shmwin:{NAME}:k:KEY``: its theoretical arrival time in
microseconds (``lua/token.lua``), which expires once the bucket is full again. The name's
geometry is claimed as ``token-bucket;<T ns>,<burst>,<limit>``; the script counts in whole
microseconds, T rounded up to one (a token never comes back early).
"""

from __future__ import annotations

from ...errors import GeometryMismatchError, WindowExistsError
from ...geometry import TOKEN_ROLE, Geometry, token_geometry, token_rate_of
from ...policy import cost_of
from ...rate import Rate
from ..contract import Key, Request, TokenCheck
from . import live, scripts
from .client import NS_PER_US, RedisBase, key_text, not_supported, required_key

DEFAULT_CAPACITY = 10_000  # what an attach reports: redis keys have no table to fill


class RedisTokenBucket(RedisBase):
    """``TokenBucket`` on Redis: one script per take or test, one round trip."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        self._on_change = live.check_on_change(req.option("on_change", "raise"))
        self._adopt(g, live.LiveState(_spec(g), 0, 0, (), 0, 0, False))
        super().__init__(req, _spec(g) if claim else None)
        self._deferred = True  # a claim from now on (the server was away at the open) follows
        if not claim:
            self._refresh()

    def _adopt(self, g: Geometry, state: live.LiveState) -> None:
        """Take ``g`` (the rate and burst of ``state``) as this process's."""
        self._g, self._state = g, state
        ring = g.rings[0]
        self._interval_us = -(-ring.bucket_ns // NS_PER_US)
        self._burst = ring.n_buckets

    def _claim(self, exclusive: bool = False) -> None:
        """Claim the name for this rate and burst, or change them by ``on_change`` (change.lua:
        another rate or burst is always a new layout, each key's tokens in use carried)."""
        meta = self._prefix + "meta"
        if exclusive and not self._call(self._redis.hsetnx, meta, "geometry", _spec(self._g)):
            raise WindowExistsError(f"token bucket {self.name!r} already exists on redis")
        self._follow(live.run_change(self, _spec(self._g), *self._claim_mode(exclusive, self._on_change)))
        self._claimed = True

    def _follow(self, state: live.LiveState) -> None:
        rate, burst = _parse_spec(state.spec)
        self._adopt(token_geometry(rate, burst, self._g.capacity or DEFAULT_CAPACITY), state)

    def _set_rates(self, want: Geometry, on_change: str = "carry") -> None:
        """Change the rate and burst for every process (``TokenBucket.set_rate``, ``shmwin set``)."""
        self._check_open()
        self._follow(live.run_change(self, _spec(want), live.asked_change(on_change)))

    def _refresh(self) -> None:
        self._follow(live.run_change(self, "", "attach"))

    @classmethod
    def open(cls, req: Request) -> RedisTokenBucket:
        """Create-or-attach ``req.geometry``, or attach (``None``)."""
        if req.geometry is None:
            rate, burst = _parse_spec(RedisBase.read_spec(req))
            return cls(req, token_geometry(rate, burst, DEFAULT_CAPACITY), claim=False)
        return cls(req, req.geometry, claim=True)

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def rate(self) -> Rate:
        return token_rate_of(self._g)[0]

    @property
    def burst(self) -> int:
        return self._burst

    @property
    def window(self) -> None:
        raise not_supported("window view of a token bucket")

    def hit(self, key: Key, cost: int = 1) -> bool:
        return self.check(key, cost, True)[0]

    def check(self, key: Key, cost: int, commit: bool) -> TokenCheck:
        """One round trip: the native core's ``token_check`` answer (``lua/token.lua``)."""
        cost = cost_of(cost, 0)
        text = key_text(required_key(key, "a token bucket's"))
        for _ in range(live.RETRIES):
            if cost > self._burst and self._current():  # against the burst in force, not a stale one
                raise ValueError(
                    f"cost {cost} is more than the bucket of {self.name!r} holds (burst {self._burst})"
                )
            olds = self._state.olds  # at most a burst of T after a change: few, and soon none
            rows = [self._prefix + live.row_infix(layout) + text for layout in (self._state.layout,
                    *(old.layout for old in olds))]  # fmt: skip
            keys = [rows[0], self._clock_key, self._prefix + "gen", *rows[1:]]
            held = [v for old in olds for v in (old.until_us, *old.rings[0])]
            args = [cost, int(bool(commit)), self._interval_us, self._burst, self._state.gen, len(olds)]
            out = self._run(scripts.TOKEN, keys, [*args, *held])
            if int(out[0]) != live.STALE:
                allowed, tokens, wait_us, full_us = (int(v) for v in out)
                return bool(allowed), tokens, wait_us * NS_PER_US, full_us * NS_PER_US
            self._sync()
        raise GeometryMismatchError(
            f"the rate of {self.name!r} on redis changed at each of {live.RETRIES} tries: try again"
        )

    def _current(self) -> bool:
        """Whether this process knows the name's rate and burst; if not, it follows them first."""
        if not self._claimed or live.is_current(self, self._prefix + "gen"):
            return True
        self._sync()
        return False

    def _sync(self) -> None:
        self._follow(live.sync(self, _spec(self._g), self._state.gen, self._prefix + "gen"))

    def clear(self, key: Key) -> None:
        """A full bucket for ``key`` again (its states of earlier layouts too), after following a
        change (a stale process would miss the states of the layouts it does not know)."""
        text = key_text(required_key(key, "a token bucket's"))
        for _ in range(live.RETRIES):
            if self._current():
                break
        layouts = [self._state.layout, *(old.layout for old in self._state.olds)]
        self._call(self._redis.delete, *(self._prefix + live.row_infix(layout) + text for layout in layouts))

    def __repr__(self) -> str:
        return f"<shmwin.TokenBucket {self.name!r} {self.rate} burst={self.burst} on {self.url}>"




def _spec(g: Geometry) -> str:
    ring = g.rings[0]
    return f"{TOKEN_ROLE};{ring.bucket_ns},{ring.n_buckets},{ring.limit}"


def _parse_spec(spec: str) -> tuple[Rate, int]:
    kind, _, ring = spec.partition(";")
    if kind != TOKEN_ROLE:
        raise live.other_kind(kind, "token bucket")
    interval_ns, burst, limit = (int(v) for v in ring.split(","))
    return Rate(limit, interval_ns * limit), burst
