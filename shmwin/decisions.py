"""A limiter's decisions: how many hits it admitted, refused, and admitted near the limit.

Every :class:`~shmwin.limiter.Limiter` and :class:`~shmwin.token_bucket.TokenBucket` on shared
memory keeps, beside its segment ``NAME``, a
small striped window ``NAME.decisions`` (role "decisions") of three fields over its longest
period: ``admitted``, ``rejected`` and ``near_limit`` -- an admitted hit that left at most a
fifth of some rate's limit (envoyproxy/ratelimit's ``near_limit``, at 80 %). The native core
counts each ``hit()`` there after the key's lock is given back, in the calling process's own
row of that window (no lock, no shared cache line), so the counts are every process's and
cost a few ns. ``acquire()`` counts its admission; a try that must wait is not a decision.

In shadow mode (``Limiter(..., shadow=True)``, nginx's ``limit_req_dry_run``) ``hit()``
always answers True, while what it counts is what enforcement would do: a hit over the limit
is a rejection and is not counted against the key.

The window is made with the limiter (``decisions=False``: not at all), and a process that
attaches the limiter counts into it if it exists; the tools (``shmwin ls/show``, the
Prometheus export) read it as any window of role "decisions".
"""

from __future__ import annotations

from typing import Any, NamedTuple

from . import backends
from .backends.contract import MAX_NAME_CHARS
from .clock import Clock
from .duration import format_ns
from .errors import NotSupportedError, WindowNotFoundError
from .window import Window

SUFFIX = ".decisions"  # the window's name, after the limiter's
FIELDS = ("admitted", "rejected", "near_limit")  # the core's TALLY_* order (methods.c)
BUCKETS = 20  # counts forgotten between P and P + P/20 after they happened
NEAR_LIMIT_SHARE = 0.2  # admitted with at most this share of a limit left


class Decisions(NamedTuple):
    """Hits over the limiter's longest period, every process's: ``admitted`` (``near_limit``
    of them with at most a fifth of some limit left after) and ``rejected``."""

    admitted: int
    rejected: int
    near_limit: int


def window_name(limiter: str) -> str | None:
    """The decisions window's name, or None if the limiter's name leaves no room for it."""
    name = limiter + SUFFIX
    return name if len(name) <= MAX_NAME_CHARS else None


def open_window(limiter: str, longest_period_ns: int, *, create: bool, clock: Clock | None = None,
                perm: int | None = None) -> Window | None:  # fmt: skip
    """The limiter's decisions window: created (``create``) or attached; None if it has none."""
    name = window_name(limiter)
    if name is None:
        return None
    if create:
        buckets = BUCKETS if longest_period_ns % BUCKETS == 0 else 1
        span = format_ns(longest_period_ns)  # the shortest exact spelling
        return Window._for_role("decisions", name, span, buckets, FIELDS, clock=clock, perm=perm)
    try:
        window = Window.attach(name, clock=clock)
    except WindowNotFoundError:
        return None
    if window.geometry.role != "decisions":
        window.close()
        return None
    return window


def bind(front: Any, shadow: bool, *, create: bool, longest_ns: int, perm: int | None = None) -> None:
    """``front``'s (a Limiter's or a TokenBucket's) shadow mode and decisions window: the
    shared-memory core does both natively (``_set_tally``); another backend keeps no decisions,
    and its shadow mode is the front's ``_hit_shadow``."""
    front.shadow = bool(shadow)
    front._decisions = None
    set_tally = getattr(front._backend, "_set_tally", None)
    if set_tally is None:
        if front.shadow:
            front.hit = front._hit_shadow
        return
    try:
        front._decisions = open_window(front.name, longest_ns, create=create, clock=front._clock_arg,
                                       perm=perm)  # fmt: skip
        set_tally(front._decisions, front.shadow)
    except BaseException:  # all or none: what this constructor created goes (a full /dev/shm)
        if front._decisions is not None:
            front._decisions._discard()
        backends.discard(front._backend)
        raise


def read(window: Window | None, limiter: str) -> Decisions:
    """The counts in ``window`` now (the whole span: the limiter's longest period)."""
    if window is None:
        raise NotSupportedError(
            f"limiter {limiter!r} keeps no decisions (made with decisions=False, on a backend "
            "that has none, or a name too long for its decisions window)"
        )
    totals = window.totals()
    return Decisions(*(int(totals[f]) for f in FIELDS))


__all__ = ["FIELDS", "NEAR_LIMIT_SHARE", "SUFFIX", "Decisions", "bind", "open_window", "read", "window_name"]
