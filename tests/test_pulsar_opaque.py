"""kop/pulsar/opaque.py: encrypted and chunked Pulsar entries stored as sent (issue #22), sans-IO.

An encrypted entry or a chunk goes into one Kafka record (the payload as the value, the metadata in a
`pulsar.metadata` header, OPAQUE_BIT in the attributes) and comes back to Pulsar consumers unchanged; what a Kafka
consumer reads of it is the record docs/pulsar.md describes. The e2e half is tests/e2e/test_pulsar_passthrough.py.
"""

from __future__ import annotations

import pytest

from kop.protocol.compaction import payload_of, rebuild_batch, record_spans
from kop.protocol.records import (
    build_batch,
    decode_records_absolute,
    parse_batch_header,
    update_crc,
    validate_crc,
)
from kop.pulsar import opaque
from kop.pulsar.codec import compression as pz
from kop.pulsar.codec.commands import pb
from kop.pulsar.convert import (
    ConversionError,
    kafka_to_pulsar,
    pulsar_to_kafka,
    unbatched,
    unconverted_to_kafka,
)
from kop.topics.write_rules import recompress_batch

T0 = 1_700_000_000_000


def encrypted(batch_of: int = 0) -> pb.MessageMetadata:
    md = pb.MessageMetadata(producer_name="prod", sequence_id=7, publish_time=T0, event_time=T0 - 5,
                            compression=pb.LZ4, uncompressed_size=4096, encryption_algo="RSA",
                            encryption_param=b"\x01iv", partition_key="pk", replicated_from="west")
    if batch_of:
        md.num_messages_in_batch = batch_of
    key = md.encryption_keys.add(key="app-key", value=b"wrapped")
    key.metadata.add(key="m", value="n")
    md.properties.add(key="app", value="x")
    return md


def chunk(chunk_id: int, total: int = 3) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="prod", sequence_id=9, publish_time=T0, partition_key="big",
                              uuid="prod-9", num_chunks_from_msg=total, total_chunk_msg_size=3000,
                              chunk_id=chunk_id)


def test_an_encrypted_batch_is_one_record_of_n_offsets_and_comes_back_unchanged() -> None:
    md = encrypted(batch_of=4)
    batch = pulsar_to_kafka(md, b"\x00ciphertext\xff", 100, compression=3, schema_id=42)
    header = parse_batch_header(batch)
    assert header.attributes == opaque.OPAQUE_BIT  # uncompressed whatever the codec: ciphertext does not shrink
    assert (header.base_offset, header.last_offset_delta, header.records_count) == (100, 3, 1)
    [record] = decode_records_absolute(bytes(batch))
    assert (record.offset, record.timestamp, record.key) == (100, T0 - 5, b"pk")
    assert record.value == b"\x00ciphertext\xff"  # no Confluent prefix on an opaque payload
    headers = dict(record.headers)
    assert [k for k, _ in record.headers] == ["app", "pulsar.encrypted", "pulsar.metadata"]
    assert headers["app"] == b"x" and headers["pulsar.encrypted"] == b"app-key"
    assert pb.MessageMetadata.FromString(headers["pulsar.metadata"]) == md
    entry = kafka_to_pulsar(batch, producer_name="ignored", compression=1)
    assert entry is not None
    assert (entry.metadata, entry.payload, entry.num_messages) == (md, b"\x00ciphertext\xff", 4)
    assert unbatched(entry) is entry  # never opened, even as a one-message entry


def test_chunks_are_one_record_each_and_name_their_place() -> None:
    parts = [b"a" * 1000, b"b" * 1000, b"c" * 1000]
    batches = [pulsar_to_kafka(chunk(i), p, i) for i, p in enumerate(parts)]
    records = [decode_records_absolute(bytes(b))[0] for b in batches]
    assert [dict(r.headers)["pulsar.chunk"] for r in records] == [b"0/3/prod-9", b"1/3/prod-9", b"2/3/prod-9"]
    assert [r.value for r in records] == parts and {r.key for r in records} == {b"big"}
    for i, b in enumerate(batches):
        entry = kafka_to_pulsar(b)
        assert entry is not None
        assert (entry.metadata, entry.payload, entry.num_messages) == (chunk(i), parts[i], 1)


def test_what_is_not_opaque_converts_as_before() -> None:
    one_chunk = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=T0, uuid="u",
                                   num_chunks_from_msg=1, chunk_id=0)
    assert not opaque.is_opaque(one_chunk) and opaque.is_opaque(chunk(0)) and opaque.is_opaque(encrypted())
    [record] = decode_records_absolute(bytes(pulsar_to_kafka(one_chunk, b"plain", 0)))
    assert record.value == b"plain" and record.headers == []
    # a Kafka producer's record with a pulsar.metadata header is an ordinary record: no OPAQUE_BIT
    kafka = build_batch([(b"k", b"v", [("pulsar.metadata", encrypted().SerializeToString())], T0)])
    entry = unbatched(kafka_to_pulsar(kafka))
    assert entry.payload == b"v" and [p.key for p in entry.metadata.properties] == ["pulsar.metadata"]


def test_an_opaque_batch_whose_metadata_does_not_parse_converts_as_an_ordinary_one() -> None:
    batch = bytearray(pulsar_to_kafka(chunk(0), b"data", 0))
    batch[-3] ^= 0xFF  # inside the serialized metadata, the last header's value
    update_crc(batch)
    entry = unbatched(kafka_to_pulsar(batch))
    assert entry.payload == b"data" and not entry.metadata.HasField("uuid")


def test_the_write_seam_and_the_compaction_keep_it_opaque() -> None:
    batch = pulsar_to_kafka(encrypted(batch_of=2), b"cipher", 0)
    header, data = payload_of(bytes(batch))
    compacted = rebuild_batch(header, data, record_spans(data, 1), T0)  # as a compaction rewrites a batch
    for rewritten in (recompress_batch(batch, 4, None), compacted):
        assert validate_crc(rewritten) and parse_batch_header(rewritten).attributes & opaque.OPAQUE_BIT
        entry = kafka_to_pulsar(rewritten)
        assert entry is not None and entry.payload == b"cipher" and entry.num_messages == 2


def test_what_does_not_convert_is_stored_as_sent_and_says_why() -> None:
    """A batch entry whose payload says LZ4 but does not inflate (and one uncompressed, so unbatched would open
    it): stored as sent with the reason, and dispatched as sent."""
    for compression, payload in ((pb.LZ4, b"garbage"), (pb.NONE, b"\x00\x00\x00\x05junk")):
        md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=T0, num_messages_in_batch=1,
                                compression=compression, uncompressed_size=10)
        md.properties.add(key="a", value="b")
        with pytest.raises(ConversionError) as refused:
            pulsar_to_kafka(md, payload, 0)
        batch = unconverted_to_kafka(md, payload, str(refused.value))
        [record] = decode_records_absolute(bytes(batch))
        assert dict(record.headers)["pulsar.unconverted"] == str(refused.value).encode()
        assert record.value == payload and dict(record.headers)["a"] == b"b"
        entry = unbatched(kafka_to_pulsar(batch))
        assert (entry.metadata, entry.payload, entry.num_messages) == (md, payload, 1)


def test_a_compressed_message_over_the_limit_is_refused_by_the_conversion() -> None:
    data = b"z" * 100_000
    md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=T0, compression=pb.LZ4,
                            uncompressed_size=len(data))
    with pytest.raises(ConversionError, match="over the 32768-byte limit"):
        pulsar_to_kafka(md, pz.compress(pb.LZ4, data), 0, limit=32768)


def test_a_batch_cannot_claim_more_messages_than_its_bytes_hold() -> None:
    md = encrypted(batch_of=2**31 - 1)
    md.ClearField("compression")
    batch = pulsar_to_kafka(md, b"0123456789", 0)
    assert parse_batch_header(batch).last_offset_delta == 1  # 10 bytes hold at most 2 messages (4 bytes each)
    assert kafka_to_pulsar(batch).num_messages == 2
    md.compression = pb.LZ4  # compressed: the uncompressed size bounds it (4096 bytes -> 1024 messages)
    assert parse_batch_header(pulsar_to_kafka(md, b"0123456789", 0)).last_offset_delta == 1023
