"""The share coordinator's records in `__share_group_state`, in Apache Kafka 4.x's formats (its share-coordinator
ShareSnapshotKey/Value and ShareUpdateKey/Value, record types 0 and 1), so Kafka's own formatters read them.

key   = int16 record type (0 snapshot, 1 update) + GroupId (int16-length string) + TopicId (16 bytes) +
        Partition (int32): not flexible;
value = int16 version 0 + the flexible value: a snapshot's SnapshotEpoch, StateEpoch, LeaderEpoch (int32),
        StartOffset, CreateTimestamp, WriteTimestamp (int64) and StateBatches (compact array of FirstOffset,
        LastOffset int64, DeliveryState int8, DeliveryCount int16, tagged fields); an update has no StateEpoch
        nor timestamps. Both end with tagged fields (tag 0, DeliveryCompleteCount, is not written).
This broker writes snapshots only (each one the whole state of its share-partition); updates are read too,
applied on top of the snapshot before them as Kafka does, so a log Kafka wrote replays here.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass

SNAPSHOT, UPDATE = 0, 1
StateBatch = tuple[int, int, int, int]  # (first offset, last offset, delivery state, delivery count)

_KEY_HEAD = struct.Struct(">hh")
_KEY_TAIL = struct.Struct(">16si")
_SNAPSHOT_HEAD = struct.Struct(">hiiiqqq")
_UPDATE_HEAD = struct.Struct(">hiiq")
_BATCH = struct.Struct(">qqbh")


@dataclass(frozen=True, slots=True)
class ShareState:
    """A share-partition's durable state (ACQUIRED records are kept as AVAILABLE, as Kafka persists them)."""
    start_offset: int
    batches: tuple[StateBatch, ...]
    snapshot_epoch: int = 0
    state_epoch: int = 0  # bumped by InitializeShareGroupState (an offset reset): fences older leaders' writes
    leader_epoch: int = 0  # the share-partition leader's epoch of the last read or write: fences older leaders

    def delivery_complete_count(self) -> int:
        """The records of the in-flight window that are done (ACKNOWLEDGED or ARCHIVED): what Kafka's
        ReadShareGroupStateSummary v1 answers, so the lag is high watermark - start offset - this."""
        return sum(last - first + 1 for first, last, state, _ in self.batches if state in (2, 4))


def coordinator_key(group_id: str, topic_id: bytes, partition: int) -> str:
    """Kafka's SharePartitionKey.asCoordinatorKey (group:topicId:partition, the id as Uuid.toString): what
    picks the __share_group_state partition."""
    return f"{group_id}:{base64.urlsafe_b64encode(topic_id).rstrip(b'=').decode()}:{partition}"


def encode_key(kind: int, group_id: str, topic_id: bytes, partition: int) -> bytes:
    gid = group_id.encode()
    return _KEY_HEAD.pack(kind, len(gid)) + gid + _KEY_TAIL.pack(topic_id, partition)


def decode_key(raw: bytes) -> tuple[int, str, bytes, int]:
    kind, n = _KEY_HEAD.unpack_from(raw)
    gid = raw[4:4 + n].decode()
    topic_id, partition = _KEY_TAIL.unpack_from(raw, 4 + n)
    return kind, gid, topic_id, partition


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_uvarint(raw: bytes, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = raw[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _batches(batches: tuple[StateBatch, ...]) -> bytes:
    return _uvarint(len(batches) + 1) + b"".join(_BATCH.pack(*b) + b"\x00" for b in batches)


def encode_snapshot(state: ShareState, now_ms: int) -> bytes:
    return (_SNAPSHOT_HEAD.pack(0, state.snapshot_epoch, state.state_epoch, state.leader_epoch, state.start_offset,
                                now_ms, now_ms)
            + _batches(state.batches) + b"\x00")


def _read_batches(raw: bytes, pos: int) -> tuple[StateBatch, ...]:
    n, pos = _read_uvarint(raw, pos)
    out = []
    for _ in range(max(n - 1, 0)):
        out.append(_BATCH.unpack_from(raw, pos))
        pos += _BATCH.size
        tags, pos = _read_uvarint(raw, pos)
        for _ in range(tags):  # skip unknown tagged fields of a batch
            _, pos = _read_uvarint(raw, pos)
            size, pos = _read_uvarint(raw, pos)
            pos += size
    return tuple(out)


def decode_value(kind: int, raw: bytes) -> ShareState:
    """A snapshot's or an update's state (an update's batches apply over the snapshot: `apply_update`)."""
    if kind == SNAPSHOT:
        _, epoch, state_epoch, leader_epoch, start, _, _ = _SNAPSHOT_HEAD.unpack_from(raw)
        return ShareState(start, _read_batches(raw, _SNAPSHOT_HEAD.size), epoch, state_epoch, leader_epoch)
    _, epoch, leader_epoch, start = _UPDATE_HEAD.unpack_from(raw)
    return ShareState(start, _read_batches(raw, _UPDATE_HEAD.size), epoch, leader_epoch=leader_epoch)


def apply_update(base: ShareState, update: ShareState) -> ShareState:
    """Kafka's combining of a ShareUpdate with the state before it: a new start offset (-1: unchanged) drops
    the batches below it; the update's batches replace the offsets they cover."""
    start = base.start_offset if update.start_offset < 0 else update.start_offset
    per: dict[int, tuple[int, int]] = {}
    for first, last, state, count in (*base.batches, *update.batches):
        for off in range(max(first, start), last + 1):
            per[off] = (state, count)
    out: list[StateBatch] = []
    for off in sorted(per):
        state, count = per[off]
        if out and out[-1][1] == off - 1 and out[-1][2:] == (state, count):
            out[-1] = (out[-1][0], off, state, count)
        else:
            out.append((off, off, state, count))
    return ShareState(start, tuple(out), update.snapshot_epoch, base.state_epoch, update.leader_epoch)
