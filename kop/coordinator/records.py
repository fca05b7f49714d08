"""The records the group coordinator keeps in __consumer_offsets, in Apache Kafka's own layouts.

Tools that decode __consumer_offsets (kafka-console-consumer with Kafka's OffsetsMessageFormatter, or any
reader of Kafka's coordinator records) must read what this broker writes, so both the key and the value
use Kafka's versioned schemas byte for byte: an int16 version, then the fields in order.

Keys (the version selects the record type):

* 0 and 1 - offset commit key: group string, topic string, partition int32. Kafka writes version 1.
* 2       - group metadata key: group string.
* 3 and up - KIP-848 consumer groups (consumer_records.py) and streams groups (streams/records.py); others skipped on load.

Values (a null value is a tombstone: the key's state is gone):

* offset commit value v0-v4: offset int64, leader epoch int32 (v3+), metadata string, commit timestamp
  int64, expire timestamp int64 (v1 only). v4 is the first flexible version (compact strings, tagged
  fields), whose tag 0 is the topic's id (uuid). Kafka writes v1 when the commit carries a retention time
  (OffsetCommit v2-v4), else v4; Kafka 4.4 puts the topic id in v4's tag section (KafkaApis fills it in from
  its metadata for a commit by topic name, 4.2 left it out: an empty tag section); so do we, byte for byte.
* group metadata value v0-v4: protocol type string, generation int32, protocol nullable string, leader
  nullable string, current state timestamp int64 (v2+), then members: member id, group instance id
  (nullable, v3+), client id, client host, rebalance timeout int32 (v1+), session timeout int32,
  subscription bytes, assignment bytes. Kafka writes v3.

This codec is written by hand from those layouts: Kafka's JSON for coordinator records is not among the
request/response schemas that kop.protocol generates its codec from.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, overload

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 4
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
ZERO_UUID = bytes(16)  # Kafka's Uuid.ZERO_UUID: no topic id (the tagged field's default, left out)
_TOPIC_ID_TAG = 0  # OffsetCommitValue's tagged field topicId (v4+)
GROUP_METADATA_VALUE_VERSION = 3

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class RecordError(ValueError):
    """A key or value that does not decode as one of Kafka's coordinator record layouts."""


# ---------------------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record type this broker does not use (KIP-848, share or streams groups)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int = -1  # -1: none
    metadata: str = ""
    commit_timestamp: int = 0
    expire_timestamp: int = -1  # -1: none (only version 1 stores one)
    topic_id: bytes = ZERO_UUID  # only version 4+ stores one (tag 0); ZERO_UUID: none


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberMetadata] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- writer


class _Writer:
    """Kafka's primitive encodings, classic (int16/int32 lengths) or flexible (compact varints)."""

    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def int16(self, v: int) -> None:
        self.out += _H.pack(v)

    def int32(self, v: int) -> None:
        self.out += _I.pack(v)

    def int64(self, v: int) -> None:
        self.out += _Q.pack(v)

    def uvarint(self, v: int) -> None:
        while v >= 0x80:
            self.out.append((v & 0x7F) | 0x80)
            v >>= 7
        self.out.append(v)

    def _length(self, n: int | None, classic: Callable[[int], None]) -> None:
        """A length prefix: compact (n + 1, 0 for null) when flexible, else `classic`'s width (-1: null)."""
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        else:
            classic(-1 if n is None else n)

    def string(self, s: str | None) -> None:
        raw = None if s is None else s.encode("utf-8")
        if raw is not None and not self.flexible and len(raw) > 0x7FFF:
            raise RecordError(f"string of {len(raw)} bytes is too long for an int16 length")
        self._length(None if raw is None else len(raw), self.int16)
        self.out += raw or b""

    def bytes_(self, b: bytes | None) -> None:
        self._length(None if b is None else len(b), self.int32)
        self.out += b or b""

    def array_len(self, n: int) -> None:
        if self.flexible:
            self.uvarint(n + 1)
        else:
            self.int32(n)

    def no_tags(self) -> None:
        if self.flexible:
            self.uvarint(0)


class _Reader:
    def __init__(self, data: bytes | memoryview, pos: int, flexible: bool) -> None:
        self.data = data
        self.pos = pos
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.data):
            raise RecordError("record is truncated")
        out = bytes(self.data[self.pos:end])
        self.pos = end
        return out

    def int16(self) -> int:
        return _H.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _Q.unpack(self._take(8))[0]

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data) or shift > 28:
                raise RecordError("bad varint")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7

    @overload
    def string(self, nullable: Literal[False] = False) -> str: ...

    @overload
    def string(self, nullable: bool) -> str | None: ...

    def string(self, nullable: bool = False) -> str | None:
        """A string; null (a negative length) only when `nullable`, else RecordError."""
        n = self.uvarint() - 1 if self.flexible else self.int16()
        if n < 0:
            if not nullable:
                raise RecordError("null in a non-nullable string")
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError("string is not UTF-8") from None

    def bytes_(self) -> bytes:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0:
            raise RecordError("null in a non-nullable bytes field")
        return self._take(n)

    def array_len(self) -> int:
        n = self.uvarint() - 1 if self.flexible else self.int32()
        if n < 0 or n > len(self.data):
            raise RecordError(f"bad array length {n}")
        return n

    def skip_tags(self) -> None:
        self.tags()

    def tags(self) -> dict[int, bytes]:
        """The tag section's fields (tag -> raw bytes); none in a classic (non-flexible) layout."""
        if not self.flexible:
            return {}
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out


# ---------------------------------------------------------------------------------------- keys


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer(False)
    w.int16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.int32(partition)
    return bytes(w.out)


def group_metadata_key(group: str) -> bytes:
    w = _Writer(False)
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = _Reader(data, 0, False)
    version = r.int16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif version == 2:
        key = GroupMetadataKey(r.string())
    else:
        return UnknownKey(version)
    if r.pos != len(data):
        raise RecordError(f"{len(data) - r.pos} bytes after a version {version} key")
    return key


# ---------------------------------------------------------------------------------------- values


def encode_offset_commit_value(v: OffsetCommitValue, version: int | None = None) -> bytes:
    if version is None:
        version = OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if v.expire_timestamp >= 0 else OFFSET_COMMIT_VALUE_VERSION
    if version != 1 and v.expire_timestamp >= 0:
        raise RecordError(f"offset commit value v{version} cannot hold an expire timestamp")
    w = _Writer(version >= 4)
    w.int16(version)
    w.int64(v.offset)
    if version >= 3:
        w.int32(v.leader_epoch)
    w.string(v.metadata)
    w.int64(v.commit_timestamp)
    if version == 1:
        w.int64(v.expire_timestamp)
    if version >= 4 and v.topic_id != ZERO_UUID:
        w.uvarint(1)  # one tagged field: topicId
        w.uvarint(_TOPIC_ID_TAG)
        w.uvarint(len(v.topic_id))
        w.out += v.topic_id
    else:
        w.no_tags()
    return bytes(w.out)


def _value_reader(data: bytes | memoryview, what: str) -> tuple[int, _Reader]:
    """A value's version and a reader of its fields: both value types know versions 0-4, of which 4 is
    the first flexible (tagged fields, compact strings)."""
    version = _Reader(data, 0, False).int16()
    if not 0 <= version <= 4:
        raise RecordError(f"unknown {what} value version {version}")
    return version, _Reader(data, 2, version >= 4)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    version, r = _value_reader(data, "offset commit")
    offset = r.int64()
    epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else -1
    topic_id = r.tags().get(_TOPIC_ID_TAG, ZERO_UUID)
    if len(topic_id) != 16:
        raise RecordError(f"a topic id of {len(topic_id)} bytes")
    return OffsetCommitValue(offset, epoch, metadata or "", commit_ts, expire_ts, topic_id)


def encode_group_metadata_value(v: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_VERSION) -> bytes:
    w = _Writer(version >= 4)
    w.int16(version)
    w.string(v.protocol_type)
    w.int32(v.generation)
    w.string(v.protocol)
    w.string(v.leader)
    if version >= 2:
        w.int64(v.current_state_timestamp)
    w.array_len(len(v.members))
    for m in v.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tags()
    w.no_tags()
    return bytes(w.out)


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    version, r = _value_reader(data, "group metadata")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.string(nullable=True)
    leader = r.string(nullable=True)
    state_ts = r.int64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len()):
        member_id = r.string()
        instance_id = r.string(nullable=True) if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tags()
        members.append(MemberMetadata(member_id, instance_id, client_id, client_host,
                                      rebalance_timeout, session_timeout, subscription, assignment))
    r.skip_tags()
    return GroupMetadataValue(protocol_type or "", generation, protocol, leader, state_ts, members)


# ---------------------------------------------------------------------------------------- placement


def java_string_hash(s: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, in signed 32-bit arithmetic."""
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + (raw[i] << 8 | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The __consumer_offsets partition of a group: Utils.abs(groupId.hashCode()) % partitions, as Kafka
    computes it (Utils.abs maps Integer.MIN_VALUE to 0), so tools that compute placement agree."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions
