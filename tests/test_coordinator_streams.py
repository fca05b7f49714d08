"""kop/coordinator/streams: KIP-1071 streams groups without sockets or a loop - the wire layouts against Kafka 4.4's
bytes, the sticky task assignor, the topology's tasks and internal topics, and the group machine driven the way
Kafka Streams 4.4's StreamsGroupHeartbeatRequestManager drives it, with a fake clock (ms)."""

from __future__ import annotations

import pytest

from kop.coordinator.streams import records as srec
from kop.coordinator.streams.assignor import assign, assign_standby
from kop.coordinator.streams.group import MemberState, StreamsGroupMachine, StreamsHeartbeat
from kop.coordinator.streams.topology import (
    INCORRECTLY_PARTITIONED_TOPICS,
    MISSING_INTERNAL_TOPICS,
    MISSING_SOURCE_TOPICS,
    STALE_TOPOLOGY,
    Subtopology,
    TopicInfo,
    Topology,
    configure,
)
from kop.protocol import decode_message, encode_message, message_class
from kop.protocol.errors import ErrorCode as E

# ---------------------------------------------------------------------------------------------- wire layouts
# Written by kafka-clients 4.4.0's StreamsGroupHeartbeatRequestData/ResponseData and StreamsGroupDescribeResponseData
# (MessageUtil.toByteBufferAccessor): a join with a one-subtopology topology; an answer with a status and tasks.
JOIN = ("04617070036d3100000000ffffffff0000000493e001000000000202300203696e0102106170702d732d6368616e67656c6f67"
        "000000000000020f636c65616e75702e706f6c69637908636f6d70616374000002126170702d722d7265706172746974696f6e"
        "01010000010101037031ff0000000000")
ANSWER_V0 = "00000000000000036d310000000300001388000027100000ea600203027800020230030000000000000001000101000000000000"
ANSWER_V1 = "00000000000000036d3100000003000013880000ea600000000000002710020302780002023003000000000000000100010100000000" \
            "000000"
DESCRIBED = ("00000000020000000461707007537461626c65000000020000000201000000000202300203696e010101000002036d310000000200"
             "000263032f6800000000037031ff010101020230020000000000010100010101000000800000000000")


@pytest.mark.parametrize("version", [0, 1])
def test_a_join_decodes_as_kafka_wrote_it(version: int) -> None:
    q = decode_message("StreamsGroupHeartbeatRequest", version, bytes.fromhex(JOIN))
    assert (q.group_id, q.member_id, q.member_epoch, q.endpoint_information_epoch) == ("app", "m1", 0, -1)
    assert (q.rebalance_timeout_ms, q.process_id, q.user_endpoint, q.instance_id) == (300000, "p1", None, None)
    assert q.active_tasks == [] and q.task_offsets is None and q.client_tags is None
    (s,) = q.topology.subtopologies
    assert (s.subtopology_id, s.source_topics, s.repartition_sink_topics) == ("0", ["in"], ["app-r-repartition"])
    assert [(c.name, c.partitions, [(kv.key, kv.value) for kv in c.topic_configs]) for c in s.state_changelog_topics] \
        == [("app-s-changelog", 0, [("cleanup.policy", "compact")])]
    assert encode_message(q, version) == bytes.fromhex(JOIN)


@pytest.mark.parametrize(("version", "raw"), [(0, ANSWER_V0), (1, ANSWER_V1)])
def test_an_answer_encodes_as_kafka_does(version: int, raw: str) -> None:
    R = message_class("StreamsGroupHeartbeatResponse")
    r = R(throttle_time_ms=0, error_code=0, error_message=None, member_id="m1", member_epoch=3,
          heartbeat_interval_ms=5000, acceptable_recovery_lag_legacy=10000 if version == 0 else 0,
          task_offset_interval_ms=60000, acceptable_recovery_lag=10000 if version else -1,
          status=[R.Status(status_code=3, status_detail="x")],
          active_tasks=[R.TaskIds(subtopology_id="0", partitions=[0, 1])], standby_tasks=[], warmup_tasks=[],
          topology_description_required=False, endpoint_information_epoch=0, partitions_by_user_endpoint=None)
    assert encode_message(r, version) == bytes.fromhex(raw)
    assert decode_message("StreamsGroupHeartbeatResponse", version, bytes.fromhex(raw)) == r


def test_a_describe_answer_encodes_as_kafka_does() -> None:
    R = message_class("StreamsGroupDescribeResponse")
    member = R.Member(member_id="m1", member_epoch=2, instance_id=None, rack_id=None, client_id="c", client_host="/h",
                      topology_epoch=0, process_id="p1", user_endpoint=None, client_tags=[], task_offsets=[],
                      task_end_offsets=[], assignment=R.Assignment(
                          active_tasks=[R.TaskIds(subtopology_id="0", partitions=[0])], standby_tasks=[],
                          warmup_tasks=[]),
                      target_assignment=R.Assignment(active_tasks=[], standby_tasks=[], warmup_tasks=[]),
                      is_classic=False)
    group = R.DescribedGroup(error_code=0, error_message=None, group_id="app", group_state="Stable", group_epoch=2,
                             assignment_epoch=2, topology=R.Topology(epoch=0, subtopologies=[R.Subtopology(
                                 subtopology_id="0", source_topics=["in"], repartition_sink_topics=[],
                                 state_changelog_topics=[], repartition_source_topics=[])]),
                             members=[member], authorized_operations=-2147483648)
    assert encode_message(R(throttle_time_ms=0, groups=[group]), 0) == bytes.fromhex(DESCRIBED)


# ---------------------------------------------------------------------------------------------- assignor
def _tasks(n: int, sub: str = "0") -> set[tuple[str, int]]:
    return {(sub, p) for p in range(n)}


def test_every_task_once_and_balanced() -> None:
    tasks = _tasks(7) | _tasks(3, "1")
    out = assign(tasks, {"a": "pa", "b": "pb", "c": "pc"}, {})
    assert set().union(*out.values()) == tasks and sum(map(len, out.values())) == len(tasks)
    assert sorted(map(len, out.values())) == [3, 3, 4]
    assert assign(tasks, {}, {}) == {}


def test_tasks_stay_with_their_owner_when_balance_allows() -> None:
    tasks = _tasks(4)
    first = assign(tasks, {"a": "pa", "b": "pb"}, {})
    # a third member joins: each old member keeps what it can, the newcomer gets one from the bigger side
    second = assign(tasks, {"a": "pa", "b": "pb", "c": "pc"}, first)
    assert second["a"] <= first["a"] and second["b"] <= first["b"] and len(second["c"]) == 1
    # a member leaves: the survivor keeps its tasks and gets the leaver's
    third = assign(tasks, {"a": "pa"}, second)
    assert third == {"a": frozenset(tasks)}


def test_a_leavers_tasks_go_to_the_members_with_their_standby_copies() -> None:
    """Kafka 4.4's StickyTaskAssignor, second step: a task whose owner is gone goes, balance allowing, to a member
    that held a standby copy of it (its state is there), not merely to the least loaded member."""
    tasks = _tasks(6)
    active = {"a": frozenset({("0", 0), ("0", 1)}), "b": frozenset({("0", 2), ("0", 3)}),
              "c": frozenset({("0", 4), ("0", 5)})}
    standby = {"b": frozenset({("0", 1)}), "c": frozenset({("0", 0)})}  # a's tasks' copies, crossed over
    out = assign(tasks, {"b": "pb", "c": "pc"}, active, standby)
    assert out == {"b": active["b"] | {("0", 1)}, "c": active["c"] | {("0", 0)}}
    # without copies the ties go by member id
    assert assign(tasks, {"b": "pb", "c": "pc"}, active)["b"] == active["b"] | {("0", 0)}
    # balance first: a copy holder already at its share gets nothing more
    out = assign(tasks, {"b": "pb", "c": "pc"}, active, {"b": frozenset({("0", 0), ("0", 1)})})
    assert sorted(map(len, out.values())) == [3, 3]


def test_a_process_with_two_members_counts_as_one_process_for_ties() -> None:
    out = assign(_tasks(4), {"a1": "pa", "a2": "pa", "b": "pb"}, {})
    assert sum(len(out[m]) for m in ("a1", "a2")) >= len(out["b"]) and sum(map(len, out.values())) == 4


# ---------------------------------------------------------------------------------------------- topology
# WordCount: subtopology 0 reads `in` and writes the repartition topic; 1 reads it and keeps a changelogged store
WORDCOUNT = Topology(0, (
    Subtopology("0", ("in",), repartition_sink_topics=("app-r-repartition",)),
    Subtopology("1", ("app-r-repartition",), state_changelog_topics=(TopicInfo("app-s-changelog", 0, 0),),
                repartition_source_topics=(TopicInfo("app-r-repartition", 0, 0, (("cleanup.policy", "delete"),)),)),
))


def test_internal_topics_get_the_task_counts_of_their_subtopologies() -> None:
    c = configure(WORDCOUNT, {"in": 3})
    assert c.tasks == frozenset()  # not before the internal topics exist
    assert c.to_create == {"app-r-repartition": (3, {"cleanup.policy": "delete"}), "app-s-changelog": (3, {})}
    assert [code for code, _ in c.statuses] == [MISSING_INTERNAL_TOPICS]
    ready = configure(WORDCOUNT, {"in": 3, "app-r-repartition": 3, "app-s-changelog": 3})
    assert ready.tasks == _tasks(3) | _tasks(3, "1") and ready.statuses == [] and ready.to_create == {}


def test_an_existing_internal_topic_with_another_partition_count_makes_no_tasks() -> None:
    """Kafka's INCORRECTLY_PARTITIONED_TOPICS. The tasks come from the topics that exist, never from a count a
    member's topology asks for: a fuzzed heartbeat naming an existing topic as a repartition topic of 11 million
    partitions made 11 million tasks and stalled the broker (tests/test_kafka_fuzz.py, seed 12)."""
    fixed = Topology(0, (Subtopology("0", ("in",), repartition_source_topics=(TopicInfo("in", 100_000, 1),)),))
    c = configure(fixed, {"in": 1})
    assert c.statuses == [(INCORRECTLY_PARTITIONED_TOPICS, "Existing topic in has different number of partitions: "
                                                           "expected 100000, found 1")]
    assert c.tasks == frozenset() and c.to_create == {}
    stateful = Topology(0, (Subtopology("0", ("in",), state_changelog_topics=(TopicInfo("app-s-changelog", 0, 0),)),))
    grown = configure(stateful, {"in": 6, "app-s-changelog": 3})  # the source topic grew: one changelog per task
    assert grown.statuses == [(INCORRECTLY_PARTITIONED_TOPICS, "Existing topic app-s-changelog has different number "
                                                               "of partitions: expected 6, found 3")]
    assert grown.tasks == frozenset() and configure(stateful, {"in": 3, "app-s-changelog": 3}).tasks == _tasks(3)


def test_a_missing_source_topic_is_reported_and_nothing_is_created() -> None:
    c = configure(WORDCOUNT, {})
    assert [code for code, _ in c.statuses] == [MISSING_SOURCE_TOPICS] and "in" in c.statuses[0][1]
    assert c.tasks == frozenset() and c.to_create == {}


# ---------------------------------------------------------------------------------------------- the group machine
class Driver:
    def __init__(self, partitions: dict[str, int] | None = None) -> None:
        self.now = 1_000_000
        self.partitions = partitions if partitions is not None else {"in": 2, "app-r-repartition": 2,
                                                                     "app-s-changelog": 2}
        self.m = StreamsGroupMachine(6000, lambda: self.partitions)

    def join(self, member: str, process: str = "", instance: str | None = None):
        return self.m.heartbeat(StreamsHeartbeat("app", member, 0, instance_id=instance, rebalance_timeout_ms=30000,
                                                 topology=WORDCOUNT, active_tasks=frozenset(),
                                                 process_id=process or member), self.now)

    def beat(self, member: str, epoch: int, owned=None):
        return self.m.heartbeat(StreamsHeartbeat("app", member, epoch, active_tasks=owned), self.now)


ALL = frozenset(_tasks(2) | _tasks(2, "1"))


def test_a_first_member_gets_every_task() -> None:
    d = Driver()
    r = d.join("a")
    assert (r.error, r.active_tasks, r.statuses) == (0, ALL, [])
    assert d.m.groups["app"].state == "Stable" and r.member_epoch == d.m.groups["app"].group_epoch


def test_missing_internal_topics_are_asked_for_then_assigned() -> None:
    d = Driver({"in": 2})
    r = d.join("a")
    assert r.active_tasks == frozenset() and set(r.to_create) == {"app-r-repartition", "app-s-changelog"}
    assert d.m.groups["app"].state == "NotReady"
    d.partitions.update({"app-r-repartition": 2, "app-s-changelog": 2})
    again = d.beat("a", r.member_epoch)
    assert again.active_tasks == ALL and again.member_epoch > r.member_epoch and again.statuses == []


def test_a_second_member_waits_until_the_first_revokes() -> None:
    d = Driver()
    a = d.join("a")
    b = d.join("b")
    assert b.active_tasks == frozenset()  # its tasks are still a's
    a2 = d.beat("a", a.member_epoch)
    group = d.m.groups["app"]
    assert a2.member_epoch == a.member_epoch and len(a2.active_tasks) == 2  # a keeps its epoch until it revokes
    assert group.members["a"].state == MemberState.UNREVOKED_TASKS and group.state == "Reconciling"
    a3 = d.beat("a", a.member_epoch, owned=a2.active_tasks)
    assert a3.member_epoch == group.assignment_epoch and a3.active_tasks is None  # unchanged: not sent again
    b2 = d.beat("b", b.member_epoch)
    assert b2.active_tasks == ALL - a2.active_tasks and group.state == "Stable"


def test_epochs_fence_as_kafka_does() -> None:
    d = Driver()
    a = d.join("a")
    assert d.beat("a", a.member_epoch + 1).error == E.FENCED_MEMBER_EPOCH
    assert d.beat("zz", 5).error == E.UNKNOWN_MEMBER_ID
    assert d.beat("a", a.member_epoch).error == 0
    d.join("b")
    assert d.beat("a", a.member_epoch).member_epoch == a.member_epoch  # told to revoke: at its epoch still
    d.beat("a", a.member_epoch, owned=frozenset())  # it revoked everything it lost and moves on
    epoch = d.m.groups["app"].members["a"].member_epoch
    assert epoch > a.member_epoch
    # the previous epoch is accepted (a lost answer), an older one is not
    assert d.beat("a", a.member_epoch, owned=frozenset()).error == 0
    d.join("c")
    a_owns = d.m.groups["app"].members["a"].assigned
    d.beat("a", epoch)
    d.beat("a", epoch, owned=a_owns & d.m.groups["app"].targets["a"])  # revoked again: a moves on once more
    assert d.m.groups["app"].members["a"].member_epoch > epoch
    assert d.beat("a", a.member_epoch).error == E.FENCED_MEMBER_EPOCH
    assert d.m.heartbeat(StreamsHeartbeat("other", "x", 3), d.now).error == E.GROUP_ID_NOT_FOUND


def test_invalid_requests() -> None:
    d = Driver()
    assert d.m.heartbeat(StreamsHeartbeat("app", "a", 0, rebalance_timeout_ms=1, active_tasks=frozenset(),
                                          process_id="p"), d.now).error == E.INVALID_REQUEST  # no topology
    assert d.m.heartbeat(StreamsHeartbeat("app", "", 1), d.now).error == E.INVALID_REQUEST
    assert d.m.heartbeat(StreamsHeartbeat("app", "a", -3), d.now).error == E.INVALID_REQUEST


def test_a_member_whose_session_ends_is_fenced_and_its_tasks_move() -> None:
    d = Driver()
    a = d.join("a")
    d.join("b")
    d.beat("a", a.member_epoch, owned=frozenset())
    d.now += 5000
    d.beat("b", d.m.groups["app"].members["b"].member_epoch)
    assert d.m.next_deadline() == d.now - 5000 + 6000
    d.now += 1000
    assert d.m.expire(d.now) == [("app", "a")]
    r = d.beat("b", d.m.groups["app"].members["b"].member_epoch)
    assert r.active_tasks == ALL and list(d.m.groups["app"].members) == ["b"]


def test_leaving_and_a_static_member_coming_back() -> None:
    d = Driver()
    a = d.join("a", instance="i1")
    leave = d.m.heartbeat(StreamsHeartbeat("app", "a", -2, instance_id="i1"), d.now)
    assert (leave.error, leave.member_epoch) == (0, -2)  # a static leave: kept, its tasks wait for it
    assert d.join("b", "a", instance="i1").error == 0  # the same instance under a new member id takes over
    group = d.m.groups["app"]
    assert list(group.members) == ["b"] and group.members["b"].member_epoch == a.member_epoch
    assert d.join("c", instance="i1").error == E.UNRELEASED_INSTANCE_ID  # the instance is in use
    assert d.beat("b", -1).member_epoch == -1 and group.state == "Empty"


def test_a_newer_topology_replaces_the_groups_and_an_older_member_is_told() -> None:
    d = Driver()
    a = d.join("a")
    newer = Topology(1, WORDCOUNT.subtopologies)
    r = d.m.heartbeat(StreamsHeartbeat("app", "b", 0, rebalance_timeout_ms=1, topology=newer, active_tasks=frozenset(),
                                       process_id="pb"), d.now)
    assert r.error == 0 and d.m.groups["app"].topology == newer
    stale = d.beat("a", a.member_epoch)
    assert [code for code, _ in stale.statuses or []] == [STALE_TOPOLOGY]


def test_offset_commits_need_a_member_at_its_epoch() -> None:
    d = Driver()
    a = d.join("a")
    group = d.m.groups["app"]
    assert d.m.validate_offset_commit(group, "a", a.member_epoch) == 0
    assert d.m.validate_offset_commit(group, "a", a.member_epoch + 1) == E.STALE_MEMBER_EPOCH
    assert d.m.validate_offset_commit(group, "x", 1) == E.UNKNOWN_MEMBER_ID
    assert d.m.validate_offset_commit(group, "", -1) == E.UNKNOWN_MEMBER_ID  # not while it has members


# ---------------------------------------------------------------------------------------------- records
def test_records_are_kafka_44s_bytes() -> None:
    """Keys and values as kafka-group-coordinator 4.4.0 writes them (MessageUtil.toCoordinatorTypePrefixedByteBuffer
    and toVersionPrefixedByteBuffer of its StreamsGroup*Key/Value classes)."""
    assert srec.encode_key(srec.CURRENT_ASSIGNMENT, "app", "m1") == bytes.fromhex("0016000361707000026d31")
    assert srec.encode_key(srec.METADATA, "app") == bytes.fromhex("00110003617070")
    assert srec.metadata_value(5) == bytes.fromhex("000000000005000000000000000000")
    current = bytes.fromhex("0000000000050000000401020230030000000000000001000101020231020000000100010100")
    assert srec.current_value(5, 4, 1, frozenset({("0", 0), ("0", 1)}), frozenset({("1", 1)})) == current
    assert srec.read_current(current) == (5, 4, 1, frozenset({("0", 0), ("0", 1)}), frozenset({("1", 1)}), frozenset())
    member = bytes.fromhex("000000000263032f68000493e0000000000370310102681f900002026b02760000")
    assert srec.member_value(None, None, "c", "/h", 300000, 0, "p1", ("h", 8080), {"k": "v"}) == member
    assert srec.read_member(member)["user_endpoint"] == ("h", 8080)
    topology = Topology(0, (Subtopology("1", ("app-r-repartition",), state_changelog_topics=(
        TopicInfo("app-s-changelog", 0, 0, (("cleanup.policy", "compact"),)),),
        repartition_source_topics=(TopicInfo("app-r-repartition", 2, 0),)),))
    raw = bytes.fromhex("00000000000002023102126170702d722d7265706172746974696f6e0102106170702d732d6368616e67656c6f"
                        "67000000000000020f636c65616e75702e706f6c69637908636f6d7061637400000102126170702d722d7265"
                        "706172746974696f6e0000000200000100010000")
    assert srec.topology_value(topology) == raw and srec.read_topology(raw) == topology


def test_a_group_is_written_as_its_changes_and_restored_from_them() -> None:
    d = Driver()
    a = d.join("a", instance="i1")
    group = d.m.groups["app"]
    first = d.m.records(group)
    assert {srec.decode_key(k)[0] for k, _ in first} == set(srec.TYPES) and all(v is not None for _, v in first)
    assert d.m.records(group) == []  # nothing changed since
    d.join("b")
    d.beat("a", a.member_epoch)  # a is told to revoke
    changed = d.m.records(group)
    assert changed and all(v is not None for _, v in changed)
    log: dict[bytes, bytes] = {}
    for k, v in first + changed:
        log[k] = v
    other = StreamsGroupMachine(6000, lambda: d.partitions)
    back = other.restore("app", log, d.now)
    assert (back.group_epoch, back.assignment_epoch, back.topology, back.targets) == (
        group.group_epoch, group.assignment_epoch, group.topology, group.targets)
    assert {m: (x.member_epoch, x.previous_epoch, x.state, x.assigned, x.revoking, x.instance_id, x.process_id)
            for m, x in back.members.items()} == {
        m: (x.member_epoch, x.previous_epoch, x.state, x.assigned, x.revoking, x.instance_id, x.process_id)
        for m, x in group.members.items()}
    assert d.beat("b", -1).member_epoch == -1
    gone = d.m.records(group)
    assert [srec.decode_key(k)[0] for k, v in gone if v is None] == [srec.CURRENT_ASSIGNMENT, srec.TARGET_MEMBER,
                                                                     srec.MEMBER_METADATA]
    del d.m.groups["app"]
    assert all(v is None for _, v in d.m.records(group)) and group.written == {}


def test_a_member_slow_to_revoke_is_fenced_after_its_rebalance_timeout() -> None:
    d = Driver()
    a = d.join("a")  # rebalance timeout 30 s
    d.join("b")
    assert d.m.groups["app"].members["a"].revoke_deadline is None
    d.beat("a", a.member_epoch)  # told to revoke: its rebalance timeout starts
    assert d.m.groups["app"].members["a"].revoke_deadline == d.now + 30000
    for _ in range(6):  # it keeps heartbeating (its session stays alive) but never revokes
        d.now += 5000
        d.beat("a", a.member_epoch)
        d.beat("b", d.m.groups["app"].members["b"].member_epoch)
    assert d.m.expire(d.now) == [("app", "a")]
    assert d.beat("b", d.m.groups["app"].members["b"].member_epoch).active_tasks == ALL


def test_the_first_assignment_waits_for_the_initial_rebalance_delay() -> None:
    d = Driver()
    d.m.initial_delay_ms = 3000
    a = d.join("a")
    assert a.active_tasks == frozenset() and [code for code, _ in a.statuses or []] == [5]
    d.now += 1000
    b = d.join("b")  # joins within the delay: the first assignment counts it too
    assert b.active_tasks == frozenset() and [code for code, _ in b.statuses or []] == [5]
    d.now += 2000
    got = d.beat("a", a.member_epoch)
    assert got.statuses == [] and len(got.active_tasks or ()) == 2  # balanced at once, nothing to revoke
    assert len(d.beat("b", b.member_epoch).active_tasks or ()) == 2


def test_standby_copies_go_to_other_processes_and_stay_there() -> None:
    members = {"a1": "pa", "a2": "pa", "b": "pb", "c": "pc"}
    tasks = _tasks(4)
    active = assign(tasks, members, {})
    standby = assign_standby(tasks, members, active, {}, 1)
    owner = {t: members[m] for m, ts in active.items() for t in ts}
    assert sorted(t for ts in standby.values() for t in ts) == sorted(tasks)  # one copy each
    assert all(members[m] != owner[t] for m, ts in standby.items() for t in ts)
    assert standby == assign_standby(tasks, members, active, standby, 1)  # sticky
    two = assign_standby(tasks, {"a": "pa", "b": "pb"}, {"a": frozenset(tasks)}, {}, 2)
    assert two == {"a": frozenset(), "b": frozenset(tasks)}  # only one other process: one copy


def test_standby_tasks_are_sent_with_the_active_ones() -> None:
    d = Driver()
    d.m.standby_replicas = 1
    a = d.join("a")
    assert a.active_tasks == ALL and a.standby_tasks == frozenset()  # no other process yet
    b = d.join("b")
    a2 = d.beat("a", a.member_epoch)
    a3 = d.beat("a", a.member_epoch, owned=a2.active_tasks)  # a revoked what b gets: it keeps copies of them
    b2 = d.beat("b", b.member_epoch)
    stateful = frozenset(t for t in ALL if t[0] == "1")  # WORDCOUNT's subtopology 1 has the store
    assert b2.active_tasks == ALL - a2.active_tasks and b2.standby_tasks == a2.active_tasks & stateful
    assert (a3.active_tasks, a3.standby_tasks) == (a2.active_tasks, b2.active_tasks & stateful)
    assert d.beat("a", a3.member_epoch).active_tasks is None  # unchanged since: not sent again
    group = d.m.groups["app"]
    back = StreamsGroupMachine(6000, lambda: d.partitions).restore("app", {**dict(d.m.records(group))}, d.now)
    assert {m: x.standby for m, x in back.members.items()} == {m: x.standby for m, x in group.members.items()}
    assert back.standby_targets == group.standby_targets
