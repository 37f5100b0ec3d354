"""The binary format: offsets asserted against the table in layout.py."""

import dataclasses
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from shmwin.backends.shm import format as layout_words
from shmwin.backends.shm import format_c, format_rows, layout
from shmwin.backends.shm import header as header_page
from shmwin.backends.shm.layout import Layout
from shmwin.errors import CorruptSegmentError, IncompatibleVersionError
from shmwin.geometry import Geometry, Meta, Ring

pytestmark = pytest.mark.unit

G = Geometry((Ring(1_000_000_000, 60),), ("ok", "error"))
META = Meta(1234, 5, 6, b"B" * 16, b"K" * 16)


def test_fixed_header_part_matches_the_table():
    assert header_page._FIXED.size == 192
    page = header_page.pack_header(G, Layout.plan(G), META)
    assert len(page) == layout.HEADER_BYTES == 4096
    assert page[0:8] == b"\0" * 8  # magic left for the creator to write last
    u32 = lambda off: struct.unpack_from("<I", page, off)[0]  # noqa: E731
    i64 = lambda off: struct.unpack_from("<q", page, off)[0]  # noqa: E731
    assert u32(8) == layout.FORMAT_VERSION
    assert u32(12) == 4096
    assert u32(32) == 1 and u32(36) == 0 and u32(40) == 2  # rings, kind, fields
    assert u32(44) == 0 and u32(48) == 0 and u32(52) == 64 and u32(56) == 2  # dtype, mode, stripes, locks
    assert u32(60) == 0 and u32(64) == 0  # capacity, key slots
    assert i64(72) == 1234 and i64(80) == 5 and i64(88) == 6 and page[96:112] == b"B" * 16
    lay = Layout.plan(G)
    assert (i64(112), i64(120), i64(128), i64(136), i64(144)) == (
        lay.locks_off, lay.stripes_off, lay.keys_off, lay.rows_off, lay.row_bytes,
    )  # fmt: skip
    assert page[152:168] == b"K" * 16  # the key table's hash key
    assert u32(168) == 0  # role: a plain window
    assert page[256:258] == b"ok" and page[288:293] == b"error"
    assert i64(768) == 1_000_000_000 and u32(776) == 60 and i64(784) == 0  # ring 0: width, count, limit"


def test_the_role_word_round_trips_and_junk_there_is_refused():
    g = Geometry((Ring(7, 3, limit=5),), ("hits",), mode="locked", n_stripes=0, capacity=10,
                 kind="limiter", role="fixed-starts")  # fmt: skip
    lay = Layout.plan(g)
    page = bytearray(header_page.pack_header(g, lay, META))
    assert struct.unpack_from("<I", page, 168)[0] == layout.ROLES.index("fixed-starts") == 1
    page[0:8] = layout.MAGIC
    assert header_page.unpack_header(bytes(page), lay.total_bytes)[0] == g
    struct.pack_into("<I", page, 168, len(layout.ROLES))  # an unknown role, checksum fixed up
    struct.pack_into("<I", page, 24, zlib.crc32(page[32:1024]))
    with pytest.raises(CorruptSegmentError, match="unknown"):
        header_page.unpack_header(bytes(page), lay.total_bytes)
    with pytest.raises(ValueError, match="role"):
        Geometry((Ring(7, 3),), ("a",), role="breaker?")


def test_everything_is_cache_line_aligned_but_keyed_rows_which_are_packed():
    keyed = Geometry((Ring(7, 3), Ring(100, 5, limit=9)), ("a",), mode="locked", n_stripes=0, capacity=10)
    for g in (G, Geometry((Ring(7, 3),), ("a",)), Geometry((Ring(1, 3600),), ("a", "b", "c")), keyed):
        lay = Layout.plan(g)
        for off in (lay.locks_off, lay.stripes_off, lay.keys_off, lay.rows_off):
            assert off % 64 == 0
        # stripes are whole cache lines (written by different processes); a key's row costs
        # its words (8-byte aligned), its key header and its rings, nothing more
        rings = sum((lay.head_slots + r.n_buckets) * lay.slot_words * 8 for r in g.rings)
        words = layout.KEY_HEADER_BYTES + rings
        if g.keyed and words < 128:  # a small keyed row is packed: its key header and rings, no more
            assert lay.row_bytes == words and lay.row_bytes % 8 == 0
        else:
            assert lay.row_bytes % 64 == 0
        assert lay.total_bytes == lay.rows_off + lay.n_rows * lay.row_bytes
    assert keyed.key_slots == layout.INDEX_MIN_SLOTS and Layout.plan(keyed).n_rows == 10  # capacity rows
    assert keyed.index_levels == 1  # 64 entries hold 10 keys at a load <= 1/4
    big = Geometry((Ring(7, 3),), ("a",), mode="locked", n_stripes=0, capacity=1000)
    assert big.index_levels == 7 and (layout.INDEX_MIN_SLOTS << 6) >= 4 * 1000 > (layout.INDEX_MIN_SLOTS << 5)
    lay = Layout.plan(big)
    # the index copies of every level lie between the key table's start and the row heap
    last_copy, entries = lay.index_copy(2 * big.index_levels - 1, big.key_slots)
    assert last_copy + entries * layout.KEY_ENTRY_BYTES <= lay.rows_off
    assert lay.rows_off % layout.PAGE_BYTES == 0
    assert lay.index_copy(0, big.key_slots) == (lay.keys_off, 64) and lay.index_copy(3, 64)[1] == 128
    # a keyed row: the 56-byte key header (7 words), then ring 0 (1 + 3 slots of 2 words), then ring 1
    assert Layout.plan(keyed).ring_words == (7, 7 + 2 * 4)
    assert Layout.plan(G).ring_words == (0,)  # unkeyed rows have no key header


def test_a_concurrency_segment_is_keyed_with_a_stripe_table_of_processes():
    """Role "concurrency": a keyed segment with ``n_stripes + 1`` stripe entries (processes)
    between its locks and its key table, rows of a key header, a top word and one 16-byte
    holder entry per process stripe, whatever the limit (format 11: the limit changes live);
    it round-trips through the header."""
    g = Geometry((Ring(10**9, 1, limit=5),), ("holders",), mode="locked", n_stripes=8, capacity=100,
                 role="concurrency")  # fmt: skip
    lay = Layout.plan(g)
    assert lay.stripes_off == lay.locks_off + g.n_locks * layout.LOCK_BYTES
    assert lay.keys_off >= lay.stripes_off + 9 * layout.STRIPE_ENTRY_BYTES and lay.keys_off % 64 == 0
    assert lay.row_bytes == 192 and lay.ring_words == (7,)  # 56 + 8 + 8 x 16 = 192: whole lines, 3
    row = layout_words.KEY_HEADER_BYTES + layout_words.CONC_STATE_BYTES + 8 * layout_words.CONC_HOLDER_BYTES
    assert row == 192
    two = dataclasses.replace(g, rings=(Ring(10**9, 1, limit=2),))
    assert Layout.plan(two).row_bytes == lay.row_bytes  # the limit sizes nothing
    few = dataclasses.replace(g, n_stripes=2)
    assert Layout.plan(few).row_bytes == 56 + 8 + 32  # packed
    assert lay.first_bytes >= lay.keys_off  # the stripe table is reserved at creation
    page = bytearray(header_page.pack_header(g, lay, META))
    page[0:8] = layout.MAGIC
    assert header_page.unpack_header(bytes(page), lay.total_bytes) == (g, lay, META)
    for bad in (
        dict(n_stripes=0), dict(capacity=0, n_stripes=8, mode="striped"),
        dict(rings=(Ring(10**9, 1, limit=0),)),
        dict(rings=(Ring(10**9, 1, limit=layout_words.MAX_CONCURRENCY + 1),)),
    ):  # fmt: skip
        with pytest.raises(ValueError):
            dataclasses.replace(g, **bad)
    with pytest.raises(ValueError, match="no stripes"):  # a plain keyed window still has none
        Geometry((Ring(7, 3),), ("a",), mode="locked", n_stripes=4, capacity=10)


def test_round_trip():
    lay = Layout.plan(G)
    page = bytearray(header_page.pack_header(G, lay, META))
    page[0:8] = layout.MAGIC
    assert header_page.unpack_header(bytes(page), lay.total_bytes) == (G, lay, META)


def _ready_page() -> bytearray:
    page = bytearray(header_page.pack_header(G, Layout.plan(G), META))
    page[0:8] = layout.MAGIC
    return page


def test_junk_magic_version_crc_and_size_are_refused():
    size = Layout.plan(G).total_bytes
    page = _ready_page()
    page[0:8] = b"garbage!"
    with pytest.raises(CorruptSegmentError, match="not a shmwin segment"):
        header_page.unpack_header(bytes(page), size)
    page = _ready_page()
    struct.pack_into("<I", page, 8, 99)
    with pytest.raises(IncompatibleVersionError, match="version 99"):
        header_page.unpack_header(bytes(page), size)
    page = _ready_page()
    page[776] ^= 0xFF  # ring 0's bucket count flipped, checksum now wrong
    with pytest.raises(CorruptSegmentError, match="checksum"):
        header_page.unpack_header(bytes(page), size)
    with pytest.raises(CorruptSegmentError, match="truncated"):
        header_page.unpack_header(bytes(_ready_page()), size - 64)
    with pytest.raises(CorruptSegmentError, match="smaller than a shmwin header"):
        header_page.unpack_header(bytes(_ready_page()), 100)


def test_checked_words_round_trip_and_refuse_any_flipped_bit():
    """The key table's checked words (value | tag << 32; _core.c computes the same tag: every
    keyed test writes them in C and reads them in Python, and the reverse at creation)."""
    key = bytes(range(16))
    for offset in layout.CHECKED_WORDS:
        for value in (0, 1, 37, 2**26):
            word = header_page.state_word(value, offset, key)
            assert header_page.state_value(word, offset, key, 2**26) == value
            signed = word - 2**64 if word >= 2**63 else word  # as the core's int64 reads hand it back
            assert header_page.state_value(signed, offset, key, 2**26) == value
            for bit in range(64):
                with pytest.raises(CorruptSegmentError, match="fails its tag"):
                    header_page.state_value(word ^ (1 << bit), offset, key, 2**26)
            with pytest.raises(CorruptSegmentError):  # within its tag, past its bounds
                header_page.state_value(word, offset, key, value - 1)
    words = {header_page.state_word(5, offset, key) for offset in layout.CHECKED_WORDS}
    assert len(words) == len(layout.CHECKED_WORDS)  # a word copied to another place fails there
    assert header_page.state_word(0, layout.INDEX_OFF, key) != 0  # a zeroed word fails


def test_a_new_keyed_header_holds_an_empty_key_table():
    g = Geometry((Ring(10**9, 60),), ("count",), mode="locked", n_stripes=0, capacity=8)
    page = header_page.pack_header(g, Layout.plan(g), META)
    for offset in layout.CHECKED_WORDS:
        word = struct.unpack_from("<q", page, offset)[0]
        assert header_page.state_value(word, offset, META.hash_key, 0) == 0


# -- one description: layout_words.py, its C header, and this module's table ------------------

LAYOUT_H = Path(__file__).resolve().parents[2] / "shmwin" / "backends" / "shm" / "core" / "layout.h"


def test_the_description_is_consistent():
    assert layout_words.check() == []


def test_the_c_header_is_generated_from_the_description_and_fresh():
    assert LAYOUT_H.read_text() == format_c.c_header(), (
        "shmwin/backends/shm/core/layout.h is stale: write it anew with\n"
        "    python shmwin/backends/shm/format_c.py shmwin/backends/shm/core/layout.h"
    )


def test_format_c_run_by_path_writes_the_header_with_no_shmwin_importable(tmp_path):
    """The command the header's comment gives, as a developer runs it before any build: with no
    site-packages (-S), shmwin is not importable, and the format (which takes the shared limits
    from geometry.py) is loaded from its files alone, no package __init__ run."""
    script = Path(format_c.__file__)
    out = tmp_path / "layout.h"
    argv = [sys.executable, "-S", str(script), str(out)]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert out.read_text() == LAYOUT_H.read_text()


def test_the_c_header_asserts_each_mutex_room_and_check_fits_every_other_field():
    """layout.h asserts what only the compiler knows, each mutex's room (sizeof(pthread_mutex_t)
    is the platform's); every other field's fit before the next is format.check()'s, which
    format_c runs before it writes the header."""
    text = format_c.c_header()
    mutexes = [
        (prefix, name)
        for prefix, (fields, _size) in layout_words.RECORDS.items()
        for name, _offset, kind in fields
        if kind == "mutex"
    ]
    assert mutexes  # the lock table's and the stripes'
    for prefix, name in mutexes:
        assert f"_Static_assert({prefix}_{name.upper()}_OFF + sizeof(pthread_mutex_t) <= " in text
    assert text.count("+ sizeof(pthread_mutex_t) <=") == len(mutexes)


def test_check_finds_a_field_that_does_not_fit_before_the_next(monkeypatch):
    bad = ((("a", 0, "q"), ("b", 4, "q")), "LOCK_BYTES")  # an 8-byte word, and a field 4 bytes on
    monkeypatch.setitem(layout_words.RECORDS, "BAD", bad)
    assert "BAD.a at 0 does not fit before 4" in layout_words.check()


def test_every_constant_is_named_once_with_one_value():
    names = layout_words.constants()
    assert len(names) > 90
    for name, value in names.items():
        assert getattr(layout_words, name) == value, name
        if hasattr(layout, name):  # layout.py re-exports them under the same names
            assert getattr(layout, name) == value, name
    words = {n for n in names if not n.endswith(("_OFF", "_BYTES"))}
    assert {"KEY_ROW_GEN", "KEY_ROW_LAST_NS", "KEY_ROW_IDENT", "INDEX_ENTRY_GEN",
            "INDEX_ENTRY_PLACE", "STRIPE_OWNER", "STRIPE_OWNER_PID", "LOCK_INTENT"} <= words


def _doc_tables() -> list[list[tuple[int, int | None, str]]]:
    """``(offset, size or None, name)`` of each row of each table in layout.py's docstring, then
    format_rows.py's (the per-role rows)."""
    tables = []
    drawn = (layout.__doc__ or "") + (format_rows.__doc__ or "")
    for block in drawn.split("::\n")[1:]:
        rows = []
        for line in block.splitlines():
            cells = line.split()
            if line[:4] == "    " and line[4:5].isdigit() and len(cells) >= 4:  # a row, not a note
                size = int(cells[1]) if cells[1].isdigit() else None
                rows.append((int(cells[0]), size, cells[3]))
            elif line and not line.startswith(" "):
                break
        tables.append(rows)
    return tables


def test_the_docstring_tables_are_the_description():
    """layout.py's tables say what layout_words.py holds: offsets, sizes and names."""
    tables = _doc_tables()
    header, key_state, lock, stripe, index_entry, key_row, _slots, limiter_ring = tables[:8]
    fixed, sliding, token, conc, holder, moving, names, chunk, lease, cache = tables[8:]
    counts = limiter_ring.pop()  # after the compact ring's header: its counts, n of 4 or 8 bytes
    assert counts == (layout_words.LIMITER_RING_BYTES, None, "counts")
    expected = [
        (layout_words.HEADER, header + key_state),
        (layout_words.LOCK, lock),
        (layout_words.STRIPE, stripe),
        (layout_words.INDEX_ENTRY, index_entry),
        (layout_words.KEY_ROW, key_row),
        (layout_words.LIMITER_RING, limiter_ring),
        (layout_words.FIXED_STATE, fixed),
        (layout_words.SLIDING_STATE, sliding),
        (layout_words.TOKEN_STATE, token),
        (layout_words.CONC_STATE, conc),
        (layout_words.CONC_HOLDER, holder),
        (layout_words.MOVING_STATE, moving),
        (layout_words.NAME_ENTRY, names),
        (layout_words.CHUNK, chunk),
        (layout_words.LEASE_STATE, lease),
        (layout_words.CACHE_STATE, cache),
    ]
    for fields, rows in expected:
        described = [(off, layout_words.size_of(kind), name) for name, off, kind in fields]
        documented = [(off, size, "reserved" if name == "-" else name) for off, size, name in rows]
        assert documented == described
    entry = layout_words.ring_struct()
    assert entry.size == layout_words.RING_ENTRY_BYTES and header_page._RING.size == entry.size
