"""Types of the native module ``shmwin._core`` (see ``_core.c``)."""

from collections.abc import Callable, Sequence
from typing import Any

LOCK_BYTES: int
LOCK_INTENT_OFF: int
KEY_ENTRY_BYTES: int
KEY_BYTES_OFF: int
MAX_STORED_KEY: int
KEY_HEADER_BYTES: int
STRIPE_MUTEX_OFF: int
INDEX_OFF: int
ROWS_TOP_OFF: int
FREE_HEAD_OFF: int
STRIPE_ENTRY_BYTES: int
ROWS_IN_USE_OFF: int
MAX_RINGS: int
MAX_PROBES: int
FIRST_KEY_LOCK: int
MUTEX_BYTES: int
EMPTY_EPOCH: int

class Core:
    closed: bool
    cache: dict[str | bytes, int]
    def __init__(
        self,
        buffer: Any,
        *,
        name: str,
        limiter: bool,
        floats: bool,
        striped: bool,
        keyed: bool,
        n_fields: int,
        slot_words: int,
        head_slots: int,
        rings: tuple[tuple[int, int, int, int, bool], ...],
        locks_off: int,
        n_locks: int,
        n_key_locks: int,
        stripes_off: int,
        keys_off: int,
        rows_off: int,
        row_bytes: int,
        n_rows: int,
        key_slots: int,
        rings_off: int,
        idle_ns: int,
        hash_key: bytes,
        empty_row: bytes,
        timeout_ns: int,
        on_full: int,
        clock: Callable[[], int] | None,
        fields: dict[str, int],
        claim: Callable[[], tuple[int, int]],
        index_levels: int,
        fd: int,
    ) -> None: ...
    def add(self, n: int | float = 1, field: str | None = None, key: str | bytes | None = None) -> None: ...
    def add_and_total(
        self, n: int | float = 1, field: str | None = None, key: str | bytes | None = None
    ) -> int | float: ...
    def add_batch(
        self,
        items: Sequence[tuple[int, int, int | float]],
        field: str | None = None,
        key: str | bytes | None = None,
    ) -> None: ...
    def hit(self, key: str | bytes, cost: int | float = 1) -> bool: ...
    def check(
        self, key: str | bytes, cost: int | float, commit: bool, detail: bool = True
    ) -> tuple[bool, tuple[int, ...], tuple[int, ...], int | None]: ...
    def clear(self, key: str | bytes) -> None: ...
    def reset(self) -> None: ...
    def find(self, key: str | bytes) -> tuple[int, int] | None: ...
    def free_stripes(self) -> int: ...
    def stripe_owners(self) -> list[tuple[int, int, bool]]: ...
    def release_stripe(self) -> int: ...
    def close(self) -> None: ...

def set_errors(closed: type, timeout: type, corrupt: type, full: type, field: type, space: type) -> None: ...
def init_locks(buffer: Any, offset: int, count: int) -> None: ...
def init_stripes(buffer: Any, offset: int, count: int) -> None: ...
def failpoint(section: str = "", after: int = 0, signal: int = 9) -> None: ...
def failpoint_fired() -> bool: ...
