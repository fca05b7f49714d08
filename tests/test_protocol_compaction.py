"""Record-level compaction (kop/protocol/compaction.py): filtering one magic-v2 batch the way Kafka's
MemoryRecords.filterTo does, checked by decoding the result with our codec and with kafka-python's."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch

from kop.protocol.compaction import batch_keys, filter_batch, has_null_key, record_spans
from kop.protocol.records import (
    DELETE_HORIZON_BIT,
    CorruptRecordError,
    NewRecord,
    build_batch,
    decode_records_absolute,
    iter_batches,
    parse_batch_header,
    stamp_base_offset,
    validate_crc,
)

CODECS = [0, 1, 2, 3, 4]


def make(records, base=100, codec=0, **kw) -> bytes:
    return build_batch([NewRecord(*r) for r in records], base_offset=base, compression=codec, **kw)


def absolute(batch: bytes, base: int):
    b = bytearray(batch)
    stamp_base_offset(b, base)
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records_absolute(b)]


RECORDS = [
    (b"a", b"a0", [("h", b"1")], 1_000),
    (b"b", b"b0", [], 1_001),
    (b"a", b"a1", [("h", b"2"), ("n", None)], 1_005),
    (b"c", None, [], 1_003),  # tombstone
    (b"b", b"b1", [], 1_002),
]


@pytest.mark.parametrize("codec", CODECS)
def test_keeps_latest_per_key_with_original_offsets_and_fields(codec):
    src = make(RECORDS, codec=codec, producer_id=7, producer_epoch=3, base_sequence=40, partition_leader_epoch=9)
    latest = {b"a": 102, b"b": 104, b"c": 103}
    out = filter_batch(src, 100, lambda off, k: latest[k] == off, now_ms=50_000, delete_retention_ms=1_000)
    assert (out.kept, out.dropped, out.tombstones_kept, out.horizon) == (3, 2, 1, 51_000)
    new = out.batch
    h = parse_batch_header(new)
    old = parse_batch_header(src)
    # lastOffsetDelta, producer fields, epoch and codec survive; the count and the horizon change
    assert h.last_offset_delta == 4 and h.records_count == 3
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 3, 40)
    assert h.partition_leader_epoch == 9 and h.compression == codec
    assert h.attributes & DELETE_HORIZON_BIT and h.base_timestamp == 51_000
    assert h.max_timestamp == 1_005 and old.max_timestamp == 1_005
    assert validate_crc(new)
    list(iter_batches(new, fresh=False))  # valid framing and CRC
    assert absolute(new, 100) == [
        (102, 1_005, b"a", b"a1", [("h", b"2"), ("n", None)]),
        (103, 1_003, b"c", None, []),
        (104, 1_002, b"b", b"b1", []),
    ]
    # kafka-python, a client, reads it the same way (offsets and absolute timestamps)
    b = bytearray(new)
    stamp_base_offset(b, 100)
    got = [(r.offset, r.timestamp, r.key, r.value) for r in DefaultRecordBatch(bytes(b))]
    assert got == [(102, 1_005, b"a", b"a1"), (103, 1_003, b"c", None), (104, 1_002, b"b", b"b1")]


def test_unchanged_batch_is_kept_as_is_and_empty_batch_is_dropped():
    src = make([(b"a", b"1", [], 5), (b"b", b"2", [], 6)])
    out = filter_batch(src, 0, lambda off, k: True, 10, 10)
    assert out.unchanged and out.batch is None and out.kept == 2
    out = filter_batch(src, 0, lambda off, k: False, 10, 10)
    assert not out.unchanged and out.batch is None and out.kept == 0 and out.dropped == 2


def test_tombstone_horizon_then_expiry():
    src = make([(b"k", None, [], 1_000), (b"j", b"v", [], 1_001)])
    first = filter_batch(src, 0, lambda off, k: True, now_ms=5_000, delete_retention_ms=100)
    assert first.batch is not None and first.horizon == 5_100  # rewritten only to stamp the horizon
    again = filter_batch(first.batch, 0, lambda off, k: True, now_ms=5_099, delete_retention_ms=100)
    assert again.unchanged and again.horizon == 5_100  # horizon not reached: kept, not re-stamped
    late = filter_batch(first.batch, 0, lambda off, k: True, now_ms=5_100, delete_retention_ms=100)
    assert late.tombstones_dropped == 1 and late.kept == 1
    assert absolute(late.batch, 0) == [(1, 1_001, b"j", b"v", [])]


def test_keyless_records_are_dropped_and_detected():
    src = make([(None, b"x", [], 1), (b"k", b"y", [], 2)])
    assert has_null_key(src)
    assert not has_null_key(make([(b"k", b"y", [], 2)]))
    out = filter_batch(src, 0, lambda off, k: True, 10, 10)
    assert out.kept == 1 and absolute(out.batch, 0) == [(1, 2, b"k", b"y", [])]


def test_control_batches_are_kept_and_not_checked_for_keys():
    ctrl = make([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", [], 1)], is_control=True, is_transactional=True,
                producer_id=1, producer_epoch=0)
    assert not has_null_key(ctrl)
    out = filter_batch(ctrl, 0, lambda off, k: False, 10, 10)
    assert out.unchanged


def test_log_append_time_batch_keeps_its_append_time():
    src = make([(b"a", b"1", [], 5), (b"a", b"2", [], 6)], timestamp_type=1)
    b = bytearray(src)
    b[35:43] = (77_000).to_bytes(8, "big")  # what produce stamps
    from kop.protocol.records import update_crc

    update_crc(b)
    out = filter_batch(bytes(b), 0, lambda off, k: off == 1, 10, 10)
    h = parse_batch_header(out.batch)
    assert h.max_timestamp == 77_000 and h.timestamp_type == 1
    assert [r[1] for r in absolute(out.batch, 0)] == [77_000]


def test_spans_and_corruption():
    src = make(RECORDS)
    header, spans = batch_keys(src)
    assert [s.offset_delta for s in spans] == [0, 1, 2, 3, 4]
    assert [s.key for s in spans] == [b"a", b"b", b"a", b"c", b"b"]
    assert [s.is_tombstone for s in spans] == [False, False, False, True, False]
    payload = src[61:]
    with pytest.raises(CorruptRecordError):
        record_spans(payload[:-3], 5)
    with pytest.raises(CorruptRecordError):
        record_spans(payload, 4)  # trailing bytes
    with pytest.raises(CorruptRecordError):
        has_null_key(src[:70])
