"""kop/coordinator/records.py: Kafka's __consumer_offsets record layouts and the group -> partition hash.

The layouts are checked byte for byte against hand-assembled encodings of Kafka's documented schemas
(OffsetCommitKey/Value, GroupMetadataKey/Value), every value version decodes, and the hash is Java's
String.hashCode. That Kafka's own tools read what we write is checked end to end in
tests/e2e/test_consumer_groups_cli.py (kafka-console-consumer with Kafka's OffsetsMessageFormatter).
"""

from __future__ import annotations

import struct

import pytest

from kop.coordinator import records as r


def s16(text: str | None) -> bytes:
    if text is None:
        return struct.pack(">h", -1)
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def test_offset_commit_key_layout() -> None:
    key = r.offset_commit_key("grp", "topic", 7)
    assert key == struct.pack(">h", 1) + s16("grp") + s16("topic") + struct.pack(">i", 7)
    assert r.decode_key(key) == r.OffsetCommitKey("grp", "topic", 7)
    # version 0 keys (older brokers) have the same fields
    assert r.decode_key(struct.pack(">h", 0) + s16("g") + s16("t") + struct.pack(">i", 0)) == r.OffsetCommitKey("g", "t", 0)


def test_group_metadata_key_layout() -> None:
    key = r.group_metadata_key("grp")
    assert key == struct.pack(">h", 2) + s16("grp")
    assert r.decode_key(key) == r.GroupMetadataKey("grp")


def test_other_record_types_are_recognised_not_parsed() -> None:
    assert r.decode_key(struct.pack(">h", 3) + s16("x")) == r.UnknownKey(3)


def test_offset_commit_value_v4_layout_is_what_kafka_4_2_writes() -> None:
    # Bytes of an offset commit value read from Apache Kafka 4.2's __consumer_offsets: offset 7, leader epoch 3,
    # metadata "meta" (compact string), commit timestamp, empty tag section.
    kafka = bytes.fromhex("0004000000000000000700000003056d657461000001a1fd8cf21100")
    v = r.OffsetCommitValue(offset=7, leader_epoch=3, metadata="meta", commit_timestamp=0x1A1FD8CF211)
    assert r.encode_offset_commit_value(v) == kafka
    assert r.decode_offset_commit_value(kafka) == v


def test_offset_commit_value_v4_carries_the_topic_id_in_tag_0_as_kafka_4_4_writes() -> None:
    # Kafka 4.4's OffsetCommitValue.json: topicId, uuid, taggedVersions 4+, tag 0 - a tag section of one field
    # (count 1, tag 0, size 16, the 16 bytes); a zero id is the default, left out.
    tid = bytes(range(1, 17))
    v = r.OffsetCommitValue(offset=7, leader_epoch=3, metadata="meta", commit_timestamp=0x1A1FD8CF211, topic_id=tid)
    data = r.encode_offset_commit_value(v)
    assert data == bytes.fromhex("0004000000000000000700000003056d657461000001a1fd8cf211" "010010") + tid
    assert r.decode_offset_commit_value(data) == v
    assert r.encode_offset_commit_value(v, version=3) == r.encode_offset_commit_value(
        r.OffsetCommitValue(7, 3, "meta", 0x1A1FD8CF211), version=3)  # not flexible: no tags, no id
    with pytest.raises(r.RecordError):
        r.decode_offset_commit_value(data[:-17] + bytes([1, 0, 15]) + tid[:15])  # an id that is not 16 bytes


def test_offset_commit_value_v3_layout() -> None:
    v = r.OffsetCommitValue(offset=42, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000)
    data = r.encode_offset_commit_value(v, version=3)
    assert data == struct.pack(">hqi", 3, 42, 5) + s16("meta") + struct.pack(">q", 1_700_000_000_000)
    assert r.decode_offset_commit_value(data) == v


def test_offset_commit_value_with_expiry_is_v1() -> None:
    v = r.OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=20)
    data = r.encode_offset_commit_value(v)
    assert data == struct.pack(">hq", 1, 1) + s16("") + struct.pack(">qq", 10, 20)
    assert r.decode_offset_commit_value(data) == v


def test_offset_commit_value_old_and_flexible_versions_decode() -> None:
    v0 = struct.pack(">hq", 0, 9) + s16("m") + struct.pack(">q", 5)
    assert r.decode_offset_commit_value(v0) == r.OffsetCommitValue(9, -1, "m", 5)
    v2 = struct.pack(">hq", 2, 9) + s16("m") + struct.pack(">q", 5)
    assert r.decode_offset_commit_value(v2) == r.OffsetCommitValue(9, -1, "m", 5)
    # v4: compact string (length + 1 as an unsigned varint) and a tag section with one unknown tag
    v4 = struct.pack(">hqi", 4, 9, 3) + bytes([2]) + b"m" + struct.pack(">q", 5) + bytes([1, 7, 2]) + b"zz"
    assert r.decode_offset_commit_value(v4) == r.OffsetCommitValue(9, 3, "m", 5)


def member(i: int, instance: str | None = None) -> r.MemberMetadata:
    return r.MemberMetadata(f"m{i}", instance, f"client{i}", f"/10.0.0.{i}", 30000, 10000, b"sub%d" % i, b"asg%d" % i)


def test_group_metadata_value_v3_layout() -> None:
    v = r.GroupMetadataValue("consumer", 4, "range", "m1", 1234, [member(1), member(2, "static-2")])
    data = r.encode_group_metadata_value(v)

    def m(mm: r.MemberMetadata) -> bytes:
        return (s16(mm.member_id) + s16(mm.group_instance_id) + s16(mm.client_id) + s16(mm.client_host)
                + struct.pack(">ii", mm.rebalance_timeout, mm.session_timeout) + b32(mm.subscription)
                + b32(mm.assignment))

    want = (struct.pack(">h", 3) + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m1")
            + struct.pack(">qi", 1234, 2) + m(v.members[0]) + m(v.members[1]))
    assert data == want
    assert r.decode_group_metadata_value(data) == v


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_value_every_version_round_trips(version: int) -> None:
    v = r.GroupMetadataValue("consumer", 2, None, None, 99 if version >= 2 else -1,
                             [member(1, "s" if version >= 3 else None)])
    got = r.decode_group_metadata_value(r.encode_group_metadata_value(v, version))
    if version == 0:  # no rebalance timeout stored: readers use the session timeout
        assert got.members[0].rebalance_timeout == -1
        got = r.GroupMetadataValue(got.protocol_type, got.generation, got.protocol, got.leader,
                                   got.current_state_timestamp, [member(1)])
    assert got == v


def test_empty_group_record() -> None:
    v = r.GroupMetadataValue("", 0, None, None, 5, [])
    data = r.encode_group_metadata_value(v)
    assert data == struct.pack(">h", 3) + s16("") + struct.pack(">i", 0) + s16(None) + s16(None) + struct.pack(">qi", 5, 0)
    assert r.decode_group_metadata_value(data) == v


@pytest.mark.parametrize("bad", [b"", b"\x00", struct.pack(">h", 3) + b"\x00\x05ab", struct.pack(">h", 9) + b"x" * 30])
def test_garbage_values_raise_record_error(bad: bytes) -> None:
    with pytest.raises(r.RecordError):
        r.decode_offset_commit_value(bad)
    with pytest.raises(r.RecordError):
        r.decode_group_metadata_value(bad)


# Expected values printed by Java's String.hashCode (jshell, OpenJDK 17).
@pytest.mark.parametrize("text,want", [
    ("", 0), ("a", 97), ("hello", 99162322), ("console-consumer-12345", 158455506),
    ("\u00fc\u20ac\U0001F600", 17318035),  # UTF-16 code units: the emoji is two surrogates
    ("polygenelubricants", -2147483648),  # a string whose hash is Integer.MIN_VALUE
])
def test_java_string_hash(text: str, want: int) -> None:
    assert r.java_string_hash(text) == want


def test_partition_for_matches_kafka_formula() -> None:
    assert r.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0, not MIN_VALUE
    assert r.partition_for("hello", 50) == 99162322 % 50
    assert r.partition_for("console-consumer-12345", 50) == 158455506 % 50
    assert all(0 <= r.partition_for(f"g{i}", 7) < 7 for i in range(1000))
