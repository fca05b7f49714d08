"""The topic's write rules (kop/topics/write_rules.py), on plain bytes: what each config refuses or rewrites."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.protocol.compression import Compression
from kop.protocol.records import (
    HEADER_SIZE,
    NewRecord,
    build_batch,
    decode_records,
    iter_batches,
    parse_batch_header,
)
from kop.topics.write_rules import (
    PULSAR_SIZE_SLACK,
    AppendRefused,
    SchemaIdSets,
    TopicRules,
    recompress_batch,
    restamp_log_append_time,
)

NOW = 1_700_000_000_000


def rules(**configs: str) -> TopicRules:
    return TopicRules.of(dict(configs), BrokerConfig())


def batch(*records: NewRecord, **kw: object) -> bytearray:
    return bytearray(build_batch(records, **kw))  # type: ignore[arg-type]


def check(r: TopicRules, b: bytearray, slack: int = 0, ids: SchemaIdSets | None = None) -> None:
    r.check(parse_batch_header(b), b, "t-0", slack, now_ms=NOW, schema_ids=ids)


def test_defaults_refuse_nothing_ordinary() -> None:
    check(rules(), batch(NewRecord(None, b"v", (), NOW)))


def test_a_batch_over_max_message_bytes_is_too_large_and_the_pulsar_slack_is_on_top() -> None:
    big = batch(NewRecord(None, b"x" * 5000, (), NOW))
    with pytest.raises(AppendRefused) as e:
        check(rules(**{"max.message.bytes": "1000"}), big)
    assert e.value.error == "MESSAGE_TOO_LARGE"
    assert "max.message.bytes=1000" in e.value.message
    check(rules(**{"max.message.bytes": "1000"}), big, PULSAR_SIZE_SLACK)  # 5 KB < 1000 + 10 KiB
    with pytest.raises(AppendRefused):
        check(rules(**{"max.message.bytes": str(len(big) - PULSAR_SIZE_SLACK - 1)}), big, PULSAR_SIZE_SLACK)


def test_clients_may_not_write_control_batches() -> None:
    control = batch(NewRecord(b"\0\0\0\0", b"\0\0\0\0\0\0", (), NOW), is_control=True, producer_id=1,
                    producer_epoch=0, is_transactional=True)
    with pytest.raises(AppendRefused) as e:
        check(rules(), control)
    assert e.value.error == "INVALID_RECORD"


def test_compacted_topics_need_a_key_on_every_record_and_the_refusal_names_them() -> None:
    b = batch(NewRecord(b"k", b"1", (), NOW), NewRecord(None, b"2", (), NOW), NewRecord(None, b"3", (), NOW))
    with pytest.raises(AppendRefused) as e:
        check(rules(**{"cleanup.policy": "compact"}), b)
    assert e.value.error == "INVALID_RECORD"
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    assert "without key in topic partition t-0" in e.value.record_errors[0][1]
    check(rules(**{"cleanup.policy": "delete"}), b)


def test_create_time_outside_the_bounds_is_an_invalid_timestamp() -> None:
    r = rules(**{"message.timestamp.before.max.ms": "60000", "message.timestamp.after.max.ms": "60000"})
    check(r, batch(NewRecord(None, b"ok", (), NOW - 59_000)))
    with pytest.raises(AppendRefused) as e:
        check(r, batch(NewRecord(None, b"ok", (), NOW), NewRecord(None, b"old", (), 1000)))
    assert e.value.error == "INVALID_TIMESTAMP"
    assert [i for i, _ in e.value.record_errors] == [1]
    with pytest.raises(AppendRefused):
        check(r, batch(NewRecord(None, b"future", (), NOW + 61_000)))


def test_log_append_time_topics_do_not_check_the_producers_timestamps() -> None:
    r = rules(**{"message.timestamp.type": "LogAppendTime", "message.timestamp.before.max.ms": "1"})
    assert r.log_append_time
    check(r, batch(NewRecord(None, b"v", (), 1000)))


def test_restamping_sets_log_append_time_and_keeps_the_batch_valid() -> None:
    b = batch(NewRecord(b"k", b"v", (), 1000))
    restamp_log_append_time(b, NOW)
    ((hdr, _),) = list(iter_batches(b))  # CRC checked
    assert hdr.timestamp_type == 1 and hdr.max_timestamp == NOW


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy", "uncompressed"])
def test_compression_type_names_the_stored_codec(codec: str) -> None:
    r = rules(**{"compression.type": codec})
    b = batch(NewRecord(b"k", b"v" * 300, (), NOW), compression=int(Compression.GZIP) if codec != "gzip" else 0)
    assert r.needs_recompression(parse_batch_header(b))
    assert r.codec is not None
    out = recompress_batch(b, r.codec, r.level)
    ((hdr, view),) = list(iter_batches(out))
    assert hdr.compression == r.codec
    assert [rec.value for rec in decode_records(view)] == [b"v" * 300]


def test_compression_type_producer_keeps_what_was_sent() -> None:
    r = rules(**{"compression.type": "producer"})
    assert r.codec is None
    assert not r.needs_recompression(parse_batch_header(batch(NewRecord(None, b"v", (), NOW), compression=1)))


# ---------------------------------------------------------------- schema-id validation (confluent.*.schema.validation)

VALIDATE_VALUES = {"confluent.value.schema.validation": "true"}
VALIDATE_KEYS = {"confluent.key.schema.validation": "true"}
VALUE_IDS = SchemaIdSets("orders", None, frozenset({1, 7}))
KEY_IDS = SchemaIdSets("orders", frozenset({3}), None)


def framed(schema_id: int, payload: bytes = b"\x02\x06abc") -> bytes:
    """A value as Confluent's serializers write it: magic byte 0, the id (big-endian int32), the data."""
    return b"\x00" + schema_id.to_bytes(4, "big", signed=True) + payload


def refusal(r: TopicRules, b: bytearray, ids: SchemaIdSets) -> AppendRefused:
    with pytest.raises(AppendRefused) as e:
        check(r, b, ids=ids)
    return e.value


def test_the_configs_turn_the_rule_on_per_part() -> None:
    assert not rules().validates_schemas
    assert not rules(**{"confluent.value.schema.validation": "false"}).validates_schemas
    r = rules(**{"confluent.value.schema.validation": " TRUE "})
    assert (r.validate_values, r.validate_keys, r.validates_schemas) == (True, False, True)
    r = rules(**VALIDATE_KEYS)
    assert (r.validate_values, r.validate_keys) == (False, True)


@pytest.mark.parametrize("codec", [0, int(Compression.GZIP), int(Compression.LZ4), int(Compression.ZSTD),
                                   int(Compression.SNAPPY)])
def test_values_naming_registered_ids_pass_and_tombstones_need_no_prefix(codec: int) -> None:
    check(rules(**VALIDATE_VALUES), batch(NewRecord(b"k", framed(1), (), NOW), NewRecord(b"plain key", framed(7), (), NOW),
                                          NewRecord(b"gone", None, (), NOW), compression=codec), ids=VALUE_IDS)


@pytest.mark.parametrize("codec", [0, int(Compression.GZIP), int(Compression.LZ4), int(Compression.ZSTD),
                                   int(Compression.SNAPPY)])
def test_each_value_without_a_registered_id_is_named_with_why(codec: int) -> None:
    b = batch(NewRecord(None, framed(1), (), NOW),  # registered
              NewRecord(None, framed(99), (), NOW),  # id not registered for the subject
              NewRecord(None, b'{"json": 1}', (), NOW),  # no prefix at all
              NewRecord(None, None, (), NOW),  # tombstone
              NewRecord(None, b"\x00\x00\x01", (), NOW),  # magic byte, then too short for an id
              NewRecord(None, b"", (), NOW),
              compression=codec)
    e = refusal(rules(**VALIDATE_VALUES), b, VALUE_IDS)
    assert e.error == "INVALID_RECORD"
    assert [i for i, _ in e.record_errors] == [1, 2, 4, 5]
    by_index = dict(e.record_errors)
    assert "schema id 99" in by_index[1] and "not registered under the subject orders-value" in by_index[1]
    assert "unknown magic byte 123" in by_index[2]
    assert "3 bytes, too short" in by_index[4] and "0 bytes, too short" in by_index[5]
    assert all("confluent.value.schema.validation" in m for m in by_index.values())
    # the partition's message names the first three records and the count, as Kafka's does
    assert e.message.startswith("One or more records have been rejected due to 4 record errors in total")
    assert "RecordError(batchIndex=1, message='The record's value names schema id 99" in e.message
    assert "batchIndex=5" not in e.message


def test_the_prefix_id_is_a_signed_int32() -> None:
    e = refusal(rules(**VALIDATE_VALUES), batch(NewRecord(None, b"\xff" * 3 + b"\x00" * 2, (), NOW)), VALUE_IDS)
    assert "unknown magic byte 255" in e.record_errors[0][1]
    e = refusal(rules(**VALIDATE_VALUES), batch(NewRecord(None, framed(-2), (), NOW)), VALUE_IDS)
    assert "schema id -2" in e.record_errors[0][1]


def test_keys_are_checked_against_the_key_subject_and_null_keys_pass() -> None:
    r = rules(**VALIDATE_KEYS)
    check(r, batch(NewRecord(framed(3), b"anything", (), NOW), NewRecord(None, b"anything", (), NOW),
                   compression=int(Compression.LZ4)), ids=KEY_IDS)
    e = refusal(r, batch(NewRecord(framed(3), b"v", (), NOW), NewRecord(framed(1), b"v", (), NOW),
                         NewRecord(b"plain", framed(3), (), NOW)), KEY_IDS)
    assert [i for i, _ in e.record_errors] == [1, 2]
    assert "schema id 1, which is not registered under the subject orders-key" in e.record_errors[0][1]
    assert "confluent.key.schema.validation=true" in e.record_errors[1][1]


def test_key_and_value_together_one_error_per_record() -> None:
    r = rules(**VALIDATE_KEYS, **VALIDATE_VALUES)
    ids = SchemaIdSets("orders", frozenset({3}), frozenset({1}))
    check(r, batch(NewRecord(framed(3), framed(1), (), NOW)), ids=ids)
    e = refusal(r, batch(NewRecord(b"no", b"no", (), NOW), NewRecord(framed(3), framed(3), (), NOW)), ids)
    assert [(i, m.split()[2]) for i, m in e.record_errors] == [(0, "key"), (1, "value")]


def test_nothing_is_registered_refuses_every_framed_value() -> None:
    e = refusal(rules(**VALIDATE_VALUES), batch(NewRecord(None, framed(1), (), NOW)),
                SchemaIdSets("orders", None, frozenset()))
    assert e.error == "INVALID_RECORD" and "orders-value" in e.record_errors[0][1]


def test_without_ids_handed_in_the_rule_checks_nothing() -> None:
    """The rule is the caller's to apply (kop/topics/partition.py hands ids in for Kafka producers only)."""
    check(rules(**VALIDATE_VALUES), batch(NewRecord(None, b"no prefix", (), NOW)))


def test_schema_errors_share_the_walk_with_the_other_record_rules() -> None:
    r = rules(**VALIDATE_VALUES, **{"cleanup.policy": "compact", "message.timestamp.before.max.ms": "60000"})
    b = batch(NewRecord(None, framed(1), (), NOW), NewRecord(b"k", b"bare", (), NOW), NewRecord(b"k", framed(1), (), NOW))
    e = refusal(r, b, VALUE_IDS)
    assert e.error == "INVALID_RECORD"
    assert [i for i, _ in e.record_errors] == [0, 1]
    assert "without key" in e.record_errors[0][1] and "magic byte" in e.record_errors[1][1]
    old = batch(NewRecord(b"k", b"bare", (), NOW), NewRecord(b"k", framed(1), (), 1000))
    e = refusal(r, old, VALUE_IDS)
    assert e.error == "INVALID_TIMESTAMP"  # as Kafka: a timestamp error among the records decides the code
    assert [i for i, _ in e.record_errors] == [0, 1]


# ---------------------------------------------------------------- max.decompressed.message.bytes (Kafka 4.4)

CODECS = [int(Compression.GZIP), int(Compression.LZ4), int(Compression.ZSTD), int(Compression.SNAPPY)]
MAX_DECOMPRESSED = "max.decompressed.message.bytes"
# NewRecord(b"k", 600 bytes, no headers, at the batch's first timestamp), as its length varint counts it:
# attributes 1 + timestamp delta 1 + offset delta 1 + key length 1 + key 1 + value length 2 + value 600 + headers 1
BODY = 608


def big(codec: int, *more: NewRecord) -> bytearray:
    return batch(*more, NewRecord(b"k", b"x" * 600, (), NOW), compression=codec)


@pytest.mark.parametrize("codec", CODECS)
def test_a_compressed_record_over_max_decompressed_message_bytes_refuses_the_whole_batch(codec: int) -> None:
    b = big(codec, NewRecord(b"small", b"ok", (), NOW))
    assert len(b) < 200  # 600 repeated bytes compress well: max.message.bytes alone would let it in
    with pytest.raises(AppendRefused) as e:
        check(rules(**{MAX_DECOMPRESSED: str(BODY - 1)}), b)
    assert e.value.error == "INVALID_RECORD"
    assert e.value.message == f"Invalid record size: {BODY} exceeds the configured maximum record size of {BODY - 1}."
    assert e.value.record_errors == []  # Kafka's decompressing iterator throws: no per-record errors
    check(rules(**{MAX_DECOMPRESSED: str(BODY)}), b)  # a body of exactly the limit is allowed


def test_uncompressed_batches_are_not_bounded_by_it() -> None:
    check(rules(**{MAX_DECOMPRESSED: "1"}), big(0))


def test_it_binds_pulsar_sends_too_whatever_their_frame_slack() -> None:
    with pytest.raises(AppendRefused) as e:
        check(rules(**{MAX_DECOMPRESSED: "100"}), big(int(Compression.LZ4)), PULSAR_SIZE_SLACK)
    assert e.value.error == "INVALID_RECORD"


def test_the_size_refusal_replaces_the_per_record_errors_of_the_other_rules() -> None:
    """Kafka's iterator throws at the oversized record, which ends the validation: the records' errors collected
    before it (a keyless record on a compacted topic, an old timestamp) are not reported."""
    r = rules(**{MAX_DECOMPRESSED: "100", "cleanup.policy": "compact", "message.timestamp.before.max.ms": "60000"})
    with pytest.raises(AppendRefused) as e:
        check(r, big(int(Compression.ZSTD), NewRecord(None, b"keyless", (), NOW), NewRecord(b"k", b"old", (), 1000)))
    assert (e.value.error, e.value.record_errors) == ("INVALID_RECORD", [])
    assert e.value.message.startswith(f"Invalid record size: {BODY} exceeds")


def test_the_default_leaves_compressed_batches_opaque() -> None:
    """At Kafka's default nothing is decompressed: a batch whose compressed bytes are garbage passes the rules
    (nothing else here needs its records), and is found corrupt once a limit makes the walk necessary."""
    b = big(int(Compression.GZIP))
    b[HEADER_SIZE + 10:HEADER_SIZE + 20] = b"\xff" * 10
    assert rules().max_record_body is None
    assert rules(**{MAX_DECOMPRESSED: "2147483639"}).max_record_body is None
    check(rules(), b)
    check(rules(**{MAX_DECOMPRESSED: "2147483639"}), b)
    with pytest.raises(AppendRefused) as e:
        check(rules(**{MAX_DECOMPRESSED: "1000000"}), b)
    assert e.value.error == "CORRUPT_MESSAGE"


def test_the_dynamic_broker_default_applies_and_the_topic_value_wins() -> None:
    broker = BrokerConfig()
    broker.set_dynamic_topic_defaults({MAX_DECOMPRESSED: "100"})
    b = big(int(Compression.SNAPPY))
    with pytest.raises(AppendRefused):
        TopicRules.of({}, broker).check(parse_batch_header(b), b, "t-0", now_ms=NOW)
    TopicRules.of({MAX_DECOMPRESSED: "1000"}, broker).check(parse_batch_header(b), b, "t-0", now_ms=NOW)
