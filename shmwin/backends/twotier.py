"""TwoTierLimiter: ``Limiter`` across hosts at shared-memory speed -- leases of hits from Redis,
spent by every worker of a host in shared memory.

    Limiter("api", "1000/minute", backend="shm+redis://10.0.0.5:6379/0")
    Limiter("api", "1000/minute", backend="shm+redis+cluster://10.0.0.5:7000,10.0.0.6:7000/")

Two tiers (docs/several-hosts.md draws them):

* **Redis** keeps, per key, a log of *leases* (``lua/lease.lua``) that every rate counts: a
  lease of k hits is one entry stamped at its deadline d = t0 + D, counted at least while
  d > now - P (forgotten as the limiter's ring forgets a hit: between P and P + a bucket after
  d; exactly P for an exact rate). A lease is granted only if the entries counted at t0 plus k
  fit every rate's limit.
* **The host** keeps each key's lease in a shared-memory segment of role "lease" (same name,
  ``core/lease.c``): workers spend it under the key's row lock, natively, while the host's
  clock is at most the deadline converted to it. When it is spent or expired, the one call
  that finds it so seals it and takes a new lease in ONE round trip, which also gives back the
  sealed lease's unused part: its entry becomes (time of its last spend, hits spent).

Hence no interval of P admits more than the limit across hosts (the proof is in lua/lease.lua
and the docs page), while most hits never leave the host. Clocks: t0 and d are Redis's time (the
name's clock that never goes back); the host's deadline is ``start_ns + (d - t0)``, start_ns read
before the request was sent, so it is never later than d whatever the round trip took.

Sizes: a lease's spend time D = min(P / 10, 1 s) over the rates' shortest P; its size k is twice
what the key's last lease served (at least the cost, 1 for a new key), at most N // 8 of the
tightest limit. When Redis refuses, the host refuses without asking until Redis said the cost
would fit. When Redis is away, the host spends what it holds, then the limiter's ``on_error``
answers (``BackendUnavailableError`` from here).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from typing import Any

from ..clock import Clock, host_clock
from ..errors import (
    BackendUnavailableError,
    GeometryMismatchError,
    NotSupportedError,
    WindowExistsError,
    WindowNotFoundError,
)
from ..geometry import LEASE_ROLE, Geometry, Ring, lease_geometry, rates_of, with_capacity
from ..policy import cost_of
from ..rate import Rate
from .contract import Check, Key, Request
from .redis import live, scripts
from .redis.client import NS_PER_US, RedisBase, UnacknowledgedWriteError, key_text
from .redis.client import SCHEMES as REDIS_SCHEMES
from .redis.urls import split_url
from .shm.roles import LeaseEngine
from .shm.window import ShmOptions, ShmWindow

MAX_SPEND_NS = 1_000_000_000  # a lease's spend time D: min(P / 10, this)
SPEND_PART = 10
SIZE_PART = 8  # a lease's size k: at most N // 8
DOWN_BACKOFF_S = 0.05  # after Redis was away: this long (real time) before asking again
GRANT_UNKNOWN = -1  # a give-back's grant time when the round trip lost its answer (lease.lua)
MAX_OWED = 64  # give-backs a process keeps owing per key, newest kept: the rest stay counted
SCHEMES = {"shm+" + scheme: scheme for scheme in REDIS_SCHEMES}  # shm+redis:// -> redis://, ...

Account = tuple[int, int, int, int, int, int]  # lease id, granted, spent, used_ns, life_ns, grant_us
LEASE_ID_END = 1 << 62  # lease ids are drawn in [1, this): the host tier's words hold them


def new_lease_id() -> int:
    """A lease's id: a random token (62 bits, from the OS, so forked workers never repeat one).
    Never a counter kept in Redis: Redis may lose it (a restart without persistence, a rollback
    to an RDB snapshot, a failover to a replica that lagged) and hand the same ids out again."""
    return 1 + secrets.randbelow(LEASE_ID_END - 1)


def redis_url(url: str) -> str:
    """The Redis URL of a two-tier URL: ``shm+redis://h:p/0`` -> ``redis://h:p/0``."""
    scheme = split_url(url).scheme
    if scheme not in SCHEMES:
        raise ValueError(f"not a two-tier URL (shm+redis://...): {url!r}")
    return SCHEMES[scheme] + url[len(scheme) :]  # as written: urlunsplit makes unix:///p unix:/p


def give_back(account: Account) -> list[int]:
    """A sealed lease's give-back for lease.lua, (id, grant time µs, spent, time µs it stopped
    being spent), or nothing. lease.lua finds the lease by its id and grant time together, so a
    give-back can only touch the lease it took. The stop time is the grant time plus the host's
    time from asking to the last spend, rounded up: never earlier than a spend (lease.lua caps
    it at the deadline)."""
    lease_id, _granted, spent, used_ns, _life_ns, grant_us = account
    if lease_id <= 0:
        return []
    return [lease_id, grant_us, spent, grant_us + -(-used_ns // NS_PER_US)]


class LeaseServer(RedisBase):
    """The Redis tier: the name's claim (``lease-limiter;<bucket ns>,<n>,<limit>,<log>;...``, a
    limiter's rings) and lease.lua, which forgets a lease's hits as the limiter's ring would.
    Its rates change live as a redis:// limiter's do (``redis/live.py``, change.lua): every
    lease carries the generation of the rates it was asked with. The log holds hits, whatever
    the rates, so a carry keeps it as it is; a reset starts new rows."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        self._on_change = live.check_on_change(req.option("on_change", "raise"))
        self._follow(live.LiveState(_server_spec(g), 0, 0, (), 0, 0, False))
        super().__init__(req, self.spec if claim else None)
        self._deferred = True  # a claim from now on (the server was away at the open) follows
        if not claim:
            self._follow(live.run_change(self, "", "attach"))

    def _follow(self, state: live.LiveState) -> None:
        """Take the rates of ``state`` as this process's: lease.lua's rate arguments."""
        self.state, self.spec, self.geometry = state, state.spec, _parse_spec(state.spec)
        self._rate_args: list[int] = [len(self.geometry.rings)]
        for r in self.geometry.rings:
            width_us, n = (1, r.bucket_ns // NS_PER_US) if r.log else (r.bucket_ns // NS_PER_US, r.n_buckets)
            self._rate_args += [width_us, n, r.limit]
        self._infix = "L:" if state.layout == 0 else f"L{state.layout}:"

    def _claim(self, exclusive: bool = False) -> None:
        """Claim the name for these rates, or change them by ``on_change`` (change.lua)."""
        if exclusive and not self._call(self._redis.hsetnx, self._prefix + "meta", "geometry", self.spec):
            raise WindowExistsError(f"window {self.name!r} already exists on redis")
        self._follow(live.run_change(self, self.spec, *self._claim_mode(exclusive, self._on_change)))
        self._claimed = True
        self._on_claimed()

    def change(self, g: Geometry, on_change: str) -> None:
        """Change the rates for every host (``Limiter.set_rates``): "carry" or "reset"."""
        self._check_open()
        self._follow(live.run_change(self, _server_spec(g), live.asked_change(on_change)))

    def lease(
        self, key: Key, want: int, need: int, spend_us: int, backs: list[int], token: int = 0
    ) -> list[int]:
        """One round trip: give back ``backs`` (quadruples, :func:`give_back`), then take up to
        ``want`` hits (at least ``need``; ``want`` 0: only answer) as a lease with id ``token``
        (0: a new random one). lease.lua's answer, as ints. Asked with rates that are not the
        newest, it reads them (or repairs a wiped name, change.lua's 'sync') and asks again."""
        token = (token or new_lease_id()) if want > 0 else 0
        for _ in range(live.RETRIES):
            args = [want, need, spend_us, token, *self._rate_args, len(backs) // 4, *backs, self.state.gen]
            keys = [self.lease_row(key), self._clock_key, self._prefix + "gen"]
            out = self._run(scripts.LEASE, keys, args)
            if int(out[0]) != live.STALE:
                return [int(v) for v in out]
            self._follow(live.sync(self, self.spec, self.state.gen, self._prefix + "gen"))
        raise GeometryMismatchError(f"the rates of {self.name!r} changed at each of {live.RETRIES} reads")

    def lease_row(self, key: Key) -> str:
        return self._prefix + self._infix + key_text(key)

    def drop_key(self, key: Key) -> None:
        self._call(self._redis.delete, self.lease_row(key))


class TwoTierLimiter:
    """``Limiter`` on ``shm+redis://``: leases from Redis, spent in shared memory."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        self.name = req.name
        self.url = req.url
        self._g = g
        self._clock: Clock = req.clock or host_clock()
        self._server = LeaseServer(dataclasses.replace(req, url=redis_url(req.url)), g, claim)
        try:
            self._window = _host_tier(req, lease_geometry(self.rates, g.capacity), attach=not claim)
        except BaseException:
            self._server.close()
            raise
        self._lease = LeaseEngine(self._window)
        self._spend = self._lease.spend
        self._down_until = 0.0
        # key -> give-backs owed to the master (quadruples, :func:`give_back`): those of a round
        # trip that failed, and the lease it may have granted -- one whose WAIT no replica
        # acknowledged (a failover under way), or whose answer was lost (a timeout: found by its
        # id alone). Nothing of those leases was spent; left there, they would count in full
        # against the key until their period ends, and starve it (the sentinel failover test read
        # 3,000 hits counted of 352 admitted). Give-backs are idempotent: sent until one lands.
        self._owed: dict[Key, list[int]] = {}

    @classmethod
    def open(cls, req: Request) -> TwoTierLimiter:
        """The registry's entry: create-or-attach ``req.geometry``, or attach (``None``: the
        rates are read from Redis, which must answer)."""
        if req.geometry is None:
            probe = dataclasses.replace(req, url=redis_url(req.url))
            return cls(req, _parse_spec(RedisBase.read_spec(probe)), claim=False)
        g = req.geometry
        if g.kind != "limiter":
            raise NotSupportedError(f"the two-tier backend keeps limiters only, not a {g.kind}")
        return cls(req, g, claim=True)

    # -- the contract ------------------------------------------------------------------------

    @property
    def geometry(self) -> Geometry:
        """The rates in force (the newest this process read from Redis), this limiter's capacity."""
        return dataclasses.replace(self._g, rings=self._server.geometry.rings)

    @property
    def rates(self) -> list[Rate]:
        return rates_of(self._server.geometry)

    @property
    def _spend_us(self) -> int:
        """A lease's spend time D: min(P / 10, 1 s) over the shortest period in force."""
        shortest = min(r.period_ns for r in self.rates)
        return max(1, min(shortest // SPEND_PART, MAX_SPEND_NS) // NS_PER_US)

    @property
    def _k_max(self) -> int:
        return max(1, min(r.limit for r in self.rates) // SIZE_PART)

    def _set_rates(self, want: Geometry, on_change: str = "carry") -> None:
        """Change the rates for every host (``Limiter.set_rates``): leases granted from now on fit
        them; a lease granted before is spent until its deadline, at most D after. The refusals
        this host cached are forgotten: its next hit of a key asks Redis (the rates may be higher
        or reset). Another host's stay until Redis's wait (docs: a known limit)."""
        self._server.change(want, on_change)
        keys = self._window.keys()
        for key in keys:
            self._lease.forget_refusal(key)

    @property
    def closed(self) -> bool:
        return self._window.closed

    @property
    def window(self) -> Any:
        raise NotSupportedError("the two-tier backend has no window view: its rows hold leases (shmwin show)")

    @property
    def lease_window(self) -> ShmWindow:
        """The host tier's segment (role "lease")."""
        return self._window

    @property
    def server_clock(self) -> Clock | None:
        """Redis's time source (None: the server's TIME; a test's ``ServerTime`` if one was
        given). For tests only: they set it apart from the host's to step the server's clock."""
        return self._server._clock

    @server_clock.setter
    def server_clock(self, clock: Clock | None) -> None:
        self._server._clock = clock

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Spend ``cost`` hits of the host's lease of ``key`` (natively); when it cannot, take a
        new lease in one round trip."""
        spent = self._spend(key, cost)
        if spent is False and self._owed and key in self._owed:
            spent = self._settle(key, cost)
        if spent is True or spent is False:
            return spent
        return self._take(key, cost, spent)

    def _settle(self, key: Key, cost: int) -> Any:
        """A refusal is cached for ``key`` while this process owes give-backs of it: another
        worker of the host was refused because of them, and this one, refused too, would never
        make the round trip that gives them back (the key starved until d + P). Give them back
        now (which forgets the refusal) and spend again."""
        if time.monotonic() < self._down_until:
            return False
        self._give_back(key, [])
        return self._spend(key, cost)

    def _take(self, key: Key, cost: int, sealed: Account) -> bool:
        """The lease of ``key`` could not serve ``cost``: give back ``sealed``'s unused part and
        take a new lease, in one round trip; spend ``cost`` of it."""
        if time.monotonic() < self._down_until:
            raise BackendUnavailableError(f"redis for {self.url} was unavailable a moment ago")
        cost = int(cost)  # the core checked it: a whole number >= 1 (2.0, numpy ints)
        k = min(max(2 * sealed[2], 1), self._k_max)
        start_ns = self._clock()
        backs = give_back(sealed) + self._owed.pop(key, [])
        token = new_lease_id()
        try:
            out = self._server.lease(key, max(k, cost), cost, self._spend_us, backs, token)
        except UnacknowledgedWriteError as err:  # ran on a master that a failover may yet undo
            self._owe(key, backs + _unspent(err.answer))
            raise
        except BackendUnavailableError:  # unknown whether it ran: the lease by its id alone
            self._owe(key, [*backs, token, GRANT_UNKNOWN, 0, 0])
            raise
        granted, lease_id, t0_us, d_us, wait_us = out[:5]
        if granted > 0:
            deadline_ns = start_ns + (d_us - t0_us) * NS_PER_US
            lease = (lease_id, granted, cost, start_ns, deadline_ns, t0_us)
            installed, replaced = self._lease.install(key, *lease)
            backs = give_back(replaced) if installed else [lease_id, t0_us, 0, t0_us]
            if backs:  # two workers raced, or the lease came too late: its hits go back now
                self._give_back(key, backs)
            return bool(installed)
        if wait_us > 0:
            self._lease.deny(key, self._clock() + wait_us * NS_PER_US)
        return False

    def _owe(self, key: Key, backs: list[int]) -> None:
        """A round trip of ``key`` failed: ``backs`` go again with the key's next one (a give-back
        finds its lease by id, so one that landed already, or that a failover lost, changes
        nothing), at most MAX_OWED of them (the oldest dropped stay counted: refusals only);
        Redis is left alone for DOWN_BACKOFF_S."""
        owed = self._owed.get(key, []) + backs
        self._owed[key] = owed[-4 * MAX_OWED :]
        self._down_until = time.monotonic() + DOWN_BACKOFF_S

    def _give_back(self, key: Key, backs: list[int]) -> None:
        """Give ``backs`` back in a round trip of their own (not with a new lease's): a refusal
        another worker of this host cached meanwhile may have counted them, so it is forgotten
        once they are back (else the host refuses what Redis would grant, until d + P)."""
        backs = backs + self._owed.pop(key, [])
        if time.monotonic() < self._down_until:  # away a moment ago (a close's hand_back): no timeout a key
            self._owe(key, backs)
            return
        try:
            self._server.lease(key, 0, 0, self._spend_us, backs)
        except UnacknowledgedWriteError:  # the master took them, unless a failover undoes that
            self._owe(key, backs)
        except BackendUnavailableError:  # else stranded until d + P: refusals only
            self._owe(key, backs)
            return
        self._lease.forget_refusal(key)

    def check(self, key: Key, cost: int, commit: bool, detail: bool = True) -> Check:
        """``commit``: a hit (and, refused, when the cost would fit); else an answer: the host's
        lease holds ``cost``, or Redis has room for it. Used per rate: the hits leased (Redis)."""
        if not isinstance(key, str | bytes):
            raise TypeError(f"a limiter's key is a str or bytes, not {type(key).__name__}")
        if commit and self.hit(key, cost):
            return True, (), (), 0
        cost = cost_of(cost, 1 if commit else 0)
        n = len(self.rates)
        out = self._server.lease(key, 0, cost, self._spend_us, [])
        used, reset_us, wait_us = out[5 : 5 + n], out[5 + n : 5 + 2 * n], out[4]
        words, now = self._lease.get(key), self._clock()
        holds, denied_ns = False, 0
        if words is not None:
            lease_id, granted, spent, deadline_ns, *_ = words
            holds = lease_id > 0 and now <= deadline_ns and granted - spent >= cost
            denied_ns = max(words[7] - now, 0)
        allowed = not commit and (holds or (wait_us == 0 and denied_ns == 0))
        wait = None if wait_us < 0 else (0 if allowed else max(wait_us * NS_PER_US, denied_ns, 1))
        return allowed, tuple(used), tuple(r * NS_PER_US for r in reset_us), wait

    def refund(self, key: Key, cost: int) -> int:
        """Give up to ``cost`` hits back to the host's live lease of ``key`` (they are still
        counted in Redis until the lease is given back)."""
        return self._lease.refund(key, cost)

    def charge(self, key: Key, cost: int) -> None:
        raise NotSupportedError("charge() needs one store: on shm+redis, hit() is the only way to count")

    def clear(self, key: Key) -> None:
        """Forget every lease of ``key``, on this host and in Redis."""
        self._lease.seal(key)
        self._server.drop_key(key)

    def leases(self) -> dict[Key, tuple[int, ...]]:
        """Each key's lease words on this host (``core.lease_get``), for the tools."""
        return dict(self._lease.values(self._clock()))

    def hand_back(self) -> int:
        """Seal every live lease of this host and give back its unused part: the hits given back."""
        back = 0
        keys = self._window.keys()
        for key in keys:
            account = self._lease.seal(key)
            if account is not None and account[0] > 0:
                back += account[1] - account[2]
                self._give_back(key, give_back(account))
        for key in list(self._owed):  # unacknowledged leases of keys this host no longer holds
            self._give_back(key, [])
        return back

    def count_anyway(self, key: Key, cost: int) -> None:
        """Carry ``cost`` hits a host admitted on its local share back (on_error="local"): one
        round trip, an entry of ``cost`` hits stamped now in the key's log, whatever the limits
        say (lease.lua's need -1; spend time 0: no host spends it), as redis:// counts them.
        Every rate sees them: leases granted after it fit the limits with them. (Ordinary leases
        would carry only what fits the tightest rate now: 3 of 9 under 3/second;10/minute, the
        minute never seeing the 6 others.)"""
        if time.monotonic() < self._down_until:
            raise BackendUnavailableError(f"redis for {self.url} was unavailable a moment ago")
        backs = self._owed.pop(key, [])
        try:
            self._server.lease(key, int(cost), -1, 0, backs)
        except BackendUnavailableError:  # ran or not: the local hits stay there, carried again later
            self._owe(key, backs)
            raise

    def hosts_seen(self, host: str, horizon_ns: int) -> int:
        """The Redis tier's count of hosts seen recently (on_error="local")."""
        return self._server.hosts_seen(host, horizon_ns)

    def close(self) -> None:
        """Give the host's leases back (their unused part), then close both tiers."""
        if self._window.closed:
            return
        try:
            self.hand_back()
        finally:
            self._window.close()
            self._server.close()

    def unlink(self) -> bool:
        """Remove the name from Redis (every host's leases) and this host's segment (its leases
        sealed first: nothing is given back to a name that is gone). With Redis away the host's
        segment is removed all the same, and BackendUnavailableError says Redis kept its part."""
        if not self._window.closed:
            keys = self._window.keys()
            for key in keys:
                self._lease.seal(key)
        try:
            there = self._server.unlink()
        finally:
            here = self._window.unlink()
        return here or there

    def __repr__(self) -> str:
        return f"<shmwin.Limiter {self.name!r} {';'.join(map(str, self.rates))} on {self.url}>"


def _host_tier(req: Request, want: Geometry, attach: bool) -> ShmWindow:
    """This host's lease segment: ``want`` created or attached; for an attach (the rates read
    from Redis, not the capacity), or one made for other rates (a change of them: its rows hold
    leases, not rates), the segment as it is if this host has one."""
    opts = ShmOptions.of(req)
    if not attach:
        try:
            return ShmWindow.open_geometry(req.name, want, opts)
        except GeometryMismatchError:
            pass
    try:
        window = ShmWindow.attach(req.name, opts)
    except WindowNotFoundError:
        return ShmWindow.open_geometry(req.name, want, opts)
    if window.geometry.role == LEASE_ROLE:
        return window
    window.close()
    raise GeometryMismatchError(f"{req.name!r} is a {window.geometry.kind} here, not a lease segment")


def _unspent(answer: Any) -> list[int]:
    """The give-back of the lease in lease.lua's ``answer`` that its host never installed: its
    whole (nothing spent), or nothing if none was granted."""
    granted, lease_id, t0_us = (int(v) for v in answer[:3])
    return [lease_id, t0_us, 0, t0_us] if granted > 0 else []


def _server_spec(g: Geometry) -> str:
    """The Redis tier's claim of a limiter geometry: its rings, whole microseconds."""
    if any(r.bucket_ns % NS_PER_US for r in g.rings):
        raise ValueError("the shm+redis backend keeps whole-microsecond buckets")
    return "lease-limiter;" + ";".join(f"{r.bucket_ns},{r.n_buckets},{r.limit},{int(r.log)}" for r in g.rings)


def _parse_spec(spec: str) -> Geometry:
    """The limiter geometry a ``lease-limiter`` spec claims (an attach; the default capacity)."""
    kind, *rings = spec.split(";")
    if kind != "lease-limiter":
        raise GeometryMismatchError(f"this name holds a {kind} on redis, not a two-tier limiter")
    fields = (r.split(",") for r in rings)
    parsed = [Ring(int(b), int(n), int(limit), bool(int(log))) for b, n, limit, log in fields]
    return with_capacity(Geometry(tuple(parsed), ("hits",), "int64", "locked", 0, 1, "limiter"), None)
