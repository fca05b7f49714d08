"""The group coordinator serving KIP-848 consumer groups: its async shell around the consumer group machine,
in an in-process broker on real embedded storage (tests/test_coordinator_durability.py's harness).

* the offsets APIs follow Kafka's rules for consumer groups: OffsetCommit carries the member epoch
  (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, UNSUPPORTED_VERSION below v9, admin commits only to an empty
  group), OffsetFetch v9 checks a member's epoch, OffsetDelete refuses subscribed topics;
* ListGroups filters by type, DescribeGroups shows a consumer group as Dead, DeleteGroups refuses a group
  with members and tombstones an empty one, a JoinGroup of another protocol type meets
  INCONSISTENT_GROUP_PROTOCOL while it has members (a consumer-protocol one joins it: see
  test_coordinator_consumer_group_migration) and replaces it once it is empty;
* a restarted broker replays the group's records: members, epochs, assignments and offsets are back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kop.coordinator.consumer_group import HeartbeatRequest
from kop.coordinator.coordinator import JoinRequest
from kop.protocol.errors import ErrorCode as E
from tests.test_coordinator_durability import start_broker

GROUP = "cg"
TOPIC = "t"


def join(member: str, epoch: int = 0, **kw: object) -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, member, epoch, rebalance_timeout_ms=30000, subscribed_topic_names=[TOPIC],
                            topic_partitions={}, **kw)  # type: ignore[arg-type]


def test_offsets_and_admin_apis_for_a_consumer_group(tmp_path: Path) -> None:
    async def run() -> None:
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 2)
            r = await c.consumer_group_heartbeat(join("m1"))
            assert r.error == 0 and r.member_epoch == 2 and sum(len(p) for p in r.assignment.values()) == 2
            commit = [(TOPIC, 0, 5, -1, None)]
            assert await c.commit_offsets(GROUP, 2, "m1", None, -1, 9, commit) == {(TOPIC, 0): 0}
            assert await c.commit_offsets(GROUP, 0, "m1", None, -1, 9, commit) == {(TOPIC, 0): E.STALE_MEMBER_EPOCH}
            assert await c.commit_offsets(GROUP, 2, "m1", None, -1, 8, commit) == {(TOPIC, 0): E.UNSUPPORTED_VERSION}
            assert await c.commit_offsets(GROUP, 2, "zz", None, -1, 9, commit) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
            # an admin commit (epoch -1, no member) is refused while the group has members
            assert await c.commit_offsets(GROUP, -1, "", None, -1, 9, commit) == {(TOPIC, 0): E.UNKNOWN_MEMBER_ID}
            assert c.fetch_offsets(GROUP, [(TOPIC, [0])], "m1", 2) == (0, [(TOPIC, 0, 5, -1, "", 0)])
            assert c.fetch_offsets(GROUP, [(TOPIC, [0])], "m1", 8)[0] == E.STALE_MEMBER_EPOCH
            assert c.fetch_offsets(GROUP, [(TOPIC, [0])], "zz", 2)[0] == E.UNKNOWN_MEMBER_ID
            assert c.fetch_offsets(GROUP, [(TOPIC, [0])])[1] == [(TOPIC, 0, 5, -1, "", 0)]  # admin
            assert await c.delete_offsets(GROUP, [(TOPIC, [0])]) == (0, {(TOPIC, 0): E.GROUP_SUBSCRIBED_TO_TOPIC})

            assert [(g.group_id, g.group_type, g.state) for g in c.list_groups(types=["consumer"])[1]] == [
                (GROUP, "consumer", "Stable")]
            assert c.list_groups(types=["classic"])[1] == []
            assert c.describe_group(GROUP).state == "Dead" and not c.describe_group(GROUP).found
            assert await c.delete_groups([GROUP]) == {GROUP: E.NON_EMPTY_GROUP}
            # a classic member of another protocol type cannot join; a consumer one is served inside the group
            other = JoinRequest(GROUP, "", None, "connect", [("range", b"")], 10000, 10000, "c", "/h", 9)
            assert (await c.join_group(other)).error == E.INCONSISTENT_GROUP_PROTOCOL
            classic_join = JoinRequest(GROUP, "", None, "consumer", [("range", b"")], 10000, 10000, "c", "/h", 9)
            assert (await c.join_group(classic_join)).error == E.MEMBER_ID_REQUIRED

            left = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", -1))
            assert left.error == 0 and left.member_epoch == -1
            assert await c.commit_offsets(GROUP, -1, "", None, -1, 9, [(TOPIC, 1, 7, -1, None)]) == {(TOPIC, 1): 0}
            assert c.list_groups(types=["consumer"])[1][0].state == "Empty"
            assert await c.delete_groups([GROUP]) == {GROUP: 0}
            assert c.list_groups()[1] == [] and c.fetch_offsets(GROUP, None) == (0, [])
        finally:
            await svc.stop()

    asyncio.run(run())


def test_commits_with_an_older_member_epoch_for_partitions_held_then(tmp_path: Path) -> None:
    """OffsetCommit and TxnOffsetCommit through the coordinator (topic names resolved to the ids the member's
    assignment holds): m1 kept partition `kept` since epoch 2 and moved to epoch 3 when m2 joined; a commit
    m1 sent with epoch 2 is accepted for `kept` (KIP-1251, Kafka 4.4) and refused as a whole when it names
    m2's partition too; a partition refused for its metadata size is not checked, as in Kafka; a
    transactional commit refused so is ILLEGAL_GENERATION (TxnOffsetCommit v0-v4 know no STALE_MEMBER_EPOCH)."""
    async def run() -> None:
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 2)
            await c.consumer_group_heartbeat(join("m1"))
            assert (await c.consumer_group_heartbeat(join("m2"))).member_epoch == 3
            r = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", 2, topic_partitions={
                tid: frozenset({0, 1}) for tid in c.consumer_groups[GROUP].members["m1"].assigned}))
            [(tid, kept_set)] = r.assignment.items()
            [kept] = kept_set
            other = 1 - kept
            r = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", 2, topic_partitions=r.assignment))
            assert r.member_epoch == 3
            await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m2", 3, topic_partitions={}))
            assert await c.commit_offsets(GROUP, 2, "m1", None, -1, 9, [(TOPIC, kept, 5, -1, None)]) == {
                (TOPIC, kept): 0}
            both = [(TOPIC, kept, 6, -1, None), (TOPIC, other, 6, -1, None)]
            assert await c.commit_offsets(GROUP, 2, "m1", None, -1, 9, both) == {
                (TOPIC, kept): E.STALE_MEMBER_EPOCH, (TOPIC, other): E.STALE_MEMBER_EPOCH}
            too_large = [(TOPIC, kept, 7, -1, None), (TOPIC, other, 7, -1, "x" * 5000)]
            assert await c.commit_offsets(GROUP, 2, "m1", None, -1, 9, too_large) == {
                (TOPIC, kept): 0, (TOPIC, other): E.OFFSET_METADATA_TOO_LARGE}
            assert c.fetch_offsets(GROUP, [(TOPIC, [kept, other])]) == (0, [
                (TOPIC, kept, 7, -1, "", 0), (TOPIC, other, -1, -1, "", 0)])
            assert c.validate_txn_offset_commit(GROUP, 2, "m1", None, [(TOPIC, kept, 8, -1, None)]) == 0
            assert c.validate_txn_offset_commit(GROUP, 2, "m1", None, both) == E.ILLEGAL_GENERATION
            assert c.validate_txn_offset_commit(GROUP, 4, "m1", None, both[:1]) == E.ILLEGAL_GENERATION
        finally:
            await svc.stop()

    asyncio.run(run())


def test_join_group_replaces_an_empty_consumer_group(tmp_path: Path) -> None:
    async def run() -> None:
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 1)
            await c.consumer_group_heartbeat(join("m1"))
            await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", -1))
            req = JoinRequest(GROUP, "", None, "consumer", [("range", b"")], 10000, 10000, "c", "/h", 3)
            assert (await c.join_group(req)).error == 0
            assert GROUP not in c.consumer_groups and GROUP in c.groups
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        try:  # the consumer group's tombstones hold after a restart: only the classic group is back
            assert GROUP not in svc.coordinator.consumer_groups and GROUP in svc.coordinator.groups
        finally:
            await svc.stop()

    asyncio.run(run())


def test_restart_restores_members_epochs_and_assignments(tmp_path: Path) -> None:
    async def run() -> None:
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 4)
            await c.consumer_group_heartbeat(join("m1", instance_id="i1"))
            r2 = await c.consumer_group_heartbeat(join("m2", server_assignor="range"))
            r1 = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", 2, instance_id="i1"))
            assert r1.member_epoch == 2 and r2.member_epoch == 3  # m1 is asked to revoke two partitions
            before = c.consumer_groups[GROUP]
            await c.commit_offsets(GROUP, 3, "m2", None, -1, 9, [(TOPIC, 3, 11, -1, "m")])
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            after = c.consumer_groups[GROUP]
            assert after == before
            assert GROUP not in c.groups  # its offsets did not make a classic group of it
            assert c.fetch_offsets(GROUP, [(TOPIC, [3])], "m2", 3) == (0, [(TOPIC, 3, 11, -1, "m", 0)])
            # m1 goes on where it was: it acknowledges the revocation and reaches epoch 3
            kept = after.members["m1"].assigned
            r = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", 2, instance_id="i1",
                                                                  topic_partitions=kept))
            assert r.error == 0 and r.member_epoch == 3
        finally:
            await svc.stop()

    asyncio.run(run())


def test_offsets_of_a_consumer_group_expire_and_the_empty_group_goes(tmp_path: Path) -> None:
    """Kafka's rule for consumer groups: an offset of a topic nobody subscribes to expires
    offsetsRetentionMinutes after its commit; an Empty group left without offsets is deleted."""
    async def run() -> None:
        svc, _ = await start_broker(tmp_path, offsetsRetentionMinutes="1")
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 1)
            await c.consumer_group_heartbeat(join("m1"))
            await c.commit_offsets(GROUP, 1, "m1", None, -1, 9, [(TOPIC, 0, 3, -1, None)])
            later = c.clock() + 61
            c.clock = lambda: later
            assert await c.expire_offsets() == 0  # m1 still subscribes to the topic
            await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", -1))
            assert await c.expire_offsets() > 0
            assert GROUP not in c.consumer_groups and c.fetch_offsets(GROUP, None) == (0, [])
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        try:
            assert GROUP not in svc.coordinator.consumer_groups and GROUP not in svc.coordinator.offsets
        finally:
            await svc.stop()

    asyncio.run(run())


def test_restart_in_the_middle_of_a_migration_restores_the_converted_group(tmp_path: Path) -> None:
    """A classic group upgraded by a consumer-protocol member (KIP-848 online migration) is a consumer group
    with a classic member after a restart - its classic metadata (session timeout, protocols) replayed from
    record 5 - and the classic member goes on through Heartbeat/JoinGroup/SyncGroup; the consumer member's
    leave then turns it classic, which a second restart keeps."""
    from kop.coordinator import consumer_protocol as cproto

    sub = cproto.serialize_subscription(cproto.Subscription(1, (TOPIC,), None, {}))

    async def run() -> None:
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            await svc.topics.create(svc.topics.parse(TOPIC), 4)
            req = JoinRequest(GROUP, "", None, "consumer", [("range", sub)], 10000, 30000, "classic", "/h", 3)
            j = await c.join_group(req)
            everything = cproto.serialize_assignment({TOPIC: frozenset(range(4))}, 1)
            assert (await c.sync_group(GROUP, j.generation_id, j.member_id, None, None, None,
                                       [(j.member_id, everything)])).error == 0
            r = await c.consumer_group_heartbeat(join("m1"))
            assert r.error == 0 and r.member_epoch == j.generation_id + 1 and GROUP in c.consumer_groups
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            group = c.consumer_groups[GROUP]
            assert GROUP not in c.groups
            classic = group.members[j.member_id]
            assert classic.classic is not None and classic.classic.session_timeout_ms == 10000
            assert classic.classic.supported_protocols == (("range", sub),)
            assert sum(len(p) for p in classic.assigned.values()) == 4 and classic.member_epoch == j.generation_id
            assert c.heartbeat(GROUP, j.generation_id, j.member_id, None) == E.REBALANCE_IN_PROGRESS
            again = await c.join_group(JoinRequest(GROUP, j.member_id, None, "consumer", [("range", sub)], 10000,
                                                   30000, "classic", "/h", 3))
            assert again.error == 0 and again.generation_id == r.member_epoch and again.protocol_name == "range"
            s = await c.sync_group(GROUP, again.generation_id, j.member_id, None, "consumer", "range", [])
            assert s.error == 0 and len(cproto.parse_assignment(s.assignment).partitions[TOPIC]) == 2
            left = await c.consumer_group_heartbeat(HeartbeatRequest(GROUP, "m1", -1))
            assert left.error == 0 and GROUP not in c.consumer_groups and GROUP in c.groups
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        c = svc.coordinator
        try:
            assert GROUP not in c.consumer_groups
            g = c.groups[GROUP]
            assert list(g.members) == [j.member_id] and g.generation_id == r.member_epoch
            assert c.describe_group(GROUP).protocol_type == "consumer"
        finally:
            await svc.stop()

    asyncio.run(run())
