"""entry_format.index_and_start, the fetch path's per-batch parse (issue 27): it must answer exactly what
parse_entry answers - the same (index, batch start), or the same EntryFormatError - for every entry our
writers produce and for entries it does not expect (other field layouts, a checksum, truncation, flipped
bytes), which it hands to parse_entry. Sans-IO."""

from __future__ import annotations

import random

import pytest

from kop.offset.entry_format import (
    EntryFormatError,
    EntryHeaderEncoder,
    encode_entry_header,
    index_and_start,
    parse_entry,
)
from kop.storage.protobuf import encode_varint


def _u32(n: int) -> bytes:
    return n.to_bytes(4, "big")


def _both(data: bytes | memoryview) -> tuple[object, object]:
    try:
        want: object = parse_entry(data)[1:]
    except EntryFormatError:
        want = EntryFormatError
    try:
        got: object = index_and_start(data)
    except EntryFormatError:
        got = EntryFormatError
    return want, got


@pytest.mark.parametrize("ts", [0, 1, 127, 128, 1 << 41, (1 << 63) - 1])
@pytest.mark.parametrize("index", [0, 1, 127, 128, 16383, 16384, (1 << 31) + 5, (1 << 62) + 3])
@pytest.mark.parametrize("producer", [b"", b"a-pulsar-producer"])
def test_what_our_writers_produce_parses_as_parse_entry_does(ts: int, index: int, producer: bytes) -> None:
    header = EntryHeaderEncoder().encode(ts, index, 7, producer)
    for data in (header + b"BATCH", memoryview(header + b"BATCH")):
        assert index_and_start(data) == (index, len(header)) == parse_entry(data)[1:]


def _bem(fields: bytes, after: bytes) -> bytes:
    return b"\x0e\x02" + _u32(len(fields)) + fields + after


def test_other_layouts_fall_back_to_parse_entry() -> None:
    md = b"\x0a\x00"
    tail = _u32(len(md)) + md + b"BATCH"
    ts, idx = encode_varint(1 << 41), encode_varint(300)
    cases = [
        b"\x10" + idx + b"\x08" + ts,  # fields in the other order
        b"\x08" + ts + b"\x10" + idx + b"\x18\x05",  # a newer writer's third field after the index
        b"\x08" + ts + b"\x1a\x02\x10\x05" + b"\x10" + idx,  # a LEN field between them, ending like a tag
        b"\x08" + ts + b"\x1a\x02\x10\x05",  # no index at all, but bytes that look like one
        b"\x10" + idx,  # no timestamp
    ]
    for fields in cases:
        entry = _bem(fields, tail)
        want, got = _both(entry)
        assert got == want, fields
    checksum = _bem(b"\x08" + ts + b"\x10" + idx, b"\x0e\x01" + _u32(0) + tail)
    assert index_and_start(checksum) == parse_entry(checksum)[1:] == (300, len(checksum) - 5)
    no_metadata = tail
    assert index_and_start(no_metadata) == (-1, 6)


def test_truncated_and_damaged_entries_get_parse_entrys_answer() -> None:
    rng = random.Random(27)
    header = encode_entry_header(1 << 41, 123456789, 10)
    entry = header + b"BATCH"
    for cut in range(len(entry) + 1):
        want, got = _both(entry[:cut])
        assert got == want, cut
    for _ in range(3000):
        damaged = bytearray(entry)
        for _ in range(rng.randint(1, 3)):
            damaged[rng.randrange(len(header))] = rng.randrange(256)
        want, got = _both(bytes(damaged))
        assert got == want, bytes(damaged)
