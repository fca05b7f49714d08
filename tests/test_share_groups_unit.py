"""Share-group membership (kop/coordinator/share/groups.py) and share sessions, coordinator-side leave and lock
expiry (kop/coordinator/share/coordinator.py), sans-IO: a fake clock and a fixed topic metadata."""

from __future__ import annotations

from kop.coordinator.share.coordinator import ShareCoordinator
from kop.coordinator.share.groups import ShareGroups, ShareHeartbeat
from kop.coordinator.share.partition import Acquired, RecordState
from kop.protocol.errors import ErrorCode

T1, T2 = b"\x01" * 16, b"\x02" * 16
TOPICS = {"a": (T1, 3), "b": (T2, 1)}


def hb(member: str, epoch: int, topics: list[str] | None = None) -> ShareHeartbeat:
    return ShareHeartbeat("g", member, epoch, None, topics, "client", "/127.0.0.1")


def test_every_member_gets_every_partition_of_its_topics_and_epochs_move() -> None:
    groups = ShareGroups(lambda: TOPICS, session_timeout_ms=45_000, heartbeat_interval_ms=5000)
    r1 = groups.heartbeat(hb("m1", 0, ["a"]), now=0)
    assert r1.error == 0 and r1.member_epoch == 2  # joined (1), subscribed (2)
    assert r1.assignment == {T1: frozenset({0, 1, 2})}
    r2 = groups.heartbeat(hb("m2", 0, ["a", "b"]), now=0)
    assert r2.assignment == {T1: frozenset({0, 1, 2}), T2: frozenset({0})} and r2.member_epoch == 4
    # m1's next heartbeat moves it to the group epoch; its assignment did not change, so it is not resent.
    again = groups.heartbeat(hb("m1", 2), now=1)
    assert again.member_epoch == 4 and again.assignment is None
    assert groups.groups["g"].state == "Stable"


def test_fencing_unknown_members_leaving_and_session_expiry() -> None:
    groups = ShareGroups(lambda: TOPICS, session_timeout_ms=100, heartbeat_interval_ms=10)
    assert groups.heartbeat(hb("m1", 0), now=0).error == ErrorCode.INVALID_REQUEST  # no subscription
    assert groups.heartbeat(hb("", 0, ["a"]), now=0).error == ErrorCode.INVALID_REQUEST
    epoch = groups.heartbeat(hb("m1", 0, ["a"]), now=0).member_epoch
    assert groups.heartbeat(hb("m1", epoch + 5), now=0).error == ErrorCode.FENCED_MEMBER_EPOCH
    assert groups.heartbeat(hb("nobody", 3), now=0).error == ErrorCode.UNKNOWN_MEMBER_ID
    groups.heartbeat(hb("m2", 0, ["a"]), now=50)
    assert groups.heartbeat(hb("m2", -1), now=60).member_epoch == -1
    assert groups.take_left() == [("g", "m2")]
    assert groups.next_deadline() == 100
    groups.expire(100)
    assert groups.take_left() == [("g", "m1")] and groups.groups["g"].state == "Empty"


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_sessions_epochs_and_a_leaving_member_releases_its_records() -> None:
    clock = Clock()
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=clock)
    assert share.open_session("g", "m1", 1) == (ErrorCode.SHARE_SESSION_NOT_FOUND, None)
    err, session = share.open_session("g", "m1", 0)
    assert err == 0 and session is not None and session.next_epoch == 1
    assert share.open_session("g", "m1", 2)[0] == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert share.open_session("g", "m1", 1)[0] == 0 and share.open_session("g", "m1", 2)[0] == 0
    share.set_config("g", "share.auto.offset.reset", "earliest")
    sp = share.share_partition(("g", T1, 0), log_start=0, high_watermark=10)
    assert sp.start_offset == 0  # earliest; "latest" (the default) starts at the high watermark
    assert share.share_partition(("h", T1, 0), log_start=0, high_watermark=10).start_offset == 10
    assert sp.acquire("m1", [(0, 4)], 10, share.now()) == [Acquired(0, 4, 1)]
    share.close_session("g", "m1")  # its last request: what it holds is released
    assert sp.state(0) == (RecordState.AVAILABLE, 1) and ("g", "m1") not in share.sessions


def test_lock_time_out_through_the_coordinator_clock() -> None:
    clock = Clock()
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=clock)
    share.set_config("g", "share.record.lock.duration.ms", "15000")
    sp = share.share_partition(("g", T1, 0), log_start=0, high_watermark=0)
    sp.acquire("m1", [(0, 0)], 10, share.now())
    clock.t = 14.999
    sp.expire_locks(share.now())
    assert sp.state(0) == (RecordState.ACQUIRED, 1)
    clock.t = 15.0
    sp.expire_locks(share.now())
    assert sp.state(0) == (RecordState.AVAILABLE, 1)


def test_group_configs_are_validated_with_kafkas_bounds() -> None:
    import pytest

    from kop.kafka.apis import group_configs
    from kop.kafka.apis.configs_common import ConfigRequestError

    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000)
    bad = [("share.auto.offset.reset", "newest"), ("share.record.lock.duration.ms", "1000"),
           ("share.delivery.count.limit", "11"), ("share.isolation.level", "x"), ("consumer.session.timeout.ms", "1")]
    for name, value in bad:
        with pytest.raises(ConfigRequestError) as e:
            group_configs.alter(share, "g", [(name, group_configs.SET, value)], validate_only=False)
        assert e.value.error == ErrorCode.INVALID_CONFIG
    assert share.configs.get("g", {}) == {}
    group_configs.alter(share, "g", [("share.delivery.count.limit", group_configs.SET, "2")], validate_only=True)
    assert share.config("g", "share.delivery.count.limit") == "5"
    group_configs.alter(share, "g", [("share.delivery.count.limit", group_configs.SET, "2")], validate_only=False)
    sp = share.share_partition(("g", T1, 0), 0, 0)
    assert sp.delivery_limit == 2
    assert ("share.delivery.count.limit", "2", group_configs.SOURCE_GROUP, group_configs.TYPE_INT) in \
        group_configs.describe(share, "g")
    group_configs.alter(share, "g", [("share.delivery.count.limit", group_configs.DELETE, None)], validate_only=False)
    assert sp.delivery_limit == 5


def test_delete_share_group_state() -> None:
    """(AlterShareGroupOffsets goes through the share coordinator's InitializeShareGroupState:
    tests/test_share_state_rpcs.py and the e2e tests.)"""
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000)
    share.share_partition(("g", T1, 0), 0, 10)
    assert share.knows("g") and not share.knows("h")
    share.delete_state("g", {T2})
    assert ("g", T1, 0) in share.partitions
    assert share.delete_group("g") == 0 and not share.knows("g")


def test_a_closed_connection_ends_its_sessions_and_releases_their_records() -> None:
    share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=Clock())
    conn_a, conn_b = object(), object()
    share.open_session("g", "a", 0, conn_a)
    share.open_session("g", "b", 0, conn_b)
    sp = share.share_partition(("g", T1, 0), 0, 0)
    sp.acquire("a", [(0, 1)], 10, 0)
    sp.acquire("b", [(2, 2)], 10, 0)
    share.connection_closed(conn_a)
    assert ("g", "a") not in share.sessions and ("g", "b") in share.sessions
    assert sp.state(0) == (RecordState.AVAILABLE, 1) and sp.state(2) == (RecordState.ACQUIRED, 1)


def test_cluster_bundle_moves_forget_share_partitions_and_groups_which_come_back_from_their_records() -> None:
    """Cluster mode (ShareCoordinator.bundle_moved / restore_group): a released bundle's share-partitions are
    forgotten (their next leader reads their durable state), as are the groups whose __consumer_offsets partition
    this broker no longer serves; a group taken over is restored from its records with its members and epochs."""
    import asyncio

    from kop.coordinator.share import group_records as grec
    from kop.topics.names import TopicName

    async def run() -> None:
        share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=Clock())
        epoch = share.heartbeat(hb("m1", 0, ["a"])).member_epoch
        records = grec.records_of(share.groups.groups["g"])
        for p in (0, 1):
            share.share_partition(("g", T1, p), log_start=0, high_watermark=0)
        share.share_partition(("g", T2, 0), log_start=0, high_watermark=0)
        names = {T1: TopicName("public", "default", "a")}  # T2: deleted meanwhile, no name

        share.bundle_moved(True, lambda name, p: True, names.get, lambda gid: False)  # acquired: nothing forgotten
        assert len(share.partitions) == 3 and "g" in share.groups.groups
        share.bundle_moved(False, lambda name, p: name.local == "a" and p == 0, names.get, lambda gid: True)
        assert set(share.partitions) == {("g", T1, 1)} and "g" in share.groups.groups  # still its coordinator
        share.bundle_moved(False, lambda name, p: False, names.get, lambda gid: False)
        assert "g" not in share.groups.groups  # its __consumer_offsets partition went with another bundle

        share.restore_group("g", records)  # this broker coordinates it again (the first heartbeat restores it)
        again = share.heartbeat(hb("m1", epoch))
        assert (again.error, again.member_epoch) == (0, epoch)
        share.stop()

    asyncio.run(run())


def test_a_flush_whose_request_is_cancelled_still_writes_every_change_it_took() -> None:
    """A ShareAcknowledge (or ShareFetch, heartbeat) awaits the flush of the state it changed; its connection closing
    cancels it. The flush has taken the changed share-partitions: cancelled while writing the first, it would never
    write the others (no later flush knows of them) - their acknowledgements lost at the next leader or restart."""
    import asyncio
    from typing import Any, cast

    from kop.coordinator.share.store import ShareStateStore

    class Store:
        def __init__(self) -> None:
            self.states: dict[Any, Any] = {}  # nothing durable yet
            self.written: list[Any] = []
            self.gate, self.entered = asyncio.Event(), asyncio.Event()

        async def write(self, key: Any, state: Any, now_ms: int) -> None:
            self.entered.set()
            await self.gate.wait()
            self.written.append(key)

    async def run() -> None:
        share = ShareCoordinator(lambda: TOPICS, 45_000, 5000, clock=Clock())
        store = Store()
        share.store = cast(ShareStateStore, store)
        keys = [("g", T1, 0), ("g", T1, 1)]
        for key in keys:
            share.share_partition(key, 0, 10)
        share.changed(keys)
        task = asyncio.ensure_future(share.flush())
        await store.entered.wait()
        task.cancel()  # the request's connection closed
        await asyncio.sleep(0)
        store.gate.set()
        for _ in range(100):
            if len(store.written) == 2:
                break
            await asyncio.sleep(0.01)
        assert sorted(store.written) == keys
        share.stop()

    asyncio.run(run())
