"""Share-group membership as records in __consumer_offsets, in Apache Kafka 4.4's layouts (its group coordinator's
ShareGroup* coordinator records), so a restart or a coordinator move gives the groups back, with their epochs.

| type | key fields    | value fields (version 0, flexible)                                             |
|------|---------------|--------------------------------------------------------------------------------|
| 10   | group, member | RackId?, ClientId, ClientHost, SubscribedTopicNames[] (ShareGroupMemberMetadata) |
| 11   | group         | Epoch int32, MetadataHash int64 (ShareGroupMetadata; the hash is written 0)    |
| 12   | group         | AssignmentEpoch int32 (ShareGroupTargetAssignmentMetadata)                     |
| 13   | group, member | TopicPartitions [TopicId, Partitions int32[]] (ShareGroupTargetAssignmentMember)|
| 14   | group, member | MemberEpoch, PreviousMemberEpoch int32, State int8, AssignedPartitions         |
|      |               | [TopicId, Partitions int32[]] (ShareGroupCurrentMemberAssignment)              |

Keys are non-flexible (the int16 type, then int16-length strings), values an int16 version 0 and the flexible
fields, as the consumer-group records (consumer_records.py, whose primitives these use). Type 15
(ShareGroupStatePartitionMetadata, which share-partitions have state) is not written: this broker keeps that
in __share_group_state alone; it is skipped on read.

`records_of` gives the records describing a group now; the coordinator writes what differs from what it wrote
last (tombstones for what went), so a log replays to the same groups (`restore`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kop.coordinator.consumer_records import (
    Partitions,
    _done,
    _partitions,
    _read_partitions,
    _read_strings,
    _reader,
    _start,
    _strings,
)
from kop.coordinator.records import RecordError, _Reader, _Writer
from kop.coordinator.share.groups import ShareGroup, ShareMember

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 10, 11, 12, 13, 14
STATE_PARTITION_METADATA = 15
TYPES = (MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
         STATE_PARTITION_METADATA)
_WITH_MEMBER = {MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT}
STABLE = 0  # Kafka's MemberState.STABLE


@dataclass(frozen=True, slots=True)
class ShareKey:
    type: int
    group: str
    member: str | None = None


def encode_key(key: ShareKey) -> bytes:
    w = _Writer(False)
    w.int16(key.type)
    w.string(key.group)
    if key.type in _WITH_MEMBER:
        w.string(key.member or "")
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> ShareKey:
    r = _Reader(data, 0, False)
    kind = r.int16()
    if kind not in TYPES:
        raise RecordError(f"{kind} is not a share group record type")
    group = r.string()
    member = r.string() if kind in _WITH_MEMBER else None
    return ShareKey(kind, group, member)


def _epoch_value(epoch: int, with_hash: bool) -> bytes:
    w = _start()
    w.int32(epoch)
    if with_hash:
        w.int64(0)
    return _done(w)


def _member_metadata(m: ShareMember) -> bytes:
    w = _start()
    w.string(m.rack_id)
    w.string(m.client_id)
    w.string(m.client_host)
    _strings(w, sorted(m.subscribed))
    return _done(w)


def _assigned(parts: Partitions) -> bytes:
    w = _start()
    _partitions(w, parts)
    return _done(w)


def _current(m: ShareMember) -> bytes:
    w = _start()
    w.int32(m.member_epoch)
    w.int32(m.member_epoch)
    w.out += bytes([STABLE])
    _partitions(w, m.assigned)
    return _done(w)


def records_of(group: ShareGroup) -> dict[bytes, bytes]:
    """The records (raw key -> value) that describe `group` as it is: members first, then the group's."""
    out: dict[bytes, bytes] = {}
    for m in group.members.values():
        out[encode_key(ShareKey(MEMBER_METADATA, group.group_id, m.member_id))] = _member_metadata(m)
        out[encode_key(ShareKey(TARGET_MEMBER, group.group_id, m.member_id))] = _assigned(m.assigned)
        out[encode_key(ShareKey(CURRENT_ASSIGNMENT, group.group_id, m.member_id))] = _current(m)
    out[encode_key(ShareKey(GROUP_METADATA, group.group_id))] = _epoch_value(group.group_epoch, True)
    out[encode_key(ShareKey(TARGET_METADATA, group.group_id))] = _epoch_value(group.assignment_epoch, False)
    return out


def restore(records: dict[bytes, bytes], deadline: int) -> dict[str, ShareGroup]:
    """The share groups a replayed log describes (raw key -> the last value, tombstones already applied); each
    member's session runs from `deadline` (Kafka starts its timers again on load)."""
    groups: dict[str, ShareGroup] = {}
    current: dict[tuple[str, str], tuple[int, Partitions]] = {}
    for raw, value in records.items():
        key = decode_key(raw)
        group = groups.setdefault(key.group, ShareGroup(key.group))
        r = _reader(value)
        if key.type == GROUP_METADATA:
            group.group_epoch = r.int32()
        elif key.type == TARGET_METADATA:
            group.assignment_epoch = r.int32()
        elif key.type == MEMBER_METADATA and key.member is not None:
            rack, client, host = r.string(nullable=True), r.string(), r.string()
            group.members[key.member] = ShareMember(key.member, 0, frozenset(_read_strings(r)), client, host, rack,
                                                    deadline)
        elif key.type == CURRENT_ASSIGNMENT and key.member is not None:
            epoch, _previous, _state = r.int32(), r.int32(), r._take(1)
            current[(key.group, key.member)] = (epoch, _read_partitions(r))
    for (gid, mid), (epoch, assigned) in current.items():
        member = groups[gid].members.get(mid)
        if member is not None:
            member.member_epoch, member.assigned, member.sent = epoch, assigned, assigned
    return groups
