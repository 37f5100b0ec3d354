"""Junk in an app's metrics segment (anyone who can write it can write any word): each word
that says where to read or write -- entry_top, cells_top, the index level, an index word, an
entry's cell, key length or identity -- is a CorruptSegmentError where it is met, never a
crash, a hang or a wrong answer read from outside the segment."""

from __future__ import annotations

import mmap
import os
import struct

import pytest
from prometheus_client import Counter
from support.metrics import scrape

import shmwin.integrations.prometheus as shp
from shmwin.backends.shm import format as F
from shmwin.backends.shm.roles.series import SeriesStore, segment_name
from shmwin.backends.shm.segment import path_of
from shmwin.errors import CorruptSegmentError

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]


def _poke(app: str, offset: int, fmt: str, value: object) -> None:
    fd = os.open(path_of(segment_name(app)), os.O_RDWR)
    try:
        with mmap.mmap(fd, 0) as mm:
            struct.pack_into(fmt, mm, offset, value)
    finally:
        os.close(fd)


def _first_series_entry(app: str) -> int:
    """The byte offset in the file of the first entry that has a cell."""
    store = SeriesStore.attach(app)
    try:
        entries_at = struct.unpack_from("<Q", store.segment.mm, F.SERIES_HDR_ENTRIES_AT_OFF)[0]
        offset = next(record[0] for record, _ in store.entries(0)[1] if record[2] >= 0)
        return int(entries_at) + offset
    finally:
        store.close()


def _made(app: str) -> None:
    shp.multiprocess(app)
    Counter("c", "help", ["k"], registry=None).labels("a").inc()


HEADER_JUNK = [
    pytest.param(F.SERIES_HDR_ENTRY_TOP_OFF, "<q", 1 << 60, id="entry_top"),
    pytest.param(F.SERIES_HDR_ENTRY_TOP_OFF, "<q", 13, id="entry_top-unaligned"),
    pytest.param(F.SERIES_HDR_CELLS_TOP_OFF, "<q", -5, id="cells_top"),
    pytest.param(F.SERIES_HDR_INDEX_LEVEL_OFF, "<q", 99, id="index_level"),
]


@pytest.mark.parametrize(("offset", "fmt", "junk"), HEADER_JUNK)
def test_junk_header_words(app, offset, fmt, junk):
    _made(app)
    _poke(app, offset, fmt, junk)
    with pytest.raises(CorruptSegmentError):
        scrape(app)
        Counter("d", "help", registry=None).inc()  # a new series: find, then insert


ENTRY_JUNK = [
    pytest.param(F.SERIES_ENTRY_CELL_OFF, "<q", 1 << 40, id="cell"),
    pytest.param(F.SERIES_ENTRY_KEY_LEN_OFF, "<I", 0xFFFFFFFF, id="key_len"),
    pytest.param(F.SERIES_ENTRY_BYTES, "<8s", b"\xff\x00junk{[", id="identity"),
]


@pytest.mark.parametrize(("field", "fmt", "junk"), ENTRY_JUNK)
def test_junk_entry_words(app, field, fmt, junk):
    _made(app)
    _poke(app, _first_series_entry(app) + field, fmt, junk)
    with pytest.raises(CorruptSegmentError):
        scrape(app)


def test_an_index_word_naming_no_entry(app):
    _made(app)
    store = SeriesStore.attach(app)
    try:
        index_at = struct.unpack_from("<Q", store.segment.mm, F.SERIES_HDR_INDEX_AT_OFF)[0]
    finally:
        store.close()
    for place in range(F.SERIES_INDEX_MIN):  # every place of the first level: a word to an entry past the end
        _poke(app, int(index_at) + place * 8, "<Q", (0x1234 << 32) | 0xFFFFFF)
    with pytest.raises(CorruptSegmentError):
        Counter("c", "help", ["k"], registry=None).labels("new")
