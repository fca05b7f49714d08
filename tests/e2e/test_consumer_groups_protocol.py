"""The group APIs at the wire level: Kafka's answers to edge cases and bad input, request by request, against
our broker (and Apache Kafka with KOP_E2E_TARGET=kafka, which proves the expectations are Kafka's).

Requests are encoded with kafka-python's protocol classes (tests/support/wire.py), independent of our codec.
Covered: KIP-394 MEMBER_ID_REQUIRED, session timeout bounds, protocol type/name checks, generation fencing
on SyncGroup/Heartbeat/OffsetCommit, static membership (a restarted instance takes over without a rebalance
and fences the old member id), batched LeaveGroup with per-member errors, OffsetCommit for missing
topics/too-long metadata/missing groups (v8 vs v9), OffsetFetch -1 and multi-group v8, ListGroups filters,
DescribeGroups v5/v6 for a missing group, DeleteGroups and OffsetDelete errors, member metadata too large
for __consumer_offsets, batched FindCoordinator. After each bad request the broker still serves the group.
"""

from __future__ import annotations

import struct
import threading
import time

from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from kafka.protocol.consumer import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.clients import create_topic
from tests.support.wire import Negotiated

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNKNOWN_SERVER_ERROR = -1
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

KOP = {"groupInitialRebalanceDelayMs": 0}


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: what a consumer puts in its JoinGroup protocol metadata."""
    body = struct.pack(">hi", 0, len(topics))
    for t in topics:
        body += struct.pack(">h", len(t)) + t.encode()
    return body + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


def connect(bootstrap: str) -> Negotiated:
    """A connection to a broker whose group coordinator answers: a broker that just started answers
    COORDINATOR_LOAD_IN_PROGRESS (ours, while __consumer_offsets loads) or COORDINATOR_NOT_AVAILABLE (Kafka,
    before it created the topic) for a moment; clients retry, and so does this."""
    w = Negotiated(bootstrap)
    deadline = time.monotonic() + 60
    while True:
        # FindCoordinator first, as clients do: Apache Kafka creates __consumer_offsets on the first one.
        w.call(FindCoordinatorRequest(key="probe", key_type=0), cap=3)
        listed = w.call(ListGroupsRequest(states_filter=[], types_filter=[]), cap=5).error_code
        fetched = w.call(OffsetFetchRequest(group_id="probe", topics=[], require_stable=False), cap=7).error_code
        if listed == fetched == NONE:
            return w
        assert {listed, fetched} <= {NONE, 14, 15, 16} and time.monotonic() < deadline, (listed, fetched)
        time.sleep(0.05)


class Group:
    """Requests for one group id through one connection."""

    def __init__(self, wire: Negotiated, group: str) -> None:
        self.w = wire
        self.group = group

    def join(self, member_id: str = "", *, version: int = 9, session_ms: int = 30000, rebalance_ms: int = 30000,
             instance_id: str | None = None,
             protocol_type: str = "consumer", protocols: list[tuple[str, bytes]] | None = None, group: str | None = None):
        P = JoinGroupRequest.JoinGroupRequestProtocol
        req = JoinGroupRequest(
            group_id=self.group if group is None else group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            member_id=member_id, group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[P(name=n, metadata=m) for n, m in (protocols or [("range", subscription("t"))])], reason=None)
        return self.w.call(req, cap=version)

    def join_member(self, **kw):
        """JoinGroup until admitted (the KIP-394 round trip for dynamic members)."""
        r = self.join(**kw)
        if r.error_code == MEMBER_ID_REQUIRED:
            r = self.join(member_id=r.member_id, **kw)
        assert r.error_code == NONE, r
        return r

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             protocol_name: str | None = "range", instance_id: str | None = None):
        A = SyncGroupRequest.SyncGroupRequestAssignment
        return self.w.call(SyncGroupRequest(
            group_id=self.group, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            protocol_type="consumer", protocol_name=protocol_name,
            assignments=[A(member_id=m, assignment=a) for m, a in (assignments or {}).items()]), cap=5)

    def heartbeat(self, member_id: str, generation: int, instance_id: str | None = None) -> int:
        return self.w.call(HeartbeatRequest(group_id=self.group, generation_id=generation, member_id=member_id,
                                            group_instance_id=instance_id), cap=4).error_code

    def commit(self, parts: list[tuple[str, int, int]], *, generation: int = -1, member_id: str = "",
               metadata: str | None = "", epoch: int = -1, version: int = 9, instance_id: str | None = None):
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        P = T.OffsetCommitRequestPartition
        by_topic: dict[str, list] = {}
        for t, p, o in parts:
            by_topic.setdefault(t, []).append(P(partition_index=p, committed_offset=o, committed_leader_epoch=epoch,
                                                committed_metadata=metadata))
        r = self.w.call(OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id, retention_time_ms=-1,
            topics=[T(name=t, partitions=ps) for t, ps in by_topic.items()]), cap=version)
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

    def fetch(self, parts: list[tuple[str, int]] | None, version: int = 7):
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        topics = None
        if parts is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in parts:
                by_topic.setdefault(t, []).append(p)
            topics = [T(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        r = self.w.call(OffsetFetchRequest(group_id=self.group, topics=topics, require_stable=True), cap=version)
        assert r.error_code == NONE, r
        return {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata, p.error_code)
                for t in r.topics for p in t.partitions}

    def leave(self, members: list[tuple[str, str | None]], version: int = 5):
        M = LeaveGroupRequest.MemberIdentity
        if version < 3:
            (member_id, _), = members
            return self.w.call(LeaveGroupRequest(group_id=self.group, member_id=member_id), cap=version)
        return self.w.call(LeaveGroupRequest(group_id=self.group, members=[
            M(member_id=m, group_instance_id=i, reason="test") for m, i in members]), cap=version)

    def describe(self, version: int = 5):
        r = self.w.call(DescribeGroupsRequest(groups=[self.group], include_authorized_operations=False), cap=version)
        (g,) = r.groups
        return g


def test_join_sync_heartbeat_errors(target) -> None:
    broker = target.module_broker(**KOP)
    topic = target.topic("jsh")
    create_topic(broker.bootstrap, topic, 2)
    with connect(broker.bootstrap) as w:
        g = Group(w, "g-" + topic)
        first = g.join()
        assert (first.error_code, first.generation_id) == (MEMBER_ID_REQUIRED, -1) and first.member_id, first
        assert g.join(session_ms=1).error_code == INVALID_SESSION_TIMEOUT
        assert g.join(session_ms=1_800_001).error_code == INVALID_SESSION_TIMEOUT
        assert g.join(group="").error_code == INVALID_GROUP_ID
        assert Group(w, "nope-" + topic).join(member_id="ghost").error_code == UNKNOWN_MEMBER_ID

        j = g.join(member_id=first.member_id)
        assert j.error_code == NONE and j.generation_id == 1 and j.leader == j.member_id == first.member_id, j
        assert [m.member_id for m in j.members] == [j.member_id] and j.protocol_name == "range"
        mine = assignment(topic, [0, 1])
        assert g.sync(j.member_id, 2, {j.member_id: mine}).error_code == ILLEGAL_GENERATION
        assert g.sync(j.member_id, 1, {j.member_id: mine}, protocol_name="roundrobin").error_code == \
            INCONSISTENT_GROUP_PROTOCOL
        assert g.sync("ghost", 1).error_code == UNKNOWN_MEMBER_ID
        s = g.sync(j.member_id, 1, {j.member_id: mine})
        assert (s.error_code, bytes(s.assignment), s.protocol_name) == (NONE, mine, "range"), s

        assert g.heartbeat(j.member_id, 1) == NONE
        assert g.heartbeat(j.member_id, 0) == ILLEGAL_GENERATION
        assert g.heartbeat("ghost", 1) == UNKNOWN_MEMBER_ID
        assert Group(w, "nope-" + topic).heartbeat("ghost", 1) == UNKNOWN_MEMBER_ID
        # another member with another protocol type cannot join
        other = g.join(protocol_type="connect")
        assert other.error_code == INCONSISTENT_GROUP_PROTOCOL, other

        # a second member joins: the first learns it from its heartbeat, rejoins, both are in generation 2
        second = g.join()
        assert second.error_code == MEMBER_ID_REQUIRED
        with connect(broker.bootstrap) as w2:
            g2 = Group(w2, g.group)
            # the second member's join is parked until the first rejoins: send it, then rejoin the first
            result = {}
            t = threading.Thread(target=lambda: result.setdefault("j", g2.join(member_id=second.member_id)))
            t.start()
            while g.heartbeat(j.member_id, 1) != REBALANCE_IN_PROGRESS:
                pass
            j1 = g.join(member_id=j.member_id)
            t.join(60)
            j2 = result["j"]
            assert j1.generation_id == j2.generation_id == 2 and j1.error_code == j2.error_code == NONE
            assert j1.leader == j.member_id and len(j1.members) == 2 and j2.members == []
            assert g.commit([(topic, 0, 1)], generation=1, member_id=j.member_id) == {(topic, 0): ILLEGAL_GENERATION}
            # between JoinGroup and SyncGroup a commit is answered REBALANCE_IN_PROGRESS
            assert g.commit([(topic, 0, 1)], generation=2, member_id=j.member_id) == {(topic, 0): REBALANCE_IN_PROGRESS}
            assert g.sync(j.member_id, 2, {j.member_id: assignment(topic, [0]),
                                          second.member_id: assignment(topic, [1])}).error_code == NONE
            s2 = g2.sync(second.member_id, 2)
            assert (s2.error_code, bytes(s2.assignment)) == (NONE, assignment(topic, [1]))
            assert g.commit([(topic, 0, 1)], generation=2, member_id=j.member_id) == {(topic, 0): NONE}
            d = g.describe()
            assert (d.group_state, d.protocol_type, d.protocol_data) == ("Stable", "consumer", "range")
            assert sorted(m.member_id for m in d.members) == sorted([j.member_id, second.member_id])
            assert {bytes(m.member_assignment) for m in d.members} == {assignment(topic, [0]), assignment(topic, [1])}


def test_static_member_takes_over_and_fences_the_old_id(target) -> None:
    broker = target.module_broker(**KOP)
    topic = target.topic("static")
    create_topic(broker.bootstrap, topic, 2)
    with connect(broker.bootstrap) as w:
        g = Group(w, "g-" + topic)
        j = g.join(instance_id="instance-1")  # static members get their id at once (no MEMBER_ID_REQUIRED)
        assert j.error_code == NONE and j.generation_id == 1 and j.member_id.startswith("instance-1-"), j
        mine = assignment(topic, [0, 1])
        assert g.sync(j.member_id, 1, {j.member_id: mine}, instance_id="instance-1").error_code == NONE
        assert g.commit([(topic, 0, 5)], generation=1, member_id=j.member_id, instance_id="instance-1") == {
            (topic, 0): NONE}

        again = g.join(instance_id="instance-1")  # the instance restarted: it does not know its member id
        assert again.error_code == NONE and again.member_id != j.member_id, again
        assert again.generation_id == 1, "a static member's restart must not start a new generation"
        s = g.sync(again.member_id, 1, instance_id="instance-1")
        assert (s.error_code, bytes(s.assignment)) == (NONE, mine), s

        assert g.heartbeat(j.member_id, 1, "instance-1") == FENCED_INSTANCE_ID
        assert g.commit([(topic, 0, 6)], generation=1, member_id=j.member_id, instance_id="instance-1") == {
            (topic, 0): FENCED_INSTANCE_ID}
        assert g.heartbeat(again.member_id, 1, "instance-1") == NONE
        assert g.fetch([(topic, 0)])[(topic, 0)][0] == 5  # the fenced commit was not stored

        left = g.leave([(again.member_id, "instance-1"), ("ghost", None), ("", "no-such-instance")])
        assert left.error_code == NONE
        assert [(m.member_id, m.error_code) for m in left.members] == [
            (again.member_id, NONE), ("ghost", UNKNOWN_MEMBER_ID), ("", UNKNOWN_MEMBER_ID)]
        assert g.describe().group_state == "Empty"
        assert g.leave([("ghost", None)], version=2).error_code == UNKNOWN_MEMBER_ID
        nope = Group(w, "nope-" + topic).leave([("ghost", None)])  # a missing group: per member, as Kafka 4.x
        assert (nope.error_code, [m.error_code for m in nope.members]) == (NONE, [UNKNOWN_MEMBER_ID])
        assert Group(w, "nope-" + topic).leave([("ghost", None)], version=2).error_code == UNKNOWN_MEMBER_ID
        assert Group(w, "").leave([("ghost", None)]).error_code == INVALID_GROUP_ID


def test_offset_commit_and_fetch_edge_cases(target) -> None:
    broker = target.module_broker(**KOP)
    topic = target.topic("ocf")
    create_topic(broker.bootstrap, topic, 3)
    missing = target.topic("missing")
    with connect(broker.bootstrap) as w:
        g = Group(w, "g-" + topic)
        # a group that does not exist yet, committed to outside group management (kafka-consumer-groups
        # --reset-offsets --execute does this): accepted; an unknown topic's partitions are refused, a
        # partition that does not exist too, the others are stored
        got = g.commit([(topic, 0, 10), (topic, 1, 11), (topic, 7, 1), (missing, 0, 1)], metadata="m", epoch=0)
        assert got == {(topic, 0): NONE, (topic, 1): NONE, (topic, 7): UNKNOWN_TOPIC_OR_PARTITION,
                       (missing, 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert g.commit([(topic, 2, 1)], metadata="x" * 4097) == {(topic, 2): OFFSET_METADATA_TOO_LARGE}
        assert g.commit([(topic, 2, 1)], metadata=None) == {(topic, 2): NONE}
        fetched = g.fetch([(topic, 0), (topic, 1), (topic, 2), (missing, 0)])
        assert fetched == {(topic, 0): (10, 0, "m", NONE), (topic, 1): (11, 0, "m", NONE),
                           (topic, 2): (1, -1, "", NONE), (missing, 0): (-1, -1, "", NONE)}, fetched
        assert g.fetch(None) == {k: v for k, v in fetched.items() if k[0] == topic}

        nothing = Group(w, "never-" + topic)
        assert nothing.fetch([(topic, 0)]) == {(topic, 0): (-1, -1, "", NONE)}
        # a generation for a group that does not exist: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND from v9
        assert nothing.commit([(topic, 0, 1)], generation=3, member_id="m", version=8) == {(topic, 0): ILLEGAL_GENERATION}
        assert nothing.commit([(topic, 0, 1)], generation=3, member_id="m", version=9) == {(topic, 0): GROUP_ID_NOT_FOUND}
        # "" is a valid group id for offsets (as in Kafka, where old consumers stored offsets under it), not
        # for membership
        empty = Group(w, "")
        assert empty.commit([(topic, 0, 1)]) == {(topic, 0): NONE}
        assert empty.fetch([(topic, 0)]) == {(topic, 0): (1, -1, "", NONE)}
        assert empty.join().error_code == INVALID_GROUP_ID and empty.heartbeat("m", 1) == INVALID_GROUP_ID
        assert empty.sync("m", 1).error_code == INVALID_GROUP_ID
        r = w.call(DeleteGroupsRequest(groups_names=[""]), cap=2)
        assert [(x.group_id, x.error_code) for x in r.results] == [("", NONE)]

        # v8: several groups in one request
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        T = G.OffsetFetchRequestTopics
        r = w.call(OffsetFetchRequest(groups=[
            G(group_id=g.group, member_id=None, member_epoch=-1, topics=[T(name=topic, partition_indexes=[0, 2])]),
            G(group_id=nothing.group, member_id=None, member_epoch=-1, topics=None),
        ], require_stable=False), cap=9)
        by_group = {x.group_id: (x.error_code, {(t.name, p.partition_index): p.committed_offset
                                               for t in x.topics for p in t.partitions}) for x in r.groups}
        assert by_group == {g.group: (NONE, {(topic, 0): 10, (topic, 2): 1}), nothing.group: (NONE, {})}

        # an active member's group: a commit without membership is refused
        j = Group(w, g.group).join_member()
        assert g.commit([(topic, 0, 99)]) == {(topic, 0): UNKNOWN_MEMBER_ID}
        assert g.commit([(topic, 0, 99)], generation=j.generation_id, member_id="ghost") == {(topic, 0): UNKNOWN_MEMBER_ID}
        assert g.fetch([(topic, 0)])[(topic, 0)][0] == 10


def test_list_describe_delete_and_offset_delete(target) -> None:
    broker = target.module_broker(**KOP)
    topic = target.topic("ldd")
    create_topic(broker.bootstrap, topic, 2)
    with connect(broker.bootstrap) as w:
        active = Group(w, "active-" + topic)
        j = active.join_member(protocols=[("range", subscription(topic))])
        assert active.sync(j.member_id, j.generation_id, {j.member_id: assignment(topic, [0, 1])}).error_code == NONE
        assert active.commit([(topic, 0, 3)], generation=j.generation_id, member_id=j.member_id) == {(topic, 0): NONE}
        simple = Group(w, "simple-" + topic)
        assert simple.commit([(topic, 0, 4), (topic, 1, 5)]) == {(topic, 0): NONE, (topic, 1): NONE}

        def listed(version: int, states=(), types=()):
            r = w.call(ListGroupsRequest(states_filter=list(states), types_filter=list(types)), cap=version)
            assert r.error_code == NONE
            return {x.group_id: (x.protocol_type, getattr(x, "group_state", None), getattr(x, "group_type", None))
                    for x in r.groups if x.group_id in (active.group, simple.group)}

        assert listed(5) == {active.group: ("consumer", "Stable", "classic"), simple.group: ("", "Empty", "classic")}
        assert listed(5, states=["empty"]) == {simple.group: ("", "Empty", "classic")}
        assert listed(5, states=["Stable", "PreparingRebalance"]) == {active.group: ("consumer", "Stable", "classic")}
        assert listed(5, types=["consumer"]) == {}
        assert listed(5, types=["classic"]).keys() == {active.group, simple.group}
        assert listed(3).keys() == {active.group, simple.group}

        missing = Group(w, "missing-" + topic)
        d5 = missing.describe(version=5)
        assert (d5.error_code, d5.group_state, d5.members) == (NONE, "Dead", [])
        d6 = missing.describe(version=6)
        assert (d6.error_code, d6.group_state) == (GROUP_ID_NOT_FOUND, "Dead")
        d = simple.describe()
        assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data, d.members) == (NONE, "Empty", "", "", [])

        def delete_offsets(group: Group, parts: list[tuple[str, int]]):
            T = OffsetDeleteRequest.OffsetDeleteRequestTopic
            by_topic: dict[str, list[int]] = {}
            for t, p in parts:
                by_topic.setdefault(t, []).append(p)
            r = w.call(OffsetDeleteRequest(group_id=group.group, topics=[
                T(name=t, partitions=[T.OffsetDeleteRequestPartition(partition_index=p) for p in ps])
                for t, ps in by_topic.items()]), cap=0)
            return r.error_code, {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

        assert delete_offsets(active, [(topic, 0)]) == (NONE, {(topic, 0): GROUP_SUBSCRIBED_TO_TOPIC})
        assert delete_offsets(missing, [(topic, 0)])[0] == GROUP_ID_NOT_FOUND
        unknown = target.topic("unknown")
        # partition 1 of the simple group has an offset, partition 0 is removed, the unknown topic is refused
        assert delete_offsets(simple, [(topic, 0), (unknown, 0)]) == (
            NONE, {(topic, 0): NONE, (unknown, 0): UNKNOWN_TOPIC_OR_PARTITION})
        assert simple.fetch([(topic, 0), (topic, 1)]) == {(topic, 0): (-1, -1, "", NONE), (topic, 1): (5, -1, "", NONE)}

        r = w.call(DeleteGroupsRequest(groups_names=[active.group, simple.group, missing.group]), cap=2)
        assert {x.group_id: x.error_code for x in r.results} == {
            active.group: NON_EMPTY_GROUP, simple.group: NONE, missing.group: GROUP_ID_NOT_FOUND}
        assert simple.fetch([(topic, 1)]) == {(topic, 1): (-1, -1, "", NONE)}
        assert simple.group not in listed(5)


def test_member_metadata_too_large_for_the_log(target) -> None:
    """The group metadata record with this member's 6 MiB subscription cannot be stored (Kafka: RECORD_TOO_LARGE
    on __consumer_offsets, answered UNKNOWN_SERVER_ERROR); the group is not harmed and can start over."""
    broker = target.module_broker(**KOP)
    topic = target.topic("huge")
    create_topic(broker.bootstrap, topic, 1)
    with connect(broker.bootstrap) as w:
        g = Group(w, "g-" + topic)
        huge = subscription(topic)[:-4] + struct.pack(">i", 6 << 20) + b"u" * (6 << 20)
        j = g.join_member(protocols=[("range", huge)])
        s = g.sync(j.member_id, j.generation_id, {j.member_id: assignment(topic, [0])})
        assert s.error_code == UNKNOWN_SERVER_ERROR, s
        assert g.heartbeat(j.member_id, j.generation_id) == REBALANCE_IN_PROGRESS
        j2 = g.join(member_id=j.member_id, protocols=[("range", subscription(topic))])
        assert j2.error_code == NONE and j2.generation_id == j.generation_id + 1, j2
        assert g.sync(j2.member_id, j2.generation_id, {j2.member_id: assignment(topic, [0])}).error_code == NONE
        assert g.describe().group_state == "Stable"


def test_find_coordinator_batched(target) -> None:
    broker = target.module_broker(**KOP)
    with connect(broker.bootstrap) as w:
        port = int(broker.bootstrap.rsplit(":", 1)[1])
        r = w.call(FindCoordinatorRequest(key_type=0, coordinator_keys=["a", "b", ""]), cap=5)
        assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [("a", 0, port), ("b", 0, port), ("", 0, port)]
        r = w.call(FindCoordinatorRequest(key="a", key_type=0), cap=3)
        assert (r.error_code, r.port) == (0, port)
        r = w.call(FindCoordinatorRequest(key_type=1, coordinator_keys=["txn"]), cap=5)  # transactional ids too
        assert [(c.key, c.error_code, c.port) for c in r.coordinators] == [("txn", 0, port)]


def test_rebalance_timeout_drops_members_that_do_not_rejoin(target) -> None:
    """A member that does not rejoin within the rebalance timeout is left out of the next generation (and
    the others' JoinGroup waits for it no longer than that)."""
    broker = target.module_broker(**KOP)
    topic = target.topic("rbto")
    create_topic(broker.bootstrap, topic, 2)
    with connect(broker.bootstrap) as w1, connect(broker.bootstrap) as w2:
        a, b = Group(w1, "g-" + topic), Group(w2, "g-" + topic)
        ja = a.join_member(rebalance_ms=3000)
        assert a.sync(ja.member_id, ja.generation_id, {ja.member_id: b""}).error_code == NONE
        result = {}
        second = b.join(rebalance_ms=3000)
        assert second.error_code == MEMBER_ID_REQUIRED
        t = threading.Thread(target=lambda: result.setdefault("b", b.join(member_id=second.member_id,
                                                                          rebalance_ms=3000)))
        t.start()
        # a learns of the rebalance but never rejoins; b's join completes after the rebalance timeout (3 s,
        # the longest of the members'): the generation holds b alone
        while a.heartbeat(ja.member_id, ja.generation_id) != REBALANCE_IN_PROGRESS:
            time.sleep(0.05)
        t.join(120)
        jb = result["b"]
        assert jb.error_code == NONE and jb.generation_id == ja.generation_id + 1, jb
        assert jb.leader == jb.member_id and [m.member_id for m in jb.members] == [jb.member_id]
        assert a.heartbeat(ja.member_id, ja.generation_id) == UNKNOWN_MEMBER_ID


def test_deleting_a_topic_deletes_its_committed_offsets(target) -> None:
    broker = target.module_broker(**KOP)
    topic, other = target.topic("deltopic"), target.topic("keep")
    create_topic(broker.bootstrap, topic, 2)
    create_topic(broker.bootstrap, other, 1)
    with connect(broker.bootstrap) as w:
        g = Group(w, "g-" + topic)
        assert g.commit([(topic, 0, 5), (topic, 1, 6), (other, 0, 7)]) == {
            (topic, 0): NONE, (topic, 1): NONE, (other, 0): NONE}
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics([topic])[topic].result(60)
        deadline = time.monotonic() + 120
        while set(g.fetch(None)) != {(other, 0)}:  # the deletion reaches the coordinator asynchronously
            assert time.monotonic() < deadline, g.fetch(None)
            time.sleep(0.2)
        assert g.fetch(None) == {(other, 0): (7, -1, "", NONE)}
