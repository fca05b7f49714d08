"""Schemas are read from the installed kafka-python at runtime and turned into message classes."""

from __future__ import annotations

import random
import struct

import pytest

from kop.protocol import (
    API_KEYS,
    DecodeError,
    EncodeError,
    ErrorCode,
    decode_message,
    decode_request_header,
    encode_message,
    encode_response,
    message_class,
)
from kop.protocol.codec import MODELS, _decode_request_header_slow
from kop.protocol.schema import MAX_VERSION, NO_VERSIONS, Versions, load, load_all, parse_schema, snake_case


def test_every_schema_is_loaded_including_headers() -> None:
    specs = load_all()
    kinds = {spec.type for spec in specs.values()}
    assert {"request", "response", "header"} <= kinds
    assert load("RequestHeader").flexible_versions == Versions(2, MAX_VERSION)
    assert load("ResponseHeader").valid_versions == Versions(0, 1)
    requests = [s for s in specs.values() if s.type == "request"]
    # kafka-python's 52, plus ConsumerGroupHeartbeat, ConsumerGroupDescribe and KIP-932's ShareGroupHeartbeat,
    # ShareGroupDescribe, ShareFetch, ShareAcknowledge and Describe/Alter/DeleteShareGroupOffsets
    # and KIP-1071's StreamsGroupHeartbeat and StreamsGroupDescribe, and the share coordinator's
    # Initialize/Read/Write/DeleteShareGroupState, ReadShareGroupStateSummary (kop/protocol/extra_schemas.py)
    assert len(requests) == len(API_KEYS) == 68


def test_consumer_group_heartbeat_answer_encodes_its_nullable_assignment_as_kafka_does() -> None:
    """The Assignment of a ConsumerGroupHeartbeat answer is a nullable struct: an int8 -1 (null) or 1, then
    the struct (research/kip848.md §1)."""
    from kop.protocol.codec import api_info, decode_message, encode_message

    R = api_info(68).response_class
    r = R(throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=1,
          heartbeat_interval_ms=5000, assignment=None)
    assert encode_message(r, 1) == bytes.fromhex("00000000" "0000" "00" "026d" "00000001" "00001388" "ff" "00")
    r.assignment = R.Assignment(topic_partitions=[R.Assignment.TopicPartitions(topic_id=b"\1" * 16, partitions=[0, 1])])
    raw = encode_message(r, 1)
    assert raw[17:19] == bytes.fromhex("0102")  # present; one topic
    assert decode_message("ConsumerGroupHeartbeatResponse", 1, raw) == r


def test_share_fetch_v1_bytes_are_kafka_44s_layout() -> None:
    """ShareFetch v1 as kafka-clients 4.4.0's ShareFetchRequestData/ResponseData lay it out (all flexible: compact
    strings and arrays, a tagged-field byte after each struct): a request piggy-backing one acknowledgement
    batch, and an answer with one AcquiredRecords range and no records."""
    from kop.protocol.codec import api_info, decode_message, encode_message

    Q = api_info(78).request_class
    tid = bytes(range(16))
    q = Q(group_id="g", member_id="m", share_session_epoch=2, max_wait_ms=500, min_bytes=1, max_bytes=1024,
          max_records=3, batch_size=3, topics=[Q.FetchTopic(topic_id=tid, partitions=[Q.FetchTopic.FetchPartition(
              partition_index=0, acknowledgement_batches=[Q.FetchTopic.FetchPartition.AcknowledgementBatch(
                  first_offset=5, last_offset=6, acknowledge_types=[1, 2])])])], forgotten_topics_data=[])
    assert encode_message(q, 1) == bytes.fromhex(
        "0267" "026d" "00000002" "000001f4" "00000001" "00000400" "00000003" "00000003"
        "02" + tid.hex() + "02" "00000000" "02" "0000000000000005" "0000000000000006" "03" "0102" "00" "00" "00"
        "01" "00")
    R = api_info(78).response_class
    r = R(throttle_time_ms=0, error_code=0, error_message=None, acquisition_lock_timeout_ms=30000, responses=[
        R.ShareFetchableTopicResponse(topic_id=tid, partitions=[R.PartitionData(
            partition_index=0, error_code=0, error_message=None, acknowledge_error_code=121,
            acknowledge_error_message=None, current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
            records=None, acquired_records=[R.AcquiredRecords(first_offset=7, last_offset=9, delivery_count=2)])])],
        node_endpoints=[])
    raw = encode_message(r, 1)
    assert raw == bytes.fromhex(
        "00000000" "0000" "00" "00007530" "02" + tid.hex() + "02" "00000000" "0000" "00" "0079" "00"
        "ffffffff" "ffffffff" "00" "00" "02" "0000000000000007" "0000000000000009" "0002" "00" "00" "00" "01" "00")
    assert decode_message("ShareFetchResponse", 1, raw) == r


def test_comments_are_stripped_and_common_structs_resolved() -> None:
    text = """// licence header
    {
      // a comment line
      "apiKey": 99, "type": "request", "name": "DemoRequest",
      "validVersions": "0-2", "flexibleVersions": "2+",
      "fields": [
        { "name": "Items", "type": "[]Item", "versions": "0+", "about": "x" },
        { "name": "timeoutMs", "type": "int32", "versions": "1+", "default": "60000", "about": "x" }
      ],
      "commonStructs": [
        { "name": "Item", "versions": "0+", "fields": [
          { "name": "ItemId", "type": "uuid", "versions": "0+", "about": "x" } ] }
      ]
    }"""
    spec = parse_schema(text)
    assert spec.api_key == 99 and spec.valid_versions == Versions(0, 2)
    items, timeout = spec.fields
    assert items.is_array and items.is_struct and items.struct_name == "Item"
    assert [f.attr for f in items.fields] == ["item_id"]
    assert timeout.attr == "timeout_ms" and timeout.present(1) and not timeout.present(0)


def test_the_request_header_client_id_is_never_compact() -> None:
    client_id = load("RequestHeader").fields[-1]
    assert client_id.flexible_versions == NO_VERSIONS and client_id.nullable(2)


@pytest.mark.parametrize(("text", "expected"), [
    ("3+", Versions(3, MAX_VERSION)), ("0-5", Versions(0, 5)), ("7", Versions(7, 7)),
    ("none", NO_VERSIONS), ("", NO_VERSIONS), (None, NO_VERSIONS),
])
def test_version_ranges(text: str | None, expected: Versions) -> None:
    assert Versions.parse(text) == expected
    assert 4 in Versions.parse("3+") and 2 not in Versions.parse("3+") and 0 not in NO_VERSIONS


@pytest.mark.parametrize(("name", "attr"), [
    ("PartitionIndex", "partition_index"), ("partitionIndex", "partition_index"),
    ("ThrottleTimeMs", "throttle_time_ms"), ("timeoutMs", "timeout_ms"),
    ("V3AndBelowTopics", "v3_and_below_topics"), ("TopicID", "topic_id"), ("Records", "records"),
])
def test_snake_case(name: str, attr: str) -> None:
    assert snake_case(name) == attr


def test_classes_are_named_after_schema_structs_and_hold_all_versions() -> None:
    Produce = message_class("ProduceRequest")
    assert Produce.TopicProduceData.PartitionProduceData is Produce.PartitionProduceData
    assert Produce.TopicProduceData.__qualname__ == "ProduceRequest.TopicProduceData"
    assert Produce.__slots__ == ("transactional_id", "acks", "timeout_ms", "topic_data")
    assert "topic_id" in Produce.TopicProduceData.__slots__ and "name" in Produce.TopicProduceData.__slots__
    Fetch = message_class("FetchResponse")
    assert {"LeaderIdAndEpoch", "EpochEndOffset", "SnapshotId", "NodeEndpoint", "AbortedTransaction"} <= set(dir(Fetch))
    with pytest.raises(TypeError):
        Produce(no_such_field=1)
    with pytest.raises(AttributeError):
        Produce().no_such_field = 1  # __slots__: typos fail loudly


def test_value_semantics() -> None:
    Meta = message_class("MetadataRequest")
    a = Meta(topics=[Meta.MetadataRequestTopic(name="t")])
    b = Meta(topics=[Meta.MetadataRequestTopic(name="t")])
    assert a == b and a != Meta(topics=None) and a != "something else"
    assert repr(a).startswith("MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(")
    assert a.to_dict()["topics"][0]["name"] == "t"


def test_data_schemas_round_trip() -> None:
    Subscription = message_class("ConsumerProtocolSubscription")
    value = Subscription(topics=["a", "b"], user_data=b"u", owned_partitions=[
        Subscription.TopicPartition(topic="a", partitions=[0, 1])], generation_id=3, rack_id="r")
    model = MODELS["ConsumerProtocolSubscription"]
    for version in range(model.spec.valid_versions.low, model.spec.valid_versions.high + 1):
        assert isinstance(decode_message("ConsumerProtocolSubscription", version,
                                         encode_message(value, version)), Subscription)


def test_error_codes_carry_kafka_names() -> None:
    assert ErrorCode.NONE == 0 and ErrorCode.UNKNOWN_SERVER_ERROR == -1
    assert ErrorCode(1).name == "OFFSET_OUT_OF_RANGE" and ErrorCode(2).name == "CORRUPT_MESSAGE"
    assert ErrorCode(3).name == "UNKNOWN_TOPIC_OR_PARTITION" and ErrorCode(6).name == "NOT_LEADER_OR_FOLLOWER"
    assert ErrorCode(35).name == "UNSUPPORTED_VERSION" and ErrorCode(120).name == "TRANSACTION_ABORTABLE"
    assert ErrorCode["NOT_LEADER_FOR_PARTITION"] is ErrorCode.NOT_LEADER_OR_FOLLOWER  # old alias
    assert all(code in {c.value for c in ErrorCode} for code in range(-1, 121))
    assert ErrorCode.NOT_COORDINATOR.retriable and not ErrorCode.TOPIC_AUTHORIZATION_FAILED.retriable


def test_encode_errors_name_the_message() -> None:
    Meta = message_class("MetadataResponse")
    with pytest.raises(EncodeError, match="MetadataResponse v12"):
        encode_response(3, 12, 1, Meta(throttle_time_ms="soon"))
    with pytest.raises(EncodeError, match="expected a MetadataResponse"):
        encode_response(3, 12, 1, message_class("FetchResponse")())
    with pytest.raises(EncodeError):
        encode_message(Meta(throttle_time_ms=2**40), 12)


def test_header_fast_path_agrees_with_the_careful_parser() -> None:
    rng = random.Random("headers")
    keys = [0, 1, 3, 18, 999]
    for _ in range(3000):
        client = rng.choice([None, "", "cli", "é", None])
        raw = b"\xff\xff" if client is None else struct.pack(">h", len(client.encode())) + client.encode()
        if rng.random() < 0.1:
            raw = struct.pack(">h", rng.randint(-3, 40)) + rng.randbytes(rng.randint(0, 5))
        frame = struct.pack(">hhi", rng.choice(keys), rng.randint(-1, 20), rng.randint(-5, 5)) + raw
        frame += rng.choice([b"", b"\x00", b"\x00body", b"\x01\x03\x01x", b"\x80", bytes([0xC8])])
        frame = frame[:rng.randint(8, len(frame))] if rng.random() < 0.2 else frame
        try:
            expected = _decode_request_header_slow(memoryview(frame))
        except DecodeError:
            with pytest.raises(DecodeError):
                decode_request_header(memoryview(frame))
        else:
            assert decode_request_header(memoryview(frame)) == expected, frame
