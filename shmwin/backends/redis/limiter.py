"""RedisLimiter: ``Limiter`` on Redis -- strict multi-rate check-and-count, one atomic script.

A key's rings are one string, ``shmwin:{NAME}:k:KEY``, of i64 words (see
``lua/hit.lua``): per rate ``[head epoch][running total]`` then ``n x [epoch][hits]``.
The running-total step lives in the two scripts that write this format: a plain
one-rate hit runs the lean ``lua/hit_one.lua`` (one GET, one SET); everything else runs
``lua/hit.lua`` (BITFIELD, O(1) per word), which also answers when each rate's oldest
hit leaves and when a cost would fit, as the native core's ``check`` does. The key
expires by itself a span (plus two buckets) after the bucket of its last hit opened.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

from ...errors import GeometryMismatchError, NotSupportedError, TotalOverflowError, WindowExistsError
from ...geometry import Geometry, limiter_geometry, rates_of
from ...policy import cost_of
from ...rate import Rate
from ..contract import Check, Key, Request, WindowBackend
from . import live, scripts
from .client import NS_PER_US, RedisBase, key_text, not_supported, required_key, spread_groups, unavailable

DEFAULT_CAPACITY = 10_000  # what an attach reports: redis keys have no table to fill


class RedisLimiter(RedisBase):
    """``Limiter`` on Redis: strict multi-rate check-and-count in one atomic script; its rates
    change live (``live.py``): every hit carries the generation of the rates it knows."""

    def __init__(self, req: Request, g: Geometry, claim: bool):
        if any(r.bucket_ns % NS_PER_US for r in g.rings):
            raise ValueError("the redis backend keeps whole-microsecond buckets")
        self._groups = spread_groups(req.url)  # ?spread=N on a cluster: N hash tags, else the name's one
        self._on_change = live.check_on_change(req.option("on_change", "raise"))
        self._plain = req.clock is None
        self._hit1_runner: Any = None  # EVALSHA of the lean script, once the name is claimed
        self._seen_us = 0  # the newest time of the name a hit answered: earlier layouts' rows expire by it
        self._adopt(g, live.LiveState(_limiter_spec(g, self._groups), 0, 0, (), 0, 0, False))
        super().__init__(req, self._spec_of_g if claim else None)
        self._deferred = True  # a claim from now on (the server was away at the open) follows
        if not claim:
            self._refresh()

    def _adopt(self, g: Geometry, state: live.LiveState) -> None:
        """Take ``g`` (the rates of ``state``) as this process's: a hit's constants and rows."""
        self._g, self._rings, self._state = g, g.rings, state
        self._spec_of_g = _limiter_spec(g, self._groups)
        words, self._args = 0, []
        for r in g.rings:  # each rate's words: head, total, then n x (epoch, hits)
            self._args += [str(r.bucket_ns // NS_PER_US), str(r.n_buckets), str(r.limit), str(words)]
            words += 2 + 2 * r.n_buckets
        self._ttl_ms = max(r.span_ns + r.bucket_ns for r in g.rings) // 1_000_000 + 1
        ring = g.rings[0]
        self._hit1 = scripts.hit_one(self._ttl_ms, ring.bucket_ns // NS_PER_US, ring.n_buckets)
        self._olds = live.live_olds(state.olds, self._seen_us)
        # ARGV[3:]: what changes live; while earlier layouts live, a key with no row goes to hit.lua
        self._hit1_args = (str(ring.limit), str(state.gen), "1" if self._olds else "0")
        self._infix = live.row_infix(state.layout)
        self._lean = len(g.rings) == 1 and self._plain  # after a change too: the same cost (3 %)
        self._on_claimed()

    def _claim(self, exclusive: bool = False) -> None:
        """Claim the name for these rates, or change its rates by ``on_change`` (change.lua)."""
        meta = self._prefix + "meta"
        if exclusive and not self._call(self._redis.hsetnx, meta, "geometry", self._spec_of_g):
            raise WindowExistsError(f"window {self.name!r} already exists on redis")
        self._change(self._spec_of_g, *self._claim_mode(exclusive, self._on_change))
        self._claimed = True
        self._on_claimed()

    def _change(self, spec: str, mode: str, opened_ago_us: int = 0) -> None:
        """Run change.lua (``mode``: an on_change, "attach" to read the state, or a deferred
        claim's, opened ``opened_ago_us`` ago) and follow it."""
        seen_us = 0
        if self._groups and (mode in (*live.ON_CHANGE, live.RENEW) or mode.startswith("deferred-")):
            self._pre_raise(spec, renew=mode == live.RENEW)
            seen_us = self._groups_time()
        state = live.run_change(self, spec, mode, opened_ago_us, seen_us=seen_us)
        self._follow(state)
        if state.moved and self._groups:  # each group's generation, raised before the change returns
            self._raise_groups(state.gen)

    def _follow(self, state: live.LiveState) -> None:
        rates, buckets = _parse_limiter_spec(state.spec, self._groups)
        capacity = self._g.capacity or DEFAULT_CAPACITY
        self._adopt(dataclasses.replace(limiter_geometry(rates, buckets, capacity), role=self._g.role), state)

    def _pre_raise(self, spec: str, renew: bool = False) -> None:
        """Spread, before a change commits: every group's generation one past the name's. Groups
        are other slots, so no one step raises them all; raised first, a changer killed at any
        point leaves no group where a stale process counts unseen: before its commit, a hit in a
        raised group repairs the name (change.lua's 'sync': the old rates, a newer generation);
        after it, the hit reads the new rates."""
        have, gen = self._call(self._redis.hmget, self._prefix + "meta", "geometry", "gen")
        if have is not None and (renew or have.decode() != spec):
            self._raise_groups(int(gen or 0) + 1)

    def _groups_time(self) -> int:
        """The newest time (µs) of the groups' clocks: the name's own stands still between changes."""
        clocks = [self._call(self._redis.get, self._group_prefix(g) + "clock") for g in range(self._groups)]
        return max([int(c.split()[0]) for c in clocks if c] or [0])

    def _raise_groups(self, gen: int) -> None:
        for group in range(self._groups):
            self._eval(scripts.GEN, [self._group_prefix(group) + "gen"], [gen])

    def _refresh(self) -> None:
        """Read the name's rates anew (an attach)."""
        self._change("", "attach")

    def _sync(self, key: Key) -> None:
        """A hit of ``key`` met another generation than this process knew: read the newest rates,
        or repair a name wiped or rolled back (change.lua's 'sync'); spread, then make every
        group's generation the name's (a changer may have died before it did)."""
        tag = self._tag_of(key_text(required_key(key, "a limiter's")))
        self._follow(live.sync(self, self._spec_of_g, self._state.gen, tag + "gen"))
        if self._groups:
            self._raise_groups(self._state.gen)

    def _set_rates(self, want: Geometry, on_change: str = "carry") -> None:
        """Change the rates for every process (``Limiter.set_rates``): "carry" or "reset"."""
        self._check_open()
        self._change(_limiter_spec(want, self._groups), live.asked_change(on_change))

    @property
    def live_state(self) -> live.LiveState:
        """The name's state as this process last read it (generation, layout, last change)."""
        return self._state

    def live_view(self) -> dict[str, Any]:
        """``shmwin show``'s live line: changes made, when the last was (Unix seconds: the name's
        time is the server's TIME; None: never)."""
        state = self._state
        return {"changes": state.changes, "changed": state.changed_us / 1e6 if state.changes else None,
                "moved": False}  # fmt: skip

    @classmethod
    def open(cls, req: Request) -> RedisLimiter:
        """The registry's entry: create-or-attach ``req.geometry``, or attach (``None``)."""
        if req.geometry is None:
            rates, buckets = _parse_limiter_spec(RedisBase.read_spec(req), spread_groups(req.url))
            return cls(req, limiter_geometry(rates, buckets, DEFAULT_CAPACITY), claim=False)
        if any(r.log for r in req.geometry.rings):
            raise NotSupportedError("the redis backend keeps buckets: exact=True is shared memory's only")
        return cls(req, req.geometry, claim=True)

    def _on_claimed(self) -> None:
        # a sentinel's WAIT goes through _run; before RedisBase set the connection up, nothing
        lean = self._lean and getattr(self, "_claimed", False) and not self._replicas
        self._hit1_runner = self._redis.evalsha if lean else None

    def _tag_of(self, text: str) -> str:
        """The hash tag's prefix of a key's rows, clock and generation: the name's, or spread
        (``?spread=N``), group crc32(key) % N's, ``{NAME#group}``, so a name's keys fall on N
        slots -- on every master -- and each group's time never goes back."""
        if not self._groups:
            return self._prefix
        return self._group_prefix(zlib.crc32(text.encode("utf-8", "surrogatepass")) % self._groups)

    def _keys_of(self, key: Key) -> tuple[str, str]:
        """A key's row and the clock key its scripts keep time with."""
        row, clock, *_ = self._script_keys(key)
        return row, clock

    def _script_keys(self, key: Key) -> list[str]:
        """hit.lua's KEYS: the key's row, its clock, its generation, its rows of earlier layouts."""
        text = key_text(required_key(key, "a limiter's"))
        tag = self._tag_of(text)
        olds = [tag + live.row_infix(old.layout) + text for old in self._olds]
        return [tag + self._infix + text, tag + "clock", tag + "gen", *olds]

    def _group_prefix(self, group: int) -> str:
        return f"shmwin:{{{self.name}#{group}}}:"

    def unlink(self) -> bool:
        """Remove the name: its claim and, spread, every group's rows and clock."""
        there = False
        for group in range(self._groups):
            there = self._drop_at(self._group_prefix(group)) > 0 or there
        return super().unlink() or there

    def _drop_at(self, prefix: str) -> int:
        try:
            return self._scan_and_delete("*", prefix)
        except self._errors as exc:
            raise unavailable(self.url, exc) from exc

    @property
    def geometry(self) -> Geometry:
        return self._g

    @property
    def rates(self) -> list[Rate]:
        return rates_of(self._g)

    @property
    def window(self) -> WindowBackend:
        raise not_supported("window view of a limiter: its rings are BITFIELD strings, not window rows")

    def hit(self, key: Key, cost: int = 1) -> bool:
        """Count ``cost`` hits for ``key`` if every rate allows them: one round trip."""
        for _ in range(live.RETRIES):
            evalsha = self._hit1_runner
            if evalsha is None or type(key) is not str or type(cost) is not int or cost <= 0:
                return self.check(key, cost_of(cost, 1), True, False)[0]
            # the common case: EVALSHA of the lean script, nothing in between
            tag = self._tag_of(key) if self._groups else self._prefix
            keys = (tag + self._infix + key, tag + "clock", tag + "gen")
            try:
                got = evalsha(self._hit1.sha, 3, *keys, "", cost, *self._hit1_args)
            except self._no_script:  # a restarted server (a cluster's new master) forgot it: EVAL caches it
                got = self._run(self._hit1, keys, [cost, *self._hit1_args])
            except self._errors as exc:
                raise unavailable(self.url, exc) from exc
            except self._refused as exc:
                raise self._refusal(exc) from exc
            if got == live.CARRY:
                return self.check(key, cost_of(cost, 1), True, False)[0]
            if got != live.STALE:
                return bool(got)
            self._sync(key)  # the rates changed: the newest win
        return self._final(key, cost_of(cost, 1), 1, False)[0]

    def check(self, key: Key, cost: int, commit: bool, detail: bool = True) -> Check:
        """One round trip: the native core's answer (see ``lua/hit.lua``'s Returns)."""
        cost = cost_of(cost, 1 if commit else 0)
        for _ in range(live.RETRIES):
            out = self._hit(key, cost, int(commit), detail)
            if out is not None:
                return out
            self._sync(key)
        return self._final(key, cost, int(commit), detail)

    def _final(self, key: Key, cost: int, commit: int, detail: bool) -> Check:
        """A call that met a change at each of its RETRIES reads (a storm of changes): answered
        with the rates read last, whatever the generation key holds by now, rather than an
        error (red team F1: GeometryMismatchError, an HTTP 500). They were the name's rates a
        round trip ago; the process follows the next change at its next call."""
        out = self._hit(key, cost, commit, detail, final=True)
        assert out is not None  # the scripts answer 'stale' only for a generation they check
        return out

    def _hit(self, key: Key, cost: int, commit: int, detail: bool, final: bool = False) -> Check | None:
        """hit.lua (or the lean script) with this process's rates; None if they are stale
        (``final``: counted with them whatever the generation, see ``_final``)."""
        keys = self._script_keys(key)
        n_rates = len(self._g.rings)
        gen = "*" if final else self._state.gen
        try:
            if commit == 1 and not detail and n_rates == 1:  # a plain hit: the lean script
                limit, _, olds_flag = self._hit1_args
                got = self._run(self._hit1, keys[:3], [cost, limit, str(gen), olds_flag])
                if got != live.CARRY:
                    return None if got == live.STALE else (bool(got), (), (), 0)
            olds = live.old_args(self._olds)
            args = [cost, commit, int(detail), self._ttl_ms, gen, *olds, *self._args]
            out = self._run(scripts.HIT, keys, args)
        except self._refused as exc:
            raise self._refusal(exc) from exc
        if int(out[0]) == live.STALE:
            return None
        self._seen(int(out[1]))
        used = tuple(int(v) for v in out[2 : 2 + n_rates])
        reset_ns = tuple(int(v) * NS_PER_US for v in out[2 + n_rates : 2 + 2 * n_rates])
        wait = int(out[2 + 2 * n_rates])
        return bool(out[0]), used, reset_ns, None if wait < 0 else wait * NS_PER_US

    def _seen(self, now_us: int) -> None:
        """The name's time a hit answered: the earlier layouts it outlived are left out from now
        on (their rows hold no live hit), and a one-rate limiter goes back to the lean script."""
        self._seen_us = max(self._seen_us, now_us)
        if self._olds and live.live_olds(self._olds, self._seen_us) != self._olds:
            self._adopt(self._g, self._state)

    def _refusal(self, exc: Exception) -> Exception:
        """A script the server refused: a count past int64 (a row written before the scripts
        clamped their counts) as TotalOverflowError, anything else as it came."""
        if "not an integer or out of range" in str(exc) or "overflow" in str(exc):
            return TotalOverflowError(f"a count of {self.name!r} on redis is past int64: {exc}")
        return exc

    def _changing(self) -> GeometryMismatchError:
        return GeometryMismatchError(
            f"the rates of {self.name!r} on redis changed at each of {live.RETRIES} reads: try again"
        )

    def refund(self, key: Key, cost: int) -> int:
        raise NotSupportedError("refund() needs shared memory: the redis backend keeps no per-hit order")

    def charge(self, key: Key, cost: int) -> None:
        raise NotSupportedError("charge() needs shared memory: on redis, hit() is the only way to count")

    def count_anyway(self, key: Key, cost: int) -> None:
        """Count ``cost`` hits whatever the rates say: what a host admitted on its local share
        while the server was away (on_error="local"), carried back. Not the public charge():
        only the fallback may push a key past its limit on Redis."""
        for _ in range(live.RETRIES):
            if self._hit(key, cost_of(cost, 1), 2, False) is not None:
                return
            self._sync(key)
        self._final(key, cost_of(cost, 1), 2, False)

    def clear(self, key: Key) -> None:
        """Forget every hit of ``key`` (its rows of earlier layouts too). It follows a change first,
        as a hit does: a process that has not seen one would delete only the rows of its own
        layout, and the key's first hit in the new one would carry the old rows' hits back."""
        for _ in range(live.RETRIES):
            keys = self._script_keys(key)
            if not self._claimed or live.is_current(self, keys[2]):
                self._call(self._redis.delete, keys[0], *keys[3:])
                return
            self._sync(key)
        raise self._changing()

    def close(self) -> None:
        self._hit1_runner = None
        super().close()

    def __repr__(self) -> str:
        return f"<shmwin.Limiter {self.name!r} {';'.join(map(str, self.rates))} on {self.url}>"


def _limiter_spec(g: Geometry, groups: int = 0) -> str:
    """The claim: ``limiter;<rings>``, or ``limiter/spread=N;<rings>`` for spread keys (every
    host must spread alike: another spelling is a GeometryMismatchError)."""
    kind = f"limiter/spread={groups}" if groups else "limiter"
    return kind + ";" + ";".join(f"{r.bucket_ns},{r.n_buckets},{r.limit}" for r in g.rings)


def _parse_limiter_spec(spec: str, groups: int = 0) -> tuple[list[Rate], int]:
    kind, *rings = spec.split(";")
    if kind.startswith("limiter/") and kind != f"limiter/spread={groups}":
        raise GeometryMismatchError(
            f"this name's keys are spread as [{kind}] on redis: open it with that ?spread=N"
        )
    kind = kind.partition("/")[0]
    if kind != "limiter":
        raise live.other_kind(kind, "limiter")
    parsed = [tuple(int(v) for v in ring.split(",")) for ring in rings]
    buckets = parsed[0][1] - 1
    return [Rate(limit, bucket_ns * buckets) for bucket_ns, _, limit in parsed], buckets
