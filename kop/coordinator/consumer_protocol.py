"""The classic consumer protocol's embedded bytes: ConsumerProtocolSubscription and ConsumerProtocolAssignment.

A classic consumer puts its subscription into JoinGroup's protocol metadata and reads its partitions from
SyncGroup's assignment, both in these layouts (Kafka's clients/.../message/ConsumerProtocol*.json, versions
0-3, not flexible: int16 lengths for strings, int32 for arrays and bytes). The coordinator reads and writes
them itself only where a group moves between the classic and the consumer protocol (KIP-848's online
migration, kop/coordinator/consumer_group.py): a classic group's subscriptions and assignments become a
consumer group's, and a classic member inside a consumer group gets the assignment the server-side
assignor computed, serialized at the version of the member's own subscription (as Kafka does).

Subscription: Topics []string, UserData bytes?, OwnedPartitions [Topic, Partitions []int32] (v1+),
GenerationId int32 (v2+), RackId string? (v3+). Assignment: AssignedPartitions [Topic, Partitions []int32],
UserData bytes?. A newer version is read as the newest we know (Kafka's rule: versions only append fields).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

_H = struct.Struct(">h")
_I = struct.Struct(">i")


class ProtocolError(ValueError):
    """Bytes that are not a ConsumerProtocol subscription or assignment (Kafka's SchemaException)."""


@dataclass(frozen=True, slots=True)
class Subscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: dict[str, frozenset[int]] = field(default_factory=dict)  # topic name -> partitions (v1+)
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+


@dataclass(frozen=True, slots=True)
class Assignment:
    version: int
    partitions: dict[str, frozenset[int]]  # topic name -> partitions
    user_data: bytes | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("truncated")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return _H.unpack(self.take(2))[0]

    def int32(self) -> int:
        return _I.unpack(self.take(4))[0]

    def string(self, nullable: bool = False) -> str | None:
        n = self.int16()
        if n < 0:
            if nullable:
                return None
            raise ProtocolError("null string")
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("string is not UTF-8") from None

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n < 0 else self.take(n)

    def count(self) -> int:
        n = self.int32()
        if n < 0 or n > len(self.data):
            raise ProtocolError(f"bad array length {n}")
        return n

    def topic_partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, frozenset[int]] = {}
        for _ in range(self.count()):
            topic = self.string()
            assert topic is not None
            out[topic] = out.get(topic, frozenset()) | frozenset(self.int32() for _ in range(self.count()))
        return out


def version_of(data: bytes) -> int:
    """The version a subscription or assignment was written with (Kafka's ConsumerProtocol.deserializeVersion)."""
    if len(data) < 2:
        raise ProtocolError("no version")
    version = _H.unpack_from(data, 0)[0]
    if version < 0:
        raise ProtocolError(f"negative version {version}")
    return version


def parse_subscription(data: bytes) -> Subscription:
    r = _Reader(bytes(data))
    version = version_of(r.data)
    r.pos = 2
    topics = tuple(r.string() or "" for _ in range(r.count()))
    user_data = r.nullable_bytes()
    owned: dict[str, frozenset[int]] = {}
    generation, rack = -1, None
    if version >= 1 and r.pos < len(r.data):
        owned = r.topic_partitions()
    if version >= 2 and r.pos < len(r.data):
        generation = r.int32()
    if version >= 3 and r.pos < len(r.data):
        rack = r.string(nullable=True)
    return Subscription(version, topics, user_data, owned, generation, rack)


def parse_assignment(data: bytes) -> Assignment:
    r = _Reader(bytes(data))
    version = version_of(r.data)
    r.pos = 2
    partitions = r.topic_partitions()
    user_data = r.nullable_bytes() if r.pos < len(r.data) else None
    return Assignment(version, partitions, user_data)


def serialize_assignment(partitions: dict[str, frozenset[int]], version: int) -> bytes:
    """An assignment without user data; `version` is the member's subscription version (capped at 3, the
    newest layout, which every version shares)."""
    out = bytearray(_H.pack(min(max(version, 0), 3)))
    out += _I.pack(len(partitions))
    for topic in sorted(partitions):
        raw = topic.encode("utf-8")
        out += _H.pack(len(raw)) + raw
        ps = sorted(partitions[topic])
        out += _I.pack(len(ps))
        for p in ps:
            out += _I.pack(p)
    out += _I.pack(-1)  # UserData: null
    return bytes(out)


def serialize_subscription(sub: Subscription) -> bytes:
    """For tests and tools: the subscription at its version."""
    out = bytearray(_H.pack(sub.version))
    out += _I.pack(len(sub.topics))
    for t in sub.topics:
        raw = t.encode("utf-8")
        out += _H.pack(len(raw)) + raw
    out += _I.pack(-1) if sub.user_data is None else _I.pack(len(sub.user_data)) + sub.user_data
    if sub.version >= 1:
        out += _I.pack(len(sub.owned))
        for topic in sorted(sub.owned):
            raw = topic.encode("utf-8")
            out += _H.pack(len(raw)) + raw + _I.pack(len(sub.owned[topic]))
            for p in sorted(sub.owned[topic]):
                out += _I.pack(p)
    if sub.version >= 2:
        out += _I.pack(sub.generation_id)
    if sub.version >= 3:
        if sub.rack_id is None:
            out += _H.pack(-1)
        else:
            raw = sub.rack_id.encode("utf-8")
            out += _H.pack(len(raw)) + raw
    return bytes(out)
