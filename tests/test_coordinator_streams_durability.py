"""A streams group survives a broker restart: its records (Kafka 4.4's types 17, 19-23, written before each
heartbeat is answered) are replayed when __consumer_offsets is loaded again. An in-process broker over a data
directory (tests/test_coordinator_durability.py's), driven through the coordinator's own heartbeat entry point."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kop.coordinator.streams.group import MemberState, StreamsHeartbeat
from kop.coordinator.streams.topology import Subtopology, TopicInfo, Topology
from kop.protocol.errors import ErrorCode as E
from tests.test_coordinator_durability import start_broker

TOPOLOGY = Topology(0, (
    Subtopology("0", ("in",), repartition_sink_topics=("app-r-repartition",)),
    Subtopology("1", ("app-r-repartition",), state_changelog_topics=(TopicInfo("app-s-changelog", 0, 0),),
                repartition_source_topics=(TopicInfo("app-r-repartition", 0, 0),)),
))


def _join(member: str) -> StreamsHeartbeat:
    return StreamsHeartbeat("app", member, 0, rebalance_timeout_ms=30000, topology=TOPOLOGY,
                            active_tasks=frozenset(), process_id=f"p-{member}")


def test_a_streams_group_is_replayed_after_a_restart(tmp_path: Path) -> None:
    async def main() -> None:
        svc, _ = await start_broker(tmp_path, groupStreamsInitialRebalanceDelayMs="0")
        try:
            await svc.topics.create(svc.topics.parse("in"), 2)
            first = await svc.coordinator.streams_group_heartbeat(_join("a"))
            assert first.error == 0 and set(first.to_create) == {"app-r-repartition", "app-s-changelog"}
            for name in first.to_create:  # created in the background: wait until both exist
                for _ in range(400):
                    if svc.topics.get(svc.topics.parse(name)) is not None:
                        break
                    await asyncio.sleep(0.05)
                assert svc.topics.get(svc.topics.parse(name)) is not None, name
            a = await svc.coordinator.streams_group_heartbeat(StreamsHeartbeat("app", "a", first.member_epoch))
            assert a.error == 0 and len(a.active_tasks or ()) == 4
            b = await svc.coordinator.streams_group_heartbeat(_join("b"))
            told = await svc.coordinator.streams_group_heartbeat(StreamsHeartbeat("app", "a", a.member_epoch))
            assert len(told.active_tasks or ()) == 2  # a must revoke two tasks for b
            before = svc.coordinator.streams_groups["app"]
            state = {m: (x.member_epoch, x.state, x.assigned, x.revoking) for m, x in before.members.items()}
            epochs = (before.group_epoch, before.assignment_epoch)
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        try:
            after = svc.coordinator.streams_groups["app"]
            assert {m: (x.member_epoch, x.state, x.assigned, x.revoking) for m, x in after.members.items()} == state
            assert (after.group_epoch, after.assignment_epoch, after.topology) == (*epochs, TOPOLOGY)
            assert after.members["a"].state == MemberState.UNREVOKED_TASKS
            # the members go on where they were: a revokes, then b gets the two tasks
            done = await svc.coordinator.streams_group_heartbeat(StreamsHeartbeat(
                "app", "a", a.member_epoch, active_tasks=told.active_tasks))
            assert done.error == 0 and done.member_epoch == after.assignment_epoch
            got = await svc.coordinator.streams_group_heartbeat(StreamsHeartbeat("app", "b", b.member_epoch))
            assert got.error == 0 and len(got.active_tasks or ()) == 2
            assert (await svc.coordinator.streams_group_heartbeat(StreamsHeartbeat("app", "zz", 3))).error \
                == E.UNKNOWN_MEMBER_ID
            assert "app" not in svc.coordinator.groups  # its offsets' simple group does not shadow it
            # commits carry the streams member epoch (OffsetCommit v9+), as a consumer group's
            c = svc.coordinator
            ok = await c.commit_offsets("app", done.member_epoch, "a", None, -1, 9, [("in", 0, 5, -1, "")])
            stale = await c.commit_offsets("app", done.member_epoch + 1, "a", None, -1, 9, [("in", 1, 5, -1, "")])
            assert (ok, stale) == ({("in", 0): 0}, {("in", 1): E.STALE_MEMBER_EPOCH})
            assert c.fetch_offsets("app", [("in", [0])], "a", done.member_epoch)[1][0][2] == 5
            assert c.fetch_offsets("app", [("in", [0])], "zz", 1)[0] == E.UNKNOWN_MEMBER_ID
            assert c.validate_txn_offset_commit("app", done.member_epoch + 1, "a", None) == E.ILLEGAL_GENERATION
        finally:
            await svc.stop()

    asyncio.run(main())


def test_offsets_of_a_streams_group_expire_and_delete_as_a_consumer_groups(tmp_path: Path) -> None:
    """Offsets of topics the group does not read expire offsets.retention after their commit (and may be deleted
    with OffsetDelete); a group without members whose offsets are all gone is deleted, its records tombstoned, so
    a restart does not bring it back."""
    now = [1_000_000_000.0]

    async def main() -> None:
        svc, _ = await start_broker(tmp_path, offsetsRetentionMinutes="1", groupStreamsInitialRebalanceDelayMs="0")
        c = svc.coordinator
        c.clock = lambda: now[0]
        try:
            for name in ("in", "app-r-repartition", "app-s-changelog"):
                await svc.topics.create(svc.topics.parse(name), 2)
            a = await c.streams_group_heartbeat(_join("a"))
            assert a.error == 0 and a.active_tasks
            commits = [("in", 0, 5, -1, ""), ("other", 0, 3, -1, ""), ("other", 1, 4, -1, "")]
            assert set((await c.commit_offsets("app", a.member_epoch, "a", None, -1, 9, commits)).values()) == {0}
            assert await c.delete_offsets("app", [("in", [0]), ("other", [1])]) == (
                0, {("in", 0): E.GROUP_SUBSCRIBED_TO_TOPIC, ("other", 1): 0})
            now[0] += 61
            assert await c.expire_offsets() == 1  # the offset of "other" the group does not read
            assert c.fetch_offsets("app", [("in", [0])])[1][0][2] == 5
            left = await c.streams_group_heartbeat(StreamsHeartbeat("app", "a", -1))
            assert left.error == 0 and [g.state for g in c.list_groups(types=["streams"])[1]] == ["Empty"]
            assert await c.expire_offsets() > 1  # the offset of "in" and the group's records
            assert c.list_groups()[1] == [] and "app" not in c.streams_groups
        finally:
            await svc.stop()
        svc, _ = await start_broker(tmp_path)
        try:
            assert "app" not in svc.coordinator.streams_groups and svc.coordinator.list_groups()[1] == []
        finally:
            await svc.stop()

    asyncio.run(main())
