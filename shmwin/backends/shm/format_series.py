"""Role "series" of the format: prometheus_client's values of one app (``core/series.c``,
``shmwin/backends/shm/roles/series.py``, docs/metrics.md).

Part of the one description: ``format.py`` star-imports these names and lists these records in
its ``RECORDS``, and ``layout.h`` is generated from all of them (``format_c.py``). Stdlib only,
importing nothing but ``format_rows``. Each field ``f`` of record ``R`` gets ``R_F_OFF`` and,
where it starts a word, ``R_F``, as ``format.constants()`` names them.

One segment per app name: the header page (SERIES_HDR: the common header's magic, version, sizes
and role word where every segment has them, then the series geometry and state), one robust lock
(the directory's), the process slots (STRIPE records: a liveness mutex held for a process's life),
the hash index (words: hash32 << 32 | entry word offset + 1; 0 free; in levels of
SERIES_INDEX_MIN << k places one after another, the next built when one is half full), the
entries (append-only, SERIES_ENTRY then the identity's bytes, padded to a word) and the cells
(SERIES_CELL). The file is sparse: pages are touched as entries and cells are handed out.
"""

from __future__ import annotations

from .format_rows import SEGMENT_PREFIX, Field

_WORD_BYTES = 8

SERIES_HDR: tuple[Field, ...] = (
    *SEGMENT_PREFIX,
    ("hash_key", 152, "16s"),  # random at creation: label values cannot be chosen to collide
    ("role", 168, "I"),
    ("max_series", 192, "Q"),  # cells (and at most as many entries)
    ("index_slots", 200, "Q"),  # the top level's places: a power of two >= 2 x max_series
    ("n_slots", 208, "Q"),  # process slots
    ("locks_at", 216, "Q"),
    ("slots_at", 224, "Q"),
    ("index_at", 232, "Q"),
    ("entries_at", 240, "Q"),
    ("entries_bytes", 248, "Q"),
    ("cells_at", 256, "Q"),
    # the directory's state, written under SERIES_LOCK_DIR (entry_top and cells_top publish)
    ("entry_top", 1024, "q"),  # entry bytes in use: every entry below it is whole
    ("cells_top", 1032, "q"),  # cells handed out
    ("lifetimes", 1040, "q"),  # process lifetimes so far: the next one's number
    ("full_count", 1048, "q"),  # inserts refused: the directory or the cells full
    ("entries", 1056, "q"),  # entries published (how full the index level is)
    ("index_level", 1064, "q"),  # the index level in use: SERIES_INDEX_MIN << level places
)
SERIES_HDR_BYTES = 4096
SERIES_ENTRY: tuple[Field, ...] = (
    ("key_len", 0, "I"),  # the identity's bytes, after the record
    ("kind", 4, "I"),  # SERIES_SHARED, SERIES_LIFETIME (a gauge's cell per process lifetime), SERIES_META
    ("hash", 8, "Q"),  # the identity's keyed BLAKE2b (hash_key), computed in Python: the index's
    ("cell", 16, "q"),  # -1 for a meta entry
    ("slot", 24, "q"),  # the writing process's slot, -1 for a shared cell
    ("lifetime", 32, "q"),  # that process's lifetime number, 0 for a shared cell
    ("pid", 40, "q"),  # process_identifier() of the writer (the gauge's pid label)
    ("flags", 48, "q"),  # SERIES_DROPPED: mark_process_dead() removed it
)
SERIES_ENTRY_BYTES = 56
SERIES_CELL: tuple[Field, ...] = (
    ("value", 0, "q"),  # a float64's bits: counters add to it by CAS, gauges store it
    ("stamp", 8, "q"),  # a gauge's set() timestamp (float64 bits; mostrecent modes)
    ("seq", 16, "q"),  # a gauge's writes: odd while value and stamp are being written
    ("entry", 24, "q"),  # the entry (word offset) that owns the cell: the scrape's check
)
SERIES_CELL_BYTES = 32
SERIES_SHARED, SERIES_LIFETIME, SERIES_META = 0, 1, 2
SERIES_DROPPED = 1
SERIES_LOCK_DIR = 0
SERIES_INDEX_MIN = 64  # places of the index's first level
SERIES_MAX_KEY = 4096  # identity bytes an entry holds at most (labels and all): bigger is refused
SERIES_MAX = 1 << 24  # series a segment may be made for


def _field_names() -> dict[str, int]:
    """``R_F_OFF`` of every field, and ``R_F`` of each that starts a word (an integer at a
    multiple of 8), for the three records."""
    names = {}
    records = (("SERIES_HDR", SERIES_HDR), ("SERIES_ENTRY", SERIES_ENTRY), ("SERIES_CELL", SERIES_CELL))
    for prefix, fields in records:
        for name, offset, kind in fields:
            names[f"{prefix}_{name.upper()}_OFF"] = offset
            if kind in ("q", "Q", "I") and offset % _WORD_BYTES == 0:
                names[f"{prefix}_{name.upper()}"] = offset // _WORD_BYTES
    return names


globals().update(_field_names())
