"""Durable share-group membership (kop/coordinator/share/group_records.py and the share coordinator's diff),
sans-IO: Kafka 4.4's ShareGroup* record layouts, what a change writes (changed records, then tombstones in
Kafka's order), and a replay giving back the same groups with their epochs. On a broker killed with -9, on ours
and on Apache Kafka 4.4: tests/e2e/test_share_groups.py::test_share_partition_state_survives_a_kill."""

from __future__ import annotations

import asyncio
import struct

from kop.coordinator.share import group_records as grec
from kop.coordinator.share.coordinator import ShareCoordinator
from kop.coordinator.share.groups import ShareHeartbeat

T1 = b"\x01" * 16
TOPICS = {"a": (T1, 2)}


def hb(member: str, epoch: int, topics: list[str] | None = None) -> ShareHeartbeat:
    return ShareHeartbeat("g", member, epoch, "rack1", topics, "client-" + member, "/127.0.0.1")


def _replay(log: dict[bytes, bytes], changes: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in changes:
        if value is None:
            log.pop(key, None)
        else:
            log[key] = value


def _written(share: ShareCoordinator, changes: list[tuple[bytes, bytes | None]]) -> None:
    """What the coordinator remembers after a successful write (as _write_groups does)."""
    _replay(share._written.setdefault("g", {}), changes)


def test_keys_and_values_are_kafkas_layouts() -> None:
    asyncio.run(_layouts())  # the coordinator's heartbeat arms its timer on the running loop


async def _layouts() -> None:
    assert grec.encode_key(grec.ShareKey(grec.GROUP_METADATA, "g")) == b"\x00\x0b\x00\x01g"
    assert grec.encode_key(grec.ShareKey(grec.MEMBER_METADATA, "g", "m")) == b"\x00\x0a\x00\x01g\x00\x01m"
    assert grec.decode_key(b"\x00\x0e\x00\x01g\x00\x01m") == grec.ShareKey(grec.CURRENT_ASSIGNMENT, "g", "m")
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=lambda: 0.0)
    share.heartbeat(hb("m", 0, ["a"]))
    records = dict(share._group_changes("g"))
    epoch = share.groups.groups["g"].group_epoch
    # ShareGroupMetadataValue v0: Epoch int32, MetadataHash int64, no tagged fields
    assert records[b"\x00\x0b\x00\x01g"] == struct.pack(">hiq", 0, epoch, 0) + b"\x00"
    # ShareGroupCurrentMemberAssignmentValue v0: epochs, State 0 (STABLE), [TopicId, [0, 1]]
    assert records[b"\x00\x0e\x00\x01g\x00\x01m"] == (struct.pack(">hiib", 0, epoch, epoch, 0) + b"\x02" + T1
                                                      + b"\x03" + struct.pack(">ii", 0, 1) + b"\x00\x00")
    # ShareGroupMemberMetadataValue v0: RackId, ClientId, ClientHost, SubscribedTopicNames
    assert records[b"\x00\x0a\x00\x01g\x00\x01m"] == (b"\x00\x00\x06rack1\x09client-m\x0b/127.0.0.1\x02\x02a"
                                                      + b"\x00")


def test_a_replay_gives_back_the_groups_and_changes_write_only_the_difference() -> None:
    asyncio.run(_replay_and_changes())


async def _replay_and_changes() -> None:
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=lambda: 0.0)
    log: dict[bytes, bytes] = {}
    for member in ("m1", "m2"):
        share.heartbeat(hb(member, 0, ["a"]))
    changes = share._group_changes("g")
    _replay(log, changes)
    _written(share, changes)
    assert share._group_changes("g") == []  # nothing changed since: nothing to write
    m1 = share.groups.groups["g"].members["m1"]
    share.heartbeat(hb("m1", m1.member_epoch))  # m1 catches up with the group epoch: its assignment record
    changes = share._group_changes("g")
    assert [grec.decode_key(k).type for k, _ in changes] == [grec.CURRENT_ASSIGNMENT]
    _replay(log, changes)
    _written(share, changes)

    restored = grec.restore(log, deadline=99)["g"]
    group = share.groups.groups["g"]
    assert (restored.group_epoch, restored.assignment_epoch) == (group.group_epoch, group.assignment_epoch)
    assert {m.member_id: (m.member_epoch, m.subscribed, m.assigned, m.client_id, m.rack_id, m.deadline)
            for m in restored.members.values()} == {
        m.member_id: (m.member_epoch, m.subscribed, m.assigned, m.client_id, m.rack_id, 99)
        for m in group.members.values()}

    # A member leaves: the group epoch moves and its records are tombstoned (current assignment, target,
    # metadata); the other member's records change at its next heartbeat.
    share.heartbeat(hb("m2", -1))
    changes = share._group_changes("g")
    assert [(grec.decode_key(k).type, v is None) for k, v in changes] == [
        (grec.GROUP_METADATA, False), (grec.TARGET_METADATA, False),
        (grec.CURRENT_ASSIGNMENT, True), (grec.TARGET_MEMBER, True), (grec.MEMBER_METADATA, True)]
    _written(share, changes)
    # The group deleted once empty: every record tombstoned, the group epoch last.
    share.heartbeat(hb("m1", -1))
    _written(share, share._group_changes("g"))
    assert share.delete_group("g") == 0
    changes = share._group_changes("g")
    assert [(grec.decode_key(k).type, v) for k, v in changes][-2:] == [
        (grec.TARGET_METADATA, None), (grec.GROUP_METADATA, None)]
    _written(share, changes)
    assert share._written["g"] == {}
