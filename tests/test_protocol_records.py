"""Record batches (magic v2): walking, validating, stamping, decoding and building.

kafka-python's own batch builder and reader are the oracle: batches it builds with every
compression codec must walk, validate and decode here, and batches built here must be accepted
by its reader with the same records.
"""

from __future__ import annotations

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kop.protocol.compression import Compression, CompressionError, compress, decompress, snappy_decompress
from kop.protocol.errors import ErrorCode
from kop.protocol.records import (
    HEADER_SIZE,
    AbsoluteRecord,
    BatchHeader,
    CorruptRecordError,
    NewRecord,
    build_batch,
    control_record_type,
    crc32c,
    decode_records,
    decode_records_absolute,
    iter_batches,
    parse_batch_header,
    stamp_base_offset,
    stamp_partition_leader_epoch,
    update_crc,
    validate_crc,
)

CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]


def oracle_batch(codec: int, count: int = 10, *, producer_id: int = 7, transactional: bool = False) -> bytes:
    """A batch built by kafka-python, with keys, values, null values and headers."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=3, base_sequence=100,
                                        batch_size=1 << 22)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i * 10, key=b"key-%d" % i if i % 3 else None,
                       value=None if i == 4 else b"value-%d-" % i * (i * 20), headers=[("h", b"v%d" % i), ("n", None)])
    return bytes(builder.build())


def expected_records(count: int = 10) -> list[AbsoluteRecord]:
    return [AbsoluteRecord(i, 1_700_000_000_000 + i * 10, b"key-%d" % i if i % 3 else None,
                           None if i == 4 else b"value-%d-" % i * (i * 20), [("h", b"v%d" % i), ("n", None)])
            for i in range(count)]


# -------------------------------------------------------------------------------- walking


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_batches_from_kafka_python_walk_validate_and_decode(codec: Compression) -> None:
    batch = oracle_batch(codec)
    [(header, view)] = list(iter_batches(memoryview(batch)))
    assert isinstance(view, memoryview) and view.obj is batch  # a slice, not a copy
    assert header.compression == codec
    assert (header.magic, header.records_count, header.last_offset_delta) == (2, 10, 9)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, 100)
    assert header.base_timestamp == header.first_timestamp == 1_700_000_000_000
    assert header.max_timestamp == 1_700_000_000_090
    assert header.size == len(batch) and header.timestamp_type == 0
    assert not header.is_transactional and not header.is_control
    assert validate_crc(view)
    assert decode_records_absolute(view) == expected_records()
    records = decode_records(batch)
    assert [r.offset_delta for r in records] == list(range(10))
    assert records[1].timestamp_delta == 10


def test_several_batches_in_one_blob_are_walked_in_order() -> None:
    blob = oracle_batch(Compression.NONE, 3) + oracle_batch(Compression.LZ4, 5) + build_batch([(b"k", b"v")])
    counts = [h.records_count for h, _ in iter_batches(blob)]
    assert counts == [3, 5, 1]
    assert list(iter_batches(b"")) == []


def test_transactional_and_control_flags() -> None:
    header, _ = next(iter_batches(oracle_batch(Compression.NONE, 2, transactional=True)))
    assert header.is_transactional and not header.is_control
    marker = build_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 5))], producer_id=9,
                         producer_epoch=1, is_transactional=True, is_control=True)
    header, view = next(iter_batches(marker))
    assert header.is_control and header.is_transactional
    assert control_record_type(decode_records(view)[0].key) == 1  # commit


def test_batch_header_matches_the_wire_layout() -> None:
    header = parse_batch_header(oracle_batch(Compression.NONE))
    assert isinstance(header, BatchHeader) and HEADER_SIZE == 61
    assert header.batch_length == len(oracle_batch(Compression.NONE)) - 12
    assert header.last_offset == header.base_offset + 9


# ------------------------------------------------------------------------------ rejecting


def _corrupt(reason_fragment: str, error: str, blob: bytes | bytearray) -> None:
    with pytest.raises(CorruptRecordError, match=reason_fragment) as info:
        list(iter_batches(memoryview(bytes(blob))))
    assert info.value.error == error and info.value.code == ErrorCode[error]


def test_crc_mismatch_is_corrupt() -> None:
    batch = bytearray(oracle_batch(Compression.NONE))
    batch[-1] ^= 0xFF
    assert not validate_crc(batch)
    _corrupt("CRC", "CORRUPT_MESSAGE", batch)
    assert list(iter_batches(batch, check_crc=False))  # the check can be skipped


def test_crc_covers_attributes_but_not_offset_length_or_epoch() -> None:
    batch = bytearray(oracle_batch(Compression.NONE))
    stamp_base_offset(batch, 123456)
    stamp_partition_leader_epoch(batch, 77)
    assert validate_crc(batch)
    header = parse_batch_header(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (123456, 77)
    batch[22] |= 0x08  # LogAppendTime bit: CRC-covered
    assert not validate_crc(batch)
    update_crc(batch)
    assert validate_crc(batch)


def test_stamping_through_a_slice_writes_into_the_frame() -> None:
    frame = bytearray(b"prefix" + oracle_batch(Compression.NONE))
    [(_header, view)] = list(iter_batches(memoryview(frame)[6:]))
    stamp_base_offset(view, 42)
    assert parse_batch_header(frame, 6).base_offset == 42


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_values_are_rejected(magic: int) -> None:
    batch = bytearray(oracle_batch(Compression.NONE))
    batch[16] = magic
    _corrupt("magic", "INVALID_RECORD", batch)


def test_truncation_anywhere_is_rejected() -> None:
    batch = oracle_batch(Compression.NONE, 3)
    for cut in range(1, len(batch)):
        with pytest.raises(CorruptRecordError, match="truncated"):
            list(iter_batches(batch[:cut]))
    with pytest.raises(CorruptRecordError, match="truncated"):
        list(iter_batches(batch + batch[:70]))  # a second batch cut short


def test_batch_length_below_the_header_size_is_rejected() -> None:
    batch = bytearray(oracle_batch(Compression.NONE))
    struct.pack_into(">i", batch, 8, 48)
    _corrupt("minimum", "CORRUPT_MESSAGE", batch)


def _with(batch: bytes, fmt: str, offset: int, value: int) -> bytearray:
    out = bytearray(batch)
    struct.pack_into(fmt, out, offset, value)
    update_crc(out)  # a well-formed batch that lies about its records
    return out


def test_record_count_must_be_positive_and_match_last_offset_delta() -> None:
    batch = oracle_batch(Compression.NONE, 3)
    _corrupt("0 records", "INVALID_RECORD", _with(batch, ">i", 57, 0))
    _corrupt("lastOffsetDelta", "INVALID_RECORD", _with(batch, ">i", 57, 4))
    _corrupt("lastOffsetDelta", "INVALID_RECORD", _with(batch, ">i", 23, 5))
    assert list(iter_batches(_with(batch, ">i", 23, 5), fresh=False))  # compacted batches may have gaps


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_compression_codecs_are_rejected(codec: int) -> None:
    batch = oracle_batch(Compression.NONE)
    attributes = parse_batch_header(batch).attributes
    _corrupt("compression", "CORRUPT_MESSAGE", _with(batch, ">h", 21, (attributes & ~7) | codec))


def test_record_level_corruption_is_reported_by_decode_records() -> None:
    batch = bytearray(oracle_batch(Compression.NONE, 3))
    with pytest.raises(CorruptRecordError):
        decode_records(_with(bytes(batch), ">i", 57, 4))  # header claims more records than present
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(batch[:-3]))
    gz = bytearray(oracle_batch(Compression.GZIP))
    gz[HEADER_SIZE + 20] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_records(gz)


# ------------------------------------------------------------------------------- building


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_built_batches_are_read_by_kafka_python(codec: Compression) -> None:
    records = [NewRecord(b"k1", b"v" * 3000, [("a", b"b"), ("c", None)], 1000),
               NewRecord(None, None, (), 1005),
               (b"k3", "é".encode(), [], 990)]
    data = build_batch(records, base_offset=50, compression=codec, producer_id=11, producer_epoch=2,
                       base_sequence=7, partition_leader_epoch=4)
    batch = MemoryRecords(data).next_batch()
    assert batch.validate_crc()
    assert (batch.base_offset, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (50, 11, 2, 7)
    assert batch.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch]
    assert got == [(50, 1000, b"k1", b"v" * 3000, [("a", b"b"), ("c", None)]),
                   (51, 1005, None, None, []), (52, 990, b"k3", "é".encode(), [])]
    header, view = next(iter_batches(data))
    assert (header.base_timestamp, header.max_timestamp, header.partition_leader_epoch) == (1000, 1005, 4)
    assert [r.key for r in decode_records_absolute(view)] == [b"k1", None, b"k3"]


def test_build_batch_flags_and_log_append_time() -> None:
    data = build_batch([(b"k", b"v", (), 5)], timestamp_type=1, producer_id=1, producer_epoch=0,
                       base_sequence=0, is_transactional=True)
    header = parse_batch_header(data)
    assert header.timestamp_type == 1 and header.is_transactional and not header.is_control
    assert MemoryRecords(data).next_batch().is_transactional
    with pytest.raises(ValueError):
        build_batch([])


def test_crc32c_matches_the_standard_check_value() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(memoryview(b"xx123456789")[2:]) == 0xE3069283


# ---------------------------------------------------------------------------- compression


@pytest.mark.parametrize("codec", CODECS, ids=[c.name for c in CODECS])
def test_compression_round_trips(codec: Compression) -> None:
    data = b"kafka " * 20000
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_snappy_accepts_xerial_framing_and_raw_blocks() -> None:
    import cramjam

    data = bytes(range(256)) * 500  # > one 32 KiB xerial block
    framed = compress(Compression.SNAPPY, data)
    assert framed.startswith(b"\x82SNAPPY\x00")
    assert snappy_decompress(framed) == data
    assert snappy_decompress(bytes(cramjam.snappy.compress_raw(data))) == data
    from kafka.codec import snappy_decode, snappy_encode

    assert snappy_decode(framed) == data  # kafka-python reads ours
    assert snappy_decompress(snappy_encode(data)) == data  # and we read theirs


def test_corrupt_compressed_payloads_raise_compression_error() -> None:
    for codec in CODECS[1:]:
        with pytest.raises(CompressionError):
            decompress(codec, b"\x82SNAPPY\x00garbage-garbage" if codec == Compression.SNAPPY else b"garbage")
    with pytest.raises(CompressionError):
        decompress(6, b"")
