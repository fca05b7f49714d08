"""The records of KIP-848 consumer groups in __consumer_offsets, in Apache Kafka 4.x's layouts.

Kafka's group coordinator keeps a consumer group as several records beside the offset commits (types 0
and 1) and classic groups (type 2), so that a restart or a coordinator move replays them; so do we, with
the same bytes, so Kafka's own tools (kafka-dump-log --offsets-decoder) read what we write
(research/kip848.md §6). Keys are non-flexible (int16 length strings) and start with the record type;
values start with an int16 version (0 for all of these) and are flexible (compact strings and arrays,
16-byte uuids, a tagged-field section). A null value is a tombstone.

| type | key fields              | value fields (version 0)                                               |
|------|-------------------------|------------------------------------------------------------------------|
| 3    | group                   | Epoch int32                                                            |
| 4    | group                   | Topics [TopicId uuid, TopicName, NumPartitions int32, PartitionMetadata]|
| 5    | group, member           | InstanceId?, RackId?, ClientId, ClientHost, SubscribedTopicNames[],    |
|      |                         | SubscribedTopicRegex?, RebalanceTimeoutMs, ServerAssignor?, tag 0:     |
|      |                         | ClassicMemberMetadata? {SessionTimeoutMs, SupportedProtocols [Name,    |
|      |                         | Metadata bytes]} (a classic member of a consumer group; null else)     |
| 6    | group                   | AssignmentEpoch int32                                                  |
| 7    | group, member           | TopicPartitions [TopicId, Partitions int32[]]                          |
| 8    | group, member           | MemberEpoch, PreviousMemberEpoch, State int8, AssignedPartitions[],    |
|      |                         | PartitionsPendingRevocation[] (each [TopicId, Partitions int32[], tag  |
|      |                         | 0: AssignmentEpochs int32[]?, Kafka 4.3+])                             |
| 16   | group, regex            | Topics string[], Version int64, Timestamp int64                        |

Written by hand like kop/coordinator/records.py: these schemas live in Kafka's group-coordinator module,
not among the request/response schemas kop.protocol generates its codec from. A tagged field we do not
know (Kafka 4.1's MetadataHash in type 3, 4.3's AssignmentTimestamp in type 6) is skipped on read;
ClassicMemberMetadata (tag 0 of type 5) is read and written, so a group converted between the protocols
(KIP-848's online migration) survives a restart.
AssignmentEpochs (tag 0 of type 8's topic entries, KIP-1251, Kafka 4.3+): the member epoch at which each
partition was assigned, which decides whether a commit with an older member epoch is accepted. Written as
Kafka 4.4 writes it (on every entry, in the order of its partitions); a record without it (Kafka 4.2 and
older, this broker before it) reads as `epochs=None`, and its partitions count as assigned at
max(MemberEpoch, 0) (Kafka's default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kop.coordinator.records import RecordError, _Reader, _Writer

GROUP_EPOCH = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
REGULAR_EXPRESSION = 16
TYPES = (GROUP_EPOCH, PARTITION_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA,
         TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION)
_WITH_SECOND = {MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT, REGULAR_EXPRESSION}

Partitions = dict[bytes, frozenset[int]]  # topic id -> partitions
Epochs = dict[bytes, dict[int, int]]  # topic id -> partition -> the member epoch it was assigned at


@dataclass(frozen=True, slots=True)
class ConsumerKey:
    """A consumer-group record's key: its type, the group and (types 5, 7, 8) the member or (16) regex."""
    type: int
    group: str
    second: str | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: bytes
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """What a classic-protocol member of a consumer group joined with: its session timeout and its
    JoinGroup protocols (name, ConsumerProtocolSubscription bytes) in its order of preference."""
    session_timeout_ms: int
    supported_protocols: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMemberMetadata | None = None


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)
    # The assignment epoch of each partition of both lists; None: the record has none (written before KIP-1251)
    epochs: Epochs | None = None

    def epoch_of(self, topic_id: bytes, partition: int) -> int:
        """A partition's assignment epoch; Kafka's default, max(MemberEpoch, 0), where the record has none."""
        found = (self.epochs or {}).get(topic_id, {}).get(partition)
        return found if found is not None else max(self.member_epoch, 0)


@dataclass(frozen=True, slots=True)
class RegexValue:
    topics: tuple[str, ...]
    version: int
    timestamp: int


# ---------------------------------------------------------------------------------------- keys


def encode_key(key: ConsumerKey) -> bytes:
    if key.type not in TYPES:
        raise RecordError(f"{key.type} is not a consumer group record type")
    w = _Writer(False)
    w.int16(key.type)
    w.string(key.group)
    if key.type in _WITH_SECOND:
        if key.second is None:
            raise RecordError(f"a type {key.type} key needs a member id or regex")
        w.string(key.second)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> ConsumerKey:
    r = _Reader(data, 0, False)
    kind = r.int16()
    if kind not in TYPES:
        raise RecordError(f"{kind} is not a consumer group record type")
    group = r.string()
    second = r.string() if kind in _WITH_SECOND else None
    if r.pos != len(data):
        raise RecordError(f"{len(data) - r.pos} bytes after a type {kind} key")
    return ConsumerKey(kind, group, second)


# ---------------------------------------------------------------------------------------- values


def _start() -> _Writer:
    w = _Writer(True)
    w.int16(0)
    return w


def _reader(data: bytes | memoryview) -> _Reader:
    version = _Reader(data, 0, False).int16()
    if version != 0:
        raise RecordError(f"unknown consumer group value version {version}")
    return _Reader(data, 2, True)


def _done(w: _Writer) -> bytes:
    w.no_tags()
    return bytes(w.out)


def _uuid(w: _Writer, u: bytes) -> None:
    if len(u) != 16:
        raise RecordError("a topic id is 16 bytes")
    w.out += u


def _partitions(w: _Writer, parts: Partitions) -> None:
    w.array_len(len(parts))
    for tid in sorted(parts):
        _uuid(w, tid)
        w.array_len(len(parts[tid]))
        for p in sorted(parts[tid]):
            w.int32(p)
        w.no_tags()


def _read_partitions(r: _Reader) -> Partitions:
    out: dict[bytes, frozenset[int]] = {}
    for _ in range(r.array_len()):
        tid = r._take(16)
        out[tid] = frozenset(r.int32() for _ in range(r.array_len()))
        r.skip_tags()
    return out


def _assignment_partitions(w: _Writer, parts: Partitions, v: CurrentAssignmentValue) -> None:
    """Type 8's TopicPartitions: with tag 0 (AssignmentEpochs) on each entry when the value has epochs."""
    w.array_len(len(parts))
    for tid in sorted(parts):
        _uuid(w, tid)
        ordered = sorted(parts[tid])
        w.array_len(len(ordered))
        for p in ordered:
            w.int32(p)
        if v.epochs is None:
            w.no_tags()
            continue
        tag = _Writer(True)
        tag.array_len(len(ordered))
        for p in ordered:
            tag.int32(v.epoch_of(tid, p))
        w.uvarint(1)  # one tagged field: tag 0, its size, the compact int32 array
        w.uvarint(0)
        w.uvarint(len(tag.out))
        w.out += tag.out


def _read_assignment_partitions(r: _Reader, epochs: Epochs) -> tuple[Partitions, bool]:
    """Type 8's TopicPartitions; the AssignmentEpochs found go into `epochs`. True when some entry had them."""
    out: dict[bytes, frozenset[int]] = {}
    found = False
    for _ in range(r.array_len()):
        tid = r._take(16)
        ordered = [r.int32() for _ in range(r.array_len())]
        out[tid] = frozenset(ordered)
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            end = r.pos + size
            if tag == 0:
                n = r.uvarint() - 1  # a compact nullable array: 0 is null
                values = [r.int32() for _ in range(n)] if n >= 0 else None
                # Kafka ignores epochs that do not match the partitions one to one (and logs it)
                if values is not None and len(values) == len(ordered):
                    epochs.setdefault(tid, {}).update(zip(ordered, values, strict=True))
                    found = True
            if r.pos > end:
                raise RecordError("a tagged field overruns its size")
            r.pos = end
    return out, found


def _strings(w: _Writer, items: tuple[str, ...] | list[str]) -> None:
    w.array_len(len(items))
    for s in items:
        w.string(s)


def _read_strings(r: _Reader) -> tuple[str, ...]:
    return tuple(r.string() for _ in range(r.array_len()))


def encode_epoch(epoch: int) -> bytes:
    """Type 3 (group epoch) and type 6 (assignment epoch) values: one int32."""
    w = _start()
    w.int32(epoch)
    return _done(w)


def decode_epoch(data: bytes | memoryview) -> int:
    r = _reader(data)
    epoch = r.int32()
    r.skip_tags()
    return epoch


def encode_partition_metadata(topics: list[TopicMetadata]) -> bytes:
    w = _start()
    w.array_len(len(topics))
    for t in sorted(topics, key=lambda t: t.name):
        _uuid(w, t.topic_id)
        w.string(t.name)
        w.int32(t.partitions)
        w.array_len(0)  # PartitionMetadata (racks): deprecated, Kafka 4.0 writes none either
        w.no_tags()
    return _done(w)


def decode_partition_metadata(data: bytes | memoryview) -> list[TopicMetadata]:
    r = _reader(data)
    out = []
    for _ in range(r.array_len()):
        tid = r._take(16)
        name = r.string()
        count = r.int32()
        for _ in range(r.array_len()):
            r.int32()
            _read_strings(r)
            r.skip_tags()
        r.skip_tags()
        out.append(TopicMetadata(tid, name, count))
    r.skip_tags()
    return out


def encode_member_metadata(v: MemberMetadataValue) -> bytes:
    w = _start()
    w.string(v.instance_id)
    w.string(v.rack_id)
    w.string(v.client_id)
    w.string(v.client_host)
    _strings(w, v.subscribed_topic_names)
    w.string(v.subscribed_topic_regex)
    w.int32(v.rebalance_timeout_ms)
    w.string(v.server_assignor)
    # Tagged field 0, ClassicMemberMetadata. Null for a consumer-protocol member: Kafka's generated writer
    # writes a null nullable struct explicitly (one field, tag 0, size 1, the null marker 0), so do we.
    # Present: tag 0, size, the marker 1 (counted in the size), then the struct.
    if v.classic is None:
        w.out += b"\x01\x00\x01\x00"
        return bytes(w.out)
    s = _Writer(True)
    s.uvarint(1)
    s.int32(v.classic.session_timeout_ms)
    s.array_len(len(v.classic.supported_protocols))
    for name, metadata in v.classic.supported_protocols:
        s.string(name)
        s.bytes_(metadata)
        s.no_tags()
    s.no_tags()
    w.uvarint(1)
    w.uvarint(0)
    w.uvarint(len(s.out))
    w.out += s.out
    return bytes(w.out)


def decode_member_metadata(data: bytes | memoryview) -> MemberMetadataValue:
    r = _reader(data)
    v = MemberMetadataValue(r.string(nullable=True), r.string(nullable=True), r.string(),
                            r.string(), _read_strings(r), r.string(nullable=True), r.int32(),
                            r.string(nullable=True))
    classic = None
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        end = r.pos + size
        if tag == 0 and r.uvarint() > 0:
            session = r.int32()
            protocols: list[tuple[str, bytes]] = []
            for _ in range(r.array_len()):
                name = r.string()
                protocols.append((name, r.bytes_()))
                r.skip_tags()
            r.skip_tags()
            classic = ClassicMemberMetadata(session, tuple(protocols))
        if r.pos > end:
            raise RecordError("a tagged field overruns its size")
        r.pos = end
    return replace(v, classic=classic)


def encode_target_member(parts: Partitions) -> bytes:
    w = _start()
    _partitions(w, parts)
    return _done(w)


def decode_target_member(data: bytes | memoryview) -> Partitions:
    r = _reader(data)
    parts = _read_partitions(r)
    r.skip_tags()
    return parts


def encode_current_assignment(v: CurrentAssignmentValue) -> bytes:
    w = _start()
    w.int32(v.member_epoch)
    w.int32(v.previous_member_epoch)
    w.out += bytes([v.state & 0xFF])
    _assignment_partitions(w, v.assigned, v)
    _assignment_partitions(w, v.pending_revocation, v)
    return _done(w)


def decode_current_assignment(data: bytes | memoryview) -> CurrentAssignmentValue:
    r = _reader(data)
    epoch = r.int32()
    previous = r.int32()
    state = int.from_bytes(r._take(1), "big", signed=True)
    epochs: Epochs = {}
    assigned, in_assigned = _read_assignment_partitions(r, epochs)
    pending, in_pending = _read_assignment_partitions(r, epochs)
    r.skip_tags()
    v = CurrentAssignmentValue(epoch, previous, state, assigned, pending)
    if not (in_assigned or in_pending):
        return v
    # Entries without epochs (not written by Kafka) take the default, as Kafka reads them.
    default = max(epoch, 0)
    for parts in (assigned, pending):
        for tid, ps in parts.items():
            per_topic = epochs.setdefault(tid, {})
            for p in ps:
                per_topic.setdefault(p, default)
    return replace(v, epochs=epochs)


def encode_regex(v: RegexValue) -> bytes:
    w = _start()
    _strings(w, sorted(v.topics))
    w.int64(v.version)
    w.int64(v.timestamp)
    return _done(w)


def decode_regex(data: bytes | memoryview) -> RegexValue:
    r = _reader(data)
    v = RegexValue(_read_strings(r), r.int64(), r.int64())
    r.skip_tags()
    return v
