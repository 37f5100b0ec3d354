"""Live rates of a limiter on Redis: the name's state as ``lua/change.lua`` keeps it, and the
pieces of a hit that depend on it (docs/redis.md, "Changing limits live").

A name's state is its spec in force, its *generation* (the name's time in microseconds at its
claim or last change: it only grows), the *layout* its rows are written in (the generation of
the last change of periods or buckets) and the earlier layouts whose rows may still hold live
hits. Every hit carries the generation its process knows; a hit script that meets a newer one
writes nothing and answers "stale", and the process reads the state again (``RedisLimiter``):
the newest rates win, and a process still running old code converges at its next call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STALE = -1  # what hit_one.lua answers, and hit.lua's first word, for a hit of an older generation
CARRY = -3  # what hit_one.lua answers for a key whose first hit since a change needs hit.lua's carry
RETRIES = 8  # reads of the state before a hit gives up (a change at each: never in practice)
ON_CHANGE = ("carry", "reset", "raise")
RENEW = "renew"  # change.lua's reset even to the rates in force (asked_change)


@dataclass(frozen=True)
class OldLayout:
    """An earlier layout of the name's rows: its generation (0: the first), its rings' (bucket
    µs, buckets), and the name's time (µs) after which its rows hold no live hit."""

    layout: int
    rings: tuple[tuple[int, int], ...]
    until_us: int


@dataclass(frozen=True)
class LiveState:
    """What change.lua answers: the name's state after the call."""

    spec: str
    gen: int
    layout: int
    olds: tuple[OldLayout, ...]
    changed_us: int  # 0: never changed
    changes: int
    moved: bool  # this call changed the rates


def parse_state(out: list[Any]) -> LiveState:
    """change.lua's answer, ``{1, spec, gen, layout, history, changed, changes, moved}``."""
    spec, gen, layout, history, changed, changes, moved = (_text(v) for v in out[1:8])
    olds = []
    for entry in filter(None, history.split(";")):
        layout_text, rings, until = entry.split(":")
        words = [int(v) for v in rings.split(",")]
        pairs = tuple((words[i] // 1000, words[i + 1]) for i in range(0, len(words), 2))
        olds.append(OldLayout(int(layout_text), pairs, int(until)))
    newest_first = tuple(reversed(olds))
    return LiveState(spec, int(gen), int(layout), newest_first, int(changed), int(changes), moved == "1")


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def row_infix(layout: int) -> str:
    """Where a key's row of ``layout`` is, after the name's hash tag: ``k:`` for the first
    layout (as before live rates), ``k<layout>:`` after a change of periods or buckets."""
    return "k:" if layout == 0 else f"k{layout}:"


def old_args(olds: tuple[OldLayout, ...]) -> list[int]:
    """hit.lua's ARGV for the earlier layouts' rows: H, then per layout its until, its rings and
    per ring (bucket µs, buckets, word offset)."""
    args = [len(olds)]
    for old in olds:
        args += [old.until_us, len(old.rings)]
        word = 0
        for bucket_us, n in old.rings:
            args += [bucket_us, n, word]
            word += 2 + 2 * n
    return args


def live_olds(olds: tuple[OldLayout, ...], now_us: int) -> tuple[OldLayout, ...]:
    """The earlier layouts whose rows may still hold live hits at the name's time ``now_us``."""
    return tuple(old for old in olds if old.until_us > now_us)


def run_change(
    base: Any, spec: str, mode: str, known: int = 0, floor: int = 0, seen_us: int = 0
) -> LiveState:
    """change.lua for the name of ``base`` (a RedisBase; ``mode``: an on_change, "attach" to
    read the state, "sync" after a hit met generation ``floor`` while its process knows
    ``known`` for ``spec``, or "deferred-<on_change>" for an open ``known`` µs ago; ``seen_us``:
    the newest time of the name's spread groups): the state after it, or the error an opener of
    ``spec`` gets."""
    from ...errors import GeometryMismatchError, WindowNotFoundError
    from . import scripts

    keys = [base._prefix + "meta", base._clock_key, base._prefix + "gen"]
    out = base._eval(scripts.CHANGE, keys, [spec, mode, known, floor, seen_us])
    if int(out[0]) == 1:
        return parse_state(out)
    have = _text(out[1])
    if not have:
        raise WindowNotFoundError(f"no limiter or token bucket named {base.name!r} on redis")
    same_kind = have.partition(";")[0] == spec.partition(";")[0]
    hint = " (on_change='carry' changes its rates live)" if same_kind else ""
    raise GeometryMismatchError(
        f"{base.name!r} exists on redis with geometry [{have}], not the requested [{spec}]{hint}"
    )


def sync(base: Any, spec: str, known: int, gen_key: str) -> LiveState:
    """A hit of ``base`` met another generation in ``gen_key`` than the ``known`` one of its
    ``spec``: change.lua's 'sync' brings the meta and the generation key back in step (a change
    read, or a wipe or rollback repaired) and answers the state to follow."""
    floor = base._call(base._redis.get, gen_key)
    return run_change(base, spec, "sync", known, int(floor or 0))


def is_current(base: Any, gen_key: str) -> bool:
    """Whether the generation in ``gen_key`` is the one ``base`` (a RedisLimiter or
    RedisTokenBucket) knows: one GET, for the calls that act on what it knows without a hit
    script's own check (a clear, a cost refused against the burst it knows)."""
    return bool(int(base._call(base._redis.get, gen_key) or 0) == base._state.gen)


def check_on_change(on_change: str) -> str:
    if on_change not in ON_CHANGE:
        raise ValueError(f"on_change must be one of {list(ON_CHANGE)}, not {on_change!r}")
    return on_change


def other_kind(kind: str, wanted: str) -> Exception:
    """What opening a name that holds another ``kind`` raises: a two-tier limiter's name says
    how to open it (on ``redis://`` it looks like no limiter)."""
    from ...errors import GeometryMismatchError

    how = " (a two-tier limiter's: open it with shm+ before the URL, shm+redis://...)"
    hint = how if kind == "lease-limiter" else ""
    if kind.startswith("limiter/spread="):  # a spread limiter's, opened without its ?spread=N
        hint = f" (a limiter whose keys are spread: open it with ?{kind.partition('/')[2]} in the URL)"
    return GeometryMismatchError(f"this name holds a {kind} on redis, not a {wanted}{hint}")


def asked_change(on_change: str) -> str:
    """change.lua's mode for a change asked for (``set_rates``, ``shmwin set``): a reset is
    'renew', made even when the rates are already the ones in force (an open's is not)."""
    return RENEW if check_on_change(on_change) == "reset" else on_change
