"""The topic's write rules (kop/topics/write_rules.py), on plain bytes: what each config refuses or rewrites."""

from __future__ import annotations

import pytest

from kop.config import BrokerConfig
from kop.protocol.compression import Compression
from kop.protocol.records import NewRecord, build_batch, decode_records, iter_batches, parse_batch_header
from kop.topics.write_rules import (
    PULSAR_SIZE_SLACK,
    AppendRefused,
    TopicRules,
    recompress_batch,
    restamp_log_append_time,
)

NOW = 1_700_000_000_000


def rules(**configs: str) -> TopicRules:
    return TopicRules.of(dict(configs), BrokerConfig())


def batch(*records: NewRecord, **kw: object) -> bytearray:
    return bytearray(build_batch(records, **kw))  # type: ignore[arg-type]


def check(r: TopicRules, b: bytearray, slack: int = 0) -> None:
    r.check(parse_batch_header(b), b, "t-0", slack, now_ms=NOW)


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
