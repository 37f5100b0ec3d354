"""``on_error="local"``: while a remote backend is away, each host enforces a share of the limit,
exactly, in its own shared memory; when the backend answers again, what the host admitted
meanwhile is counted against the global keys first.

    Limiter("api", "600/minute", backend="shm+redis://10.0.0.5:6379/0", on_error="local")
    Limiter("api", "600/minute", backend="redis://...", on_error="local", fallback="50/minute")

* **The share.** ``fallback=`` when given; else each rate's limit divided by the hosts seen
  within :data:`HOSTS_HORIZON_NS` (each process says its host is alive and reads the count at
  most every :data:`BEAT_S`, one round trip, ``lua/hosts.lua``), rounded down: the hosts'
  shares never add up to more than the limit. A share below 1 refuses every hit. A process that
  never reached the backend counts one host. A host is its hostname and its ``/dev/shm``.
* **Local counts.** A limiter ``NAME.local`` in this host's shared memory, with the share's
  rates: every process of the host counts there, so the share holds per host, not per process.
  At each outage's start a process that knows the share (``fallback=``, or the hosts it
  counted) sets it there if it changed (live limits, hosts come and go), the counts kept; one
  that never reached the backend (a deploy made while away) sets only one no looser. No room
  for it (a full /dev/shm): ``on_full`` answers. ``acquire`` and shadow mode go through the
  share as ``hit`` does.
* **No Redis round trip per hit while away.** A process asks the backend again at most every
  :data:`PROBE_S` (real time), looking at the time every :data:`CLOCK_EVERY` hits; the hits
  between go to shared memory only. So a process goes back to the backend at one of its first
  CLOCK_EVERY hits after PROBE_S has passed (strict meanwhile: the local share counts them).
* **The switch back.** The first call of a process that was away and reaches the backend again
  carries the host's local hits to the global keys before its own hit is decided: for each key
  of ``NAME.local``, the hits its share holds now (those within the share's longest period:
  older ones are outside every interval the limit still looks at), then gives as many back
  there (a hit another process of the host admits on the share meanwhile stays, for its own
  switch back to carry), so the global limit sees them: no burst over it at the switch. They
  are counted whatever the limit says, in every rate (``count_anyway``: the rings on
  ``redis://``, an entry of the lease log on ``shm+redis://``). Hits carried at the switch
  count from then on, later than they happened: conservative. Two processes carrying at once
  count them twice: refusals only.
* **Seen from outside.** Each time a process of the host meets the backend away (the call
  that switches it to the local share, then each probe that fails), it adds one to
  ``NAME.local.away``, a small window of this host (:data:`AWAY_RESOLUTIONS`, one lock, 52 KiB).
  :func:`fallback_status` reads it: the fallback is *active* while a probe failed within
  :data:`ACTIVE_S` and no call got through since (each switch back adds one to its ``back``
  field), *since* the start of the run of failures that reaches now (quiet spells shorter
  than :data:`GAP_S` do not end a run; a switch back does). ``shmwin show NAME`` and the Prometheus export
  (``shmwin_fallback_active``, ``shmwin_fallback_since_seconds``) show it.
* **What it does not cover.** Into the outage, a host's share is not reduced by what the host
  had used of the global limit just before: in the period that spans the start of an outage,
  the hosts together may admit up to the global limit plus their shares. The same bound holds
  for the period that spans the switch back, since each host carries its hits at the first
  call of its own that gets through: another host may admit fresh hits before that.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from time import monotonic
from typing import Any

from .backends.shm import live
from .backends.shm.segment import path_of, unlink
from .errors import (
    BackendUnavailableError,
    GeometryMismatchError,
    KeyTableFullError,
    OutOfSpaceError,
    ShmwinError,
    WindowClosedError,
    WindowNotFoundError,
)
from .rate import Rate, Rates, parse_many

PROBE_S = 0.5  # while away: ask the backend again at most this often (per process)
# while away: read the clock (to know whether PROBE_S passed) at every CLOCK_EVERY-th hit only: a
# clock read costs as much as the native hit itself here (a VM's clock source, 120-400 ns)
CLOCK_EVERY = 8
BEAT_S = 10.0  # while it answers: say this host is alive, and count the hosts, at most this often
# a switch back waits this long at most for another process's carry on the host (one that answers
# takes milliseconds; one waiting on a hung server holds it for its timeouts: 4 of them on a cluster)
CARRY_WAIT_S = 0.5
HOSTS_HORIZON_NS = 5 * 60 * 1_000_000_000  # a host counts this long after it was last seen
SUFFIX = ".local"
AWAY_SUFFIX = SUFFIX + ".away"  # the host's record of meeting the backend away (fallback_status)
AWAY_RESOLUTIONS = ("10m/1s", "1d/1m")  # a run's start, to the second for 10 minutes, then the minute
AWAY_FIELDS = ("count", "back")  # the calls that met the backend away; the switches back (a run's end)
ACTIVE_S = 5  # the fallback is active while a process of the host met the backend away this recently
GAP_S = 60  # a quiet spell (no probe: no calls) this long ends a run of the fallback


def fallback_since(limiter: Any) -> float | None:
    """Since when (Unix time, s) ``limiter``'s process has been enforcing its host's share
    because the backend is away; None while it answers, or without on_error="local"."""
    share = getattr(limiter, "_local", None)
    since = share.away_since_ns if share is not None else None
    return None if since is None else since / 1e9


def fallback_status(name: str, clock: Any = None) -> dict[str, Any] | None:
    """Whether the limiter ``name``'s processes on this host are on their local share, from its
    ``NAME.local.away`` window: None if no process here ever met its backend away; else
    ``active`` (a failure within ACTIVE_S, and no switch back since, to the second), ``since``
    and ``last`` (Unix time, s: the start of the latest run of failures, and its newest failure,
    each to its bucket), and ``failures`` (the calls and probes of the last minute that met the
    backend away). ``clock``: the writers'
    (a test's), else the host's monotonic clock."""
    from .window import Window

    try:
        w = Window.attach(name + AWAY_SUFFIX, clock=clock)
    except (WindowNotFoundError, ShmwinError, OSError):
        return None
    try:
        fine, coarse = w.series(resolution=0).tolist(), w.series(resolution=1).tolist()
        back = w.series("back", resolution=0).tolist() if "back" in w.fields else None
    finally:
        w.close()
    return _runs(fine, coarse, time.time(), back)


def _runs(
    fine: list[int], coarse: list[int], wall_s: float, back: list[int] | None = None
) -> dict[str, Any] | None:
    """fallback_status's arithmetic: failures per second (``fine``) and per minute (``coarse``),
    oldest first, the current bucket last; the minute buckets only where the seconds' ring does
    not reach (past its 10 minutes); switches back per second (``back``, as ``fine``): one in
    the second of the newest failure or later ends the run, and a run begins after the last
    switch back before it. Times to the bucket: seconds ago, then Unix time."""
    reach_s = len(fine)
    agos = [reach_s - 1 - i for i, n in enumerate(fine) if n]
    agos += [a for a in (60 * (len(coarse) - 1 - j) for j, n in enumerate(coarse) if n) if a >= reach_s]
    if not agos:
        return None
    backs = [len(back) - 1 - i for i, n in enumerate(back) if n] if back else []
    newest = since = min(agos)
    over = any(b <= newest for b in backs)  # a call got through at or after the newest failure
    fence = min((b for b in backs if b > newest), default=None)  # the switch back before this run
    for ago in sorted(agos):
        gap_s = GAP_S if ago < reach_s else GAP_S + 60  # a minute bucket is known to its minute
        if ago - since > gap_s or (fence is not None and ago >= fence):
            break
        since = ago
    return {"active": newest < ACTIVE_S and not over, "since": wall_s - since, "last": wall_s - newest,
            "failures": int(sum(fine[-60:]))}  # fmt: skip


def check_local(on_error: str, fallback: Rates | None, backend: str | None) -> None:
    """``fallback=`` goes with ``on_error="local"``, and both with a remote backend: a clear
    ValueError before anything is opened."""
    if fallback is not None and on_error != "local":
        raise ValueError(f"fallback={fallback!r} is the local share of on_error='local', not of {on_error!r}")
    if on_error == "local" and urllib.parse.urlsplit(backend or "").scheme in ("", "shm"):
        raise ValueError("on_error='local' is for a remote backend (redis://, shm+redis://): "
                         "shared memory is never away")  # fmt: skip
    if fallback is not None:
        parse_many(fallback)  # a bad spelling fails here, not at the first outage


def _no_looser(have: list[Rate], want: list[Rate]) -> bool:
    """``want`` has the periods of ``have`` and no limit higher."""
    periods = [r.period_ns for r in have] == [r.period_ns for r in want]
    return periods and all(w.limit <= h.limit for w, h in zip(want, have, strict=True))


def host_id() -> str:
    """This host as the hosts zset knows it: hostname and the device of /dev/shm (two hosts in
    containers may share a hostname, never a tmpfs)."""
    import socket  # here: only a share's set-up asks, and socket (with selectors) costs every process 5 ms

    try:
        device = os.stat("/dev/shm").st_dev
    except OSError:  # pragma: no cover - no /dev/shm: shared memory would not work either
        device = 0
    return f"{socket.gethostname()}:{device}"


def shares(rates: list[Rate], hosts: int) -> list[Rate] | None:
    """Each rate's limit divided by ``hosts``, rounded down; None if a share is below one hit."""
    out = [Rate(r.limit // hosts, r.period_ns) for r in rates if r.limit >= hosts]
    return out if len(out) == len(rates) else None


_AWAY: Any = object()  # LocalShare._asked: the backend not asked, or away: the share answers


class _CarryBusy(Exception):
    """Another process of the host is carrying (perhaps waiting on a hung server): this one
    stays on its share until its next probe, rather than queueing behind it."""


@contextmanager
def _carrying(name: str) -> Iterator[None]:
    """An exclusive flock of the host's ``NAME.local.away`` file (a window's: no mover ever
    locks it) while a switch back carries: the next carrier reads what this one left. Waited for
    up to CARRY_WAIT_S; not had in time: :class:`_CarryBusy` (the holder's carry may be waiting
    on a hung server: on a cluster four socket timeouts, and the probes of a host's workers
    queued behind each other for seconds). No such file: carried unlocked, the same hits
    perhaps counted twice, the stricter side."""
    try:
        fd = live._open_lockable(path_of(name), os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        if not live._lock(fd, CARRY_WAIT_S):
            raise _CarryBusy(name)
        yield
    finally:
        live._close_lockable(fd)  # lets go of the flock


class LocalShare:
    """A limiter's hits while its backend is away (see the module's text)."""

    def __init__(self, backend: Any, fallback: Rates | None, clock: Any, on_full: str, limiter: Any):
        self._limiter = limiter  # the Limiter class, for the local tier (no import cycle)
        self._backend = backend
        self._fixed = parse_many(fallback) if fallback is not None else None
        self._clock = getattr(clock, "clock", clock)  # a test's ServerTime: its clock drives the host too
        self._on_full = on_full
        self._hosts = 1
        self._counted = False  # this process counted the hosts (it reached the backend): its share is known
        self._known_ns = 0  # wall ns of its last answered call: when its rates were the backend's
        self._no_room = False  # the share could not be made (a full /dev/shm): on_full answers
        self._next_beat = 0.0  # monotonic s: when to count the hosts again
        self._away_since_ns: int | None = None  # wall clock, for people and exporters
        self._next_probe = 0.0
        self._local: Any = None  # a shared-memory Limiter, NAME.local
        self._local_hit_fn: Any = None  # its hit (the native core's), once opened
        self._front: Any = None  # the Limiter whose hit this share sets (bind)
        self._away: Any = None  # NAME.local.away, once this process met the backend away
        self._host = host_id()

    @property
    def away_since_ns(self) -> int | None:
        """Since when (time.time_ns) this process has been enforcing the local share, or None."""
        return self._away_since_ns

    def bind(self, front: Any) -> None:
        """Make ``front.hit`` this share's: while away, a closure over the local share's native
        hit (no attribute look-ups: the hot path of benchmarks/bench_fallback.py), swapped back
        to the asking path once it is time to ask the backend again."""
        self._front = front
        front.hit = self.hit

    def unbind(self) -> None:
        """Leave the front's ``hit`` alone (shadow mode: its own ``hit`` calls :meth:`hit`)."""
        self._front = None

    def hit(self, key: Any, cost: int = 1) -> bool:
        return self._hit_asking(key, cost)

    def _away_hit(self) -> Any:
        local_hit: Callable[[Any, int], bool] = self._local_hit_fn
        probe_at, asking = self._next_probe, self._hit_asking
        countdown = CLOCK_EVERY

        def hit(key: Any, cost: int = 1) -> bool:
            nonlocal probe_at, countdown
            countdown -= 1
            if countdown <= 0:
                countdown = CLOCK_EVERY
                if monotonic() >= probe_at:  # time to ask (a caller may hold this closure: keep it true)
                    ok = asking(key, cost)
                    probe_at = self._next_probe if self._away_since_ns is not None else 0.0
                    return ok
            try:
                return local_hit(key, cost)
            except WindowClosedError:  # the share moved (its rates changed: shmwin set), or closed here
                return self._moved_hit(key, cost)

        return hit

    def _asked(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` on the backend when it is time to ask it (the host's local hits
        carried first), its answer; :data:`_AWAY` when it is not time, or the backend was away
        (this process then on its share until its next probe), or another process carries."""
        if not self._should_ask():
            return _AWAY
        try:
            self._carry_back()
            answer = call(*args)
        except _CarryBusy:
            self._next_probe = time.monotonic() + PROBE_S
            return _AWAY
        except BackendUnavailableError:
            self._went_away()
            return _AWAY
        self._answered()
        return answer

    def _hit_asking(self, key: Any, cost: int) -> bool:
        answer = self._asked(self._backend.hit, key, cost)
        if answer is not _AWAY:
            return bool(answer)
        ok = self._local_hit(key, cost)
        if self._front is not None and self._local_hit_fn is not None and self._away_since_ns is not None:
            self._front.hit = self._away_hit()  # until the next probe: the lean path
        return ok

    def test(self, key: Any, cost: int = 1) -> bool:
        answer = self._asked(self._backend.check, key, cost, False, False)
        if answer is not _AWAY:
            return bool(answer[0])
        local = self._local_limiter()
        return self._unmade() if local is None else bool(local.test(key, cost))

    def check(self, key: Any, cost: int, commit: bool) -> tuple[Any, ...]:
        """``acquire``'s try (the front's ``_tries``): the backend's ``check`` while it answers,
        else the share's, as :meth:`hit` decides: no round trip per try while away."""
        answer = self._asked(self._backend.check, key, cost, commit)
        if answer is not _AWAY:
            return tuple(answer)
        local = self._local_limiter()
        if local is None:  # no share to wait for: the answer is final (wait None)
            return (self._unmade(), (), (), None)
        return tuple(local._backend.check(key, cost, commit))

    def stats_all(self, key: Any) -> list[Any] | None:
        """Where ``key`` stands against this host's share while this process is on it; None
        while the backend answers (or a share below one hit: nothing is made to read)."""
        if self._away_since_ns is None:
            return None
        local = self._local_limiter(make=False)
        return None if local is None else list(local.stats_all(key))

    # -- the switch ---------------------------------------------------------------------------

    def raise_if_away(self) -> None:
        """BackendUnavailableError, without asking, while this process is on its local share and
        not due to ask again: ``stats`` (and the middlewares' headers) cost no timeout then."""
        if self._away_since_ns is not None and time.monotonic() < self._next_probe:
            raise BackendUnavailableError(f"the backend of {self._backend.name!r} is away: on the local "
                                          f"share since {self._away_since_ns / 1e9:.3f}")  # fmt: skip

    @contextmanager
    def asking(self) -> Iterator[None]:
        """A read that asks the backend (``stats``): one that meets it away counts as a failed
        probe (the next one put off by PROBE_S, the record told), so that the reads after it
        raise at once instead of each waiting the socket timeout."""
        try:
            yield
        except BackendUnavailableError:
            self._went_away()
            raise

    def _should_ask(self) -> bool:
        return self._away_since_ns is None or time.monotonic() >= self._next_probe

    def _went_away(self) -> None:
        if self._away_since_ns is None:
            self._away_since_ns = time.time_ns()
            self._follow_share()
        self._next_probe = time.monotonic() + PROBE_S
        self._mark_away()

    def _mark_away(self) -> None:
        """One failure in NAME.local.away (for fallback_status); a record that cannot be made (a
        full /dev/shm) is skipped: the share itself goes on."""
        from .window import Window

        try:
            if self._away is None:
                self._away = Window(self._backend.name + AWAY_SUFFIX, resolutions=AWAY_RESOLUTIONS,
                                    fields=AWAY_FIELDS, mode="locked", clock=self._clock)  # fmt: skip
            self._away.add(1)
        except (ShmwinError, OSError):
            pass

    def _answered(self) -> None:
        if self._away_since_ns is not None and self._away is not None:  # the switch back: the run ends
            with suppress(ShmwinError, OSError):
                self._away.add(1, field="back")
        self._away_since_ns = None
        self._known_ns = time.time_ns()  # the rates and hosts known now are the backend's
        if self._front is not None:
            self._front.hit = self.hit
        now = time.monotonic()
        if self._fixed is None and now >= self._next_beat:
            self._next_beat = now + BEAT_S
            try:
                self._hosts = max(1, int(self._backend.hosts_seen(self._host, HOSTS_HORIZON_NS)))
                self._counted = True
            except BackendUnavailableError:  # the hosts known stay; the call itself was answered:
                pass  # a ?spread=N key's group answers while the name's own tag (its hosts) may not

    def _carry_back(self) -> None:
        """After an outage (this process was away): count the host's local hits on the global
        keys, before anything else is decided there; a key's hits are given back locally only
        once they went through, and only those (a refund, not a clear: a hit that another
        process still on the share admits meanwhile stays, for its own switch back to carry).
        One process of the host carries at a time (:func:`_carrying`): processes switching back
        at once would each count the same hits before any gave them back; one that cannot have
        the flock soon raises :class:`_CarryBusy` and stays on the share until its next probe."""
        if self._away_since_ns is None:
            return  # never away since the last carry: nothing of this process's to carry
        local = self._local_limiter(make=False)
        if local is None:
            return
        with _carrying(self._backend.name + AWAY_SUFFIX):
            keys = local.window.keys()  # (a Window is not iterable)
            for key in keys:
                held = max(s.used for s in local.stats_all(key))
                if held > 0:
                    self._backend.count_anyway(key, held)
                    local.refund(key, held)
                else:
                    local.clear(key)

    # -- the local tier -----------------------------------------------------------------------

    def _local_hit(self, key: Any, cost: int) -> bool:
        local = self._local_limiter()
        if local is None:
            return self._unmade()
        try:
            return bool(local.hit(key, cost))
        except WindowClosedError:
            return self._moved_hit(key, cost)

    def _moved_hit(self, key: Any, cost: int) -> bool:
        """A hit that met the share's segment closed: if the share moved (another process, or
        ``shmwin set``, changed its periods: the failed call made this process's handle follow),
        hit there and keep its native hit; if this process closed it, raise."""
        local = self._local
        if local is None or local.closed:
            raise WindowClosedError(f"{self._backend.name!r} is closed")
        self._local_hit_fn = local.hit
        if self._front is not None and self._away_since_ns is not None:
            self._front.hit = self._away_hit()
        return bool(local.hit(key, cost))

    def _unmade(self) -> bool:
        """The answer while there is no share to count in: refused when it is below one hit;
        when /dev/shm had no room to make it, what ``on_full`` says of a key with no row."""
        return self._no_room and self._on_full == "allow"

    def _want(self) -> list[Rate] | None:
        """The share this process knows: ``fallback=``, else the rates in force over the hosts."""
        return self._fixed or shares(list(self._backend.rates), self._hosts)

    def _follow_share(self) -> None:
        """At the start of an outage: ``NAME.local`` gets the share this process knows, if it
        knows one (``fallback=``, or the hosts it counted) and it is not the one there: the
        limit may have changed live, hosts come and go. The counts stay (a live change of
        the local limiter's rates). A process that never reached the backend (one host, its own
        rates: a deploy made while it was away) sets only a share no looser than the one there."""
        want = self._want()
        if want is None:
            return
        uncounted = self._fixed is None and not self._counted
        try:
            local = self._local_limiter()
            if local is None or local.rates == want:
                return
            if _no_looser(list(local.rates), want) if uncounted else self._knows_better(local, want):
                local.set_rates(want)
                self._local_hit_fn = local.hit
        except (ShmwinError, OSError):  # a full /dev/shm for a move: the share there goes on
            pass

    def _knows_better(self, local: Any, want: list[Rate]) -> bool:
        """Whether this process's share may replace the one ``NAME.local`` has: a ``fallback=``
        always (the code's); else one no looser (the same periods, no limit higher), or one this
        process knew (its last answered call) after the share there was last set. A worker that
        made no call since the limit was changed live knows the old rates: it must not set the
        share of a process that knew the new ones back to them (the last to meet the outage
        would win, a lowered limit's host admitting the old one's share)."""
        if self._fixed is not None or _no_looser(list(local.rates), want):
            return True
        window = local._backend.window
        _, changed_ns, _ = live.generation(window)
        return self._known_ns > (changed_ns or window.meta.created_real_ns)

    def _local_limiter(self, make: bool = True) -> Any:
        """``NAME.local`` on this host: attached if another process made it, else made with the
        share (None: the share is below one hit, so every hit is refused; or not ``make``)."""
        if self._local is not None:
            return self._local
        name = self._backend.name + SUFFIX
        want = self._want()
        self._no_room = False
        if want is None:
            return None
        for _ in range(3):  # made and removed by others meanwhile: try again
            try:
                self._local = self._limiter.attach(name, clock=self._clock, on_full=self._on_full)
                self._local_hit_fn = self._local.hit
                return self._local
            except WindowNotFoundError:
                if not make:
                    return None
            try:
                self._local = self._limiter(name, tuple(want), clock=self._clock, on_full=self._on_full,
                                      decisions=False)  # fmt: skip
                self._local_hit_fn = self._local.hit
                return self._local
            except GeometryMismatchError:  # another process made it with its share first
                continue
            except (OutOfSpaceError, KeyTableFullError):  # no room for it: on_full answers
                if self._on_full == "raise":
                    raise
                self._no_room = True
                return None
        raise BackendUnavailableError(f"could not open the local share {name!r}")

    def close(self) -> None:
        """Close the share's segments here; the limiter's calls go to its closed backend again,
        which says the limiter is closed (not ``NAME.local``, which the caller never opened)."""
        if self._local is not None:
            self._local.close()
        if self._away is not None:
            self._away.close()
        self._local_hit_fn = None
        self._away_since_ns, self._next_probe = None, 0.0
        if self._front is not None:
            self._front.hit = self.hit

    def unlink(self) -> bool:
        """Remove this host's local share and its record (a limiter's unlink removes them with
        the rest)."""
        self.close()
        self._local = self._away = None
        unlink(self._backend.name + AWAY_SUFFIX)
        return bool(unlink(self._backend.name + SUFFIX))
