"""Junk in a distribution's sketch words (header offsets 192..224): a clear error from Python's
header check and from the native type's own, never a write outside a row."""

from __future__ import annotations

import mmap
import os
import struct
import zlib

import pytest

from shmwin import CorruptSegmentError, Distribution, _core
from shmwin.backends.shm import format as words
from shmwin.backends.shm.segment import path_of

pytestmark = [pytest.mark.integration, pytest.mark.sanitize]


def _image(name: str) -> bytearray:
    d = Distribution(name, ("1m/1s",))
    d.record(1.0)
    with open(path_of(name), "rb") as f:
        image = bytearray(f.read())
    d.unlink()
    return image


def _with(image: bytearray, offset: int, fmt: str, value: object) -> bytearray:
    out = bytearray(image)
    struct.pack_into(fmt, out, offset, value)
    struct.pack_into("<I", out, words.HEADER_CRC_OFF, zlib.crc32(out[words.CRC_START : words.CRC_END]))
    return out


def _bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


@pytest.mark.parametrize(
    ("offset", "fmt", "value", "message"),
    [
        (words.SKETCH_BINS_OFF, "<I", 70_000, "sketch words are impossible"),
        (words.SKETCH_BINS_OFF, "<I", 2, "sketch words are impossible"),
        (words.SKETCH_BINS_OFF, "<I", 5_000, "too small for their bins"),
        (words.SKETCH_LOW_OFF, "<Q", _bits(float("nan")), "sketch words are impossible"),
        (words.SKETCH_HIGH_OFF, "<Q", _bits(1e-9), "sketch words are impossible"),
        (words.SKETCH_ERROR_OFF, "<Q", _bits(0.0), "sketch words are impossible"),
    ],
)
def test_the_native_type_refuses_impossible_sketch_words(name, offset, fmt, value, message):
    image = _with(_image(name), offset, fmt, value)
    with pytest.raises(ValueError, match=message):
        _core.open(image, name=name, timeout_ns=10**9)


def test_attach_refuses_a_sketch_that_does_not_match_its_bins(name):
    d = Distribution(name, ("1m/1s",))
    try:
        fd = os.open(path_of(name), os.O_RDWR)
        with mmap.mmap(fd, 0) as mm:
            patched = _with(bytearray(mm[: words.HEADER_BYTES]), words.SKETCH_BINS_OFF, "<I", 1000)
            mm[: words.HEADER_BYTES] = bytes(patched)
        os.close(fd)
        with pytest.raises(CorruptSegmentError, match="impossible geometry"):
            Distribution.attach(name)
        d.record(2.0)  # the process that opened it before goes on, on what it read then
        assert d.count() == 1
    finally:
        d.unlink()


def test_the_native_type_over_a_sound_image_records_and_has_no_adds(name):
    image = _image(name)
    native = _core.open(image, name=name, timeout_ns=10**9)
    assert type(native) is _core.DistributionCore
    assert not hasattr(native, "add") and not hasattr(native, "add_batch")  # a window's, not its
    native.record(3.0)
    native.close()
