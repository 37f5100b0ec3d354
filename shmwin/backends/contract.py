"""The contract every backend keeps: what ``Window`` and ``Limiter`` ask of it.

``Window`` and ``Limiter`` (``shmwin/window.py``, ``shmwin/limiter.py``) are thin fronts:
they parse arguments into a :class:`~shmwin.backends.shm.layout.Geometry`, open a backend through the
registry (``shmwin.backends``), and apply the policy of ``shmwin/policy.py`` above it. A
backend does only what needs the store:

* a :class:`WindowBackend` adds, reads the last ``k`` buckets of one ring (a
  :class:`Reading`), ranks keys, clears, resets;
* a :class:`LimiterBackend` hits, and checks (``check``: allowed, used, reset and wait
  per rate, the native core's answer, which ``lua/hit.lua`` gives too).

Anything a backend cannot honour raises :class:`~shmwin.errors.NotSupportedError` naming
it; nothing is dropped. Both implementations (``backends/shm``, ``backends/redis``) are
checked against these Protocols by mypy, through the registry's typed factories.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar, overload, runtime_checkable

from ..clock import Clock
from ..geometry import Geometry, Meta
from ..policy import WINDOW_ON_FULL
from ..rate import Rate

if TYPE_CHECKING:  # a Reading's array, for the type checker: a limiter's process never loads numpy
    import numpy.typing as npt

Key = str | bytes  # what a keyed window or limiter is keyed by, on every backend

H = TypeVar("H", bound="Closing")


class Closing:
    """A front's lifecycle as a context manager: ``with Window(...) as w:`` closes ``w`` after
    the block -- this process's handle only; ``unlink()`` is what removes it for everyone."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: H) -> H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


T = TypeVar("T")


class Of(property, Generic[T]):
    """A front's read-only attribute that is one of its parts': its geometry's (``Window.buckets``
    is ``geometry.n_buckets``) or, ``via="_backend"``, its backend's (``Window.nbytes``): one
    line each instead of a property each. A property whose getter is an ``attrgetter``: the read
    runs no Python frame at all."""

    def __init__(self, attr: str, via: str = "_g", doc: str | None = None) -> None:
        doc = doc or f"The geometry's ``{attr}`` (read-only)."
        super().__init__(operator.attrgetter(f"{via}.{attr}"))
        self.__doc__ = doc  # on the instance: a property subclass's own docstring would shadow doc=
        self._name, self._owner = attr, "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self._owner, self._name = owner.__name__, name

    if TYPE_CHECKING:  # what a read gives, for the type checker (property's own __get__ runs)

        @overload
        def __get__(self, front: None, owner: type | None = None) -> Of[T]: ...
        @overload
        def __get__(self, front: object, owner: type | None = None) -> T: ...
        def __get__(self, front: object | None, owner: type | None = None) -> T | Of[T]: ...

    def __set__(self, front: object, value: object) -> None:  # read-only, as properties are
        raise AttributeError(f"{self._owner}.{self._name} is read-only")


# -- names: one spelling on every backend ---------------------------------------------------
MAX_NAME_CHARS = 200
NAME_SPELLING = re.compile(r"[A-Za-z0-9_.:@+=-]+")  # always fullmatch: "$" would accept a trailing "\n"
NAME_ALLOWED = "letters, digits and _ . : @ + = -"


def namespace() -> str:
    """``SHMWIN_NAMESPACE`` (default empty): hosts simulated on one machine, or tenants,
    each see only their own windows. Stored as ``shmwin.<namespace>~<name>``."""
    ns = os.environ.get("SHMWIN_NAMESPACE", "")
    if ns and not NAME_SPELLING.fullmatch(ns):
        raise ValueError(f"SHMWIN_NAMESPACE={ns!r} may only use {NAME_ALLOWED}")
    return f"{ns}~" if ns else ""


def check_spelling(name: str) -> str:
    """Validate a window name (every backend spells names alike) and the namespace it lives
    in; ``name`` itself back."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"window name must be a non-empty string, not {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"window name is {len(name)} characters; the limit is {MAX_NAME_CHARS}")
    if not NAME_SPELLING.fullmatch(name):
        raise ValueError(
            f"window name {name!r} may only use {NAME_ALLOWED} "
            "(no '/', '#', spaces, newlines or other control characters)"
        )
    namespace()
    return name

Number = int | float
Check = tuple[bool, Sequence[int], Sequence[int], int | None]  # allowed, used, reset_ns, wait_ns


@dataclass(frozen=True)
class Request:
    """What to open: the same for every backend.

    ``geometry=None`` attaches (the geometry is read from the store); ``exclusive`` only
    creates. ``options`` are the arguments only some backends honour, as the caller gave
    them (none given: each backend's defaults); the registry has checked that this
    backend honours every one."""

    name: str
    geometry: Geometry | None
    url: str = ""
    exclusive: bool = False
    clock: Clock | None = None
    on_full: str = WINDOW_ON_FULL
    on_error: str = "raise"
    options: Mapping[str, Any] = field(default_factory=dict)

    def option(self, key: str, default: Any) -> Any:
        return self.options.get(key, default)


class Reading(NamedTuple):
    """Buckets of one ring: ``values`` ``(k,)`` for one field or ``(k, fields)`` for all (unless
    unordered, where shared memory gives every slot, the stale ones 0); int64 windows may hold
    Python ints (object) where an int64 sum could wrap."""

    values: npt.NDArray[Any]
    now_ns: int


@runtime_checkable
class StoreBackend(Protocol):
    """What every opened thing of a backend has: its name, where it lives, its geometry, and its
    lifecycle (``clear`` one key; ``close`` this process; ``unlink`` everyone's)."""

    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str:
        """Where it lives: the backend URL ("" for shared memory)."""

    @property
    def geometry(self) -> Geometry: ...
    @property
    def closed(self) -> bool: ...
    def clear(self, key: Key) -> None: ...
    def close(self) -> None: ...
    def unlink(self) -> bool: ...


@runtime_checkable
class WindowBackend(StoreBackend, Protocol):
    """A window in some store. Field *names* on writes (the native core resolves them in its
    fast path), value *indexes* (0-based) on reads, and the ``ring_index`` and ``k`` that
    :func:`~shmwin.geometry.pick_ring` chose."""

    @property
    def nbytes(self) -> int: ...
    @property
    def meta(self) -> Meta: ...

    def add(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> None: ...
    def add_and_total(self, n: Number = 1, field: str | None = None, key: Key | None = None) -> Number: ...
    def add_batch(self, items: Sequence[tuple[int, int, Number]], field: str, key: Key | None) -> None:
        """Add ``(ring, epoch, amount)`` items (a stamped ``add_many``) in one call."""

    def read(
        self, value_index: int | None, ring_index: int, k: int, key: Key | None, ordered: bool = True
    ) -> Reading:
        """The last ``k`` buckets (``ordered``: oldest first; else in any order, for sums)."""

    def top(self, n: int, value_index: int, ring_index: int, k: int) -> list[tuple[Key, Number]]: ...
    def keys(self) -> list[Key]: ...
    def full_count(self) -> int: ...
    def reset(self) -> None: ...
    def last_write_ns(self) -> int | None: ...
    def log_entries(self, ring_index: int, key: Key) -> tuple[list[tuple[int, int]], int]: ...
    def reclaim(self) -> int: ...
    def stripe_owners(self) -> list[tuple[int, int, bool]]: ...


@runtime_checkable
class LimiterBackend(StoreBackend, Protocol):
    """A limiter in some store: ``hit`` is the fast path, ``check`` everything else."""

    @property
    def rates(self) -> list[Rate]: ...
    @property
    def window(self) -> WindowBackend:
        """The limiter's rows as a read-only window (shared memory only)."""

    def hit(self, key: Key, cost: int = 1) -> bool: ...
    def check(self, key: Key, cost: int, commit: bool, detail: bool = True) -> Check:
        """Check (and with ``commit``, count) ``cost``: ``(allowed, used per rate, ns until each
        rate's oldest hit leaves, ns until cost would fit or None if it never does)``; the
        last two only with ``detail``."""

    def refund(self, key: Key, cost: int) -> int:
        """Give back up to ``cost`` of ``key``'s hits, most recent first: how much."""

    def charge(self, key: Key, cost: int) -> None:
        """Count ``cost`` hits for ``key`` without a check."""


TokenCheck = tuple[bool, int, int | None, int]  # allowed, whole tokens left, wait_ns, ns until full


@runtime_checkable
class TokenBucketBackend(StoreBackend, Protocol):
    """A token bucket (GCRA) in some store: one rate, a burst, ``hit`` and ``check``."""

    @property
    def rate(self) -> Rate: ...
    @property
    def burst(self) -> int: ...
    def hit(self, key: Key, cost: int = 1) -> bool: ...
    def check(self, key: Key, cost: int, commit: bool) -> TokenCheck: ...


@runtime_checkable
class ConcurrencyEngine(Protocol):
    """Per-key slots held by live processes (role "concurrency"; shared memory only: a holder
    is a process of this host, released when it dies)."""

    def acquire(self, key: Key) -> bool: ...
    def release(self, key: Key) -> bool: ...
    def count(self, key: Key) -> int: ...
    def mine(self, key: Key) -> int: ...


@runtime_checkable
class CounterEngine(Protocol):
    """A counter role's per-key state (fixed window, sliding counter, moving log, token
    bucket, lease), read for the tools: ``(key, value)`` of every key at ``now_ns``."""

    role: str

    def values(self, now_ns: int) -> list[tuple[Key, Any]]: ...
