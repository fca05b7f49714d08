"""Issue 23, streams groups (KIP-1071): Kafka Streams 4.4 with `group.protocol=streams` on our broker and on
Apache Kafka 4.4.

Kafka's own WordCountDemo (the jars of test_transactions_streams.py) runs as two instances of one application
with exactly_once_v2 on a 2-partition input topic: the coordinator creates the repartition and changelog topics
and gives each instance tasks (and, with one standby replica, a copy of the other's stateful tasks); one instance
is SIGKILLed, its member is fenced when its session ends (the
group's session timeout is set to Kafka's smallest allowed, 6 s) and the survivor takes over its tasks and
state; the last count of every word read with read_committed equals the true counts. kafka-streams-groups
(Kafka 4.4's StreamsGroupCommand) lists, describes and, once both instances are gone, deletes the group. The group machine's rules (epochs, revocation,
static members, session expiry) and the assignor are unit tests: tests/test_coordinator_streams.py.
"""

from __future__ import annotations

import collections
import re
import time
import uuid

import pytest

from kop.protocol import api_info
from tests.e2e.test_transactions_streams import IN, OUT, WORDS, last_counts, produce_lines, streams_app
from tests.support.acl_brokers import RawClient
from tests.support.clients import create_topic

pytestmark = pytest.mark.java
GROUPS_TOOL = "org.apache.kafka.tools.streams.StreamsGroupCommand"
# Kafka 4.4's group.streams.* defaults hold a session for 45 s at least: 6 s makes a killed member go quickly.
# One standby replica: each instance keeps a copy of the other's state while both run.
KAFKA_PROPERTIES = {"group.streams.min.session.timeout.ms": "6000", "group.streams.session.timeout.ms": "6000",
                    "group.streams.min.heartbeat.interval.ms": "1000", "group.streams.heartbeat.interval.ms": "1000",
                    "group.streams.num.standby.replicas": "1"}
KOP_OVERRIDES = {"groupStreamsSessionTimeoutMs": 6000, "groupStreamsHeartbeatIntervalMs": 1000,
                 "groupStreamsNumStandbyReplicas": 1}


def _props(tmp_path, bootstrap: str, app_id: str, name: str):
    props = tmp_path / f"{name}.properties"
    props.write_text("\n".join([
        f"bootstrap.servers={bootstrap}", f"application.id={app_id}", "group.protocol=streams",
        "processing.guarantee=exactly_once_v2", "replication.factor=1", "commit.interval.ms=100",
        f"state.dir={tmp_path / ('state-' + name)}", "num.stream.threads=1", ""]))
    return props


def _lines(java_tools, bootstrap: str, *args: str) -> list[str]:
    return java_tools.run(GROUPS_TOOL, "--bootstrap-server", bootstrap, *args, check=True).lines


# WordCount's two subtopologies (0: the input, 1: the repartition topic), 2 partitions each
ALL_TASKS = {("0", 0), ("0", 1), ("1", 0), ("1", 1)}


def _tasks(text: str) -> set:
    return {(sub, int(p)) for sub, ps in re.findall(r"(\w+):\[([\d, ]*)\]", text) for p in ps.replace(",", " ").split()}


def _standby(java_tools, bootstrap: str, group: str) -> tuple[dict[str, set], dict[str, set]]:
    """({member id: its standby tasks}, {member id: its warm-up tasks}) as kafka-streams-groups --describe
    --members prints them."""
    standby, warmup = {}, {}
    for line in _lines(java_tools, bootstrap, "--describe", "--group", group, "--members")[1:]:
        if line.startswith(group):
            part = line.split("STANDBY:", 1)[1] if "STANDBY:" in line else ""
            standby[line.split()[1]] = _tasks(part.split("WARMUP:")[0])
            warmup[line.split()[1]] = _tasks(part.split("WARMUP:", 1)[1] if "WARMUP:" in part else "")
    return standby, warmup


def _members(java_tools, bootstrap: str, group: str, want: int, timeout: float = 60) -> dict[str, set]:
    """kafka-streams-groups --describe --members: {member id: its active tasks}, described again until the group
    has `want` members each STABLE-looking (every task assigned once) or the timeout passes."""
    deadline = time.monotonic() + timeout
    while True:
        lines = _lines(java_tools, bootstrap, "--describe", "--group", group, "--members")
        members = {}
        for line in lines[1:]:
            if line.startswith(group) and "ACTIVE:" in line:
                active = line.split("ACTIVE:", 1)[1].split("STANDBY:")[0]
                members[line.split()[1]] = _tasks(active)
        done = len(members) == want and sum(map(len, members.values())) == (len(ALL_TASKS) if want else 0)
        if done or time.monotonic() > deadline:
            return members
        time.sleep(1)


def test_word_count_with_two_instances_one_killed(target, java_tools, tmp_path) -> None:
    b = target.dedicated_broker(KAFKA_PROPERTIES, **KOP_OVERRIDES)
    create_topic(b.bootstrap, IN, 2)
    create_topic(b.bootstrap, OUT, 1)
    app_id = f"wc-{uuid.uuid4().hex[:8]}"
    first = [" ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 4)) for i in range(60)]
    second = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(2)) for i in range(40)]
    counts_first = collections.Counter(w for line in first for w in line.split())
    counts_all = counts_first + collections.Counter(w for line in second for w in line.split())
    produce_lines(b.bootstrap, first)
    apps = [streams_app(_props(tmp_path, b.bootstrap, app_id, n)) for n in ("a", "b")]
    try:
        assert last_counts(b.bootstrap, dict(counts_first)) == dict(counts_first)
        listed = _lines(java_tools, b.bootstrap, "--list")
        assert app_id in listed, listed
        members = _members(java_tools, b.bootstrap, app_id, 2)
        assert len(members) == 2 and set().union(*members.values()) == ALL_TASKS, members
        standby, warmup = _standby(java_tools, b.bootstrap, app_id)
        # copies of the stateful subtopology's tasks only (1: the counts' store), each of the other's
        assert {m: standby[m] for m in members} == {m: {t for t in ALL_TASKS - ts if t[0] == "1"}
                                                    for m, ts in members.items()}, standby
        # no warm-up tasks: Kafka 4.4.0's broker creates none (its assignment refiner passes the target on)
        assert {m: warmup[m] for m in members} == {m: set() for m in members}, warmup
        apps[0].kill()  # SIGKILL: its member leaves only when its session ends
        apps[0].wait(60)
        produce_lines(b.bootstrap, second)
        assert last_counts(b.bootstrap, dict(counts_all)) == dict(counts_all)
        members = _members(java_tools, b.bootstrap, app_id, 1)
        assert list(members.values()) == [ALL_TASKS], members
        apps[1].kill()  # the group empties when this session ends too; an empty group can be deleted
        apps[1].wait(60)
        assert _members(java_tools, b.bootstrap, app_id, 0) == {}
        deleted = java_tools.run(GROUPS_TOOL, "--bootstrap-server", b.bootstrap, "--delete", "--group", app_id)
        assert "successful" in deleted.stdout, deleted.stdout
        assert app_id not in _lines(java_tools, b.bootstrap, "--list")
    finally:
        for app in apps:
            app.kill()
            app.wait(60)


def _join(Q, group: str, member: str, source: str, changelog: str, topology: bool = True):
    info = Q.TopicInfo(name=changelog, partitions=0, replication_factor=0, topic_configs=[])
    return Q(group_id=group, member_id=member, member_epoch=0, endpoint_information_epoch=-1, rebalance_timeout_ms=30000,
             topology=Q.Topology(epoch=0, subtopologies=[Q.Subtopology(
                 subtopology_id="0", source_topics=[source], source_topic_regex=[], state_changelog_topics=[info],
                 repartition_sink_topics=[], repartition_source_topics=[], copartition_groups=[])]) if topology else None,
             active_tasks=[], standby_tasks=[], warmup_tasks=[], process_id=f"p-{member}")


def test_heartbeat_answers_as_kafka(target) -> None:
    """Raw StreamsGroupHeartbeat/Describe requests (kop.protocol's codec) and what both brokers answer: a join whose
    changelog topic is missing (MISSING_INTERNAL_TOPICS, no tasks until the coordinator has created it), every task
    once it exists, Kafka's errors for a wrong epoch, an unknown member, a join without topology, a missing
    source topic (MISSING_SOURCE_TOPICS) and a changelog topic with another partition count than the tasks
    (INCORRECTLY_PARTITIONED_TOPICS, no tasks), the describe of the group, and a leave."""
    b = target.module_broker()
    source, app = target.topic("in"), target.topic("app")
    create_topic(b.bootstrap, source, 2)
    Q, D = api_info(88).request_class, api_info(89).request_class
    c = RawClient(b.bootstrap)
    try:
        F = api_info(10).request_class
        for _ in range(100):  # a fresh broker creates __consumer_offsets on the first FindCoordinator
            (found,) = c.call(10, 4, F(key_type=0, coordinator_keys=[app])).coordinators
            if found.error_code == 0:
                break
            time.sleep(0.2)
        for _ in range(100):  # ... and loads its partition next (NOT_COORDINATOR until then)
            r = c.call(88, 0, _join(Q, app, "m1", source, f"{app}-store-changelog"))
            if r.error_code not in (14, 16):
                break
            time.sleep(0.2)
        # Kafka 4.4 also says ASSIGNMENT_DELAYED (5): the group's first assignment waits for the initial delay
        assert (r.error_code, [s.status_code for s in r.status or [] if s.status_code != 5], r.active_tasks) == (
            0, [3], []), r
        assert f"Internal topics are missing: {app}-store-changelog" in [s.status_detail for s in r.status], r
        assert r.member_epoch == 1, r  # a new group's first member
        epoch = r.member_epoch
        for _ in range(100):  # the changelog topic is being created: heartbeat until the tasks come
            r = c.call(88, 0, Q(group_id=app, member_id="m1", member_epoch=epoch, endpoint_information_epoch=-1))
            assert r.error_code == 0, r
            epoch = r.member_epoch
            if r.active_tasks:
                break
            time.sleep(0.2)
        assert [(t.subtopology_id, sorted(t.partitions)) for t in r.active_tasks] == [("0", [0, 1])], r
        assert r.heartbeat_interval_ms > 0 and not [s for s in r.status or [] if s.status_code != 0]
        for q, error in [
            (Q(group_id=app, member_id="m1", member_epoch=epoch + 1, endpoint_information_epoch=-1), 110),
            (Q(group_id=app, member_id="nobody", member_epoch=1, endpoint_information_epoch=-1), 25),
            (_join(Q, app, "m2", source, f"{app}-store-changelog", topology=False), 42),
        ]:
            assert c.call(88, 0, q).error_code == error, q
        missing = c.call(88, 0, _join(Q, app + "-2", "m1", source + "-none", f"{app}-2-store-changelog"))
        assert (missing.error_code, [s.status_code for s in missing.status if s.status_code != 5], missing.member_epoch
                ) == (0, [1], 1), missing
        assert not missing.active_tasks
        # a changelog topic that exists with another partition count than the tasks (2): no tasks, Kafka's status
        create_topic(b.bootstrap, f"{app}-3-store-changelog", 1)
        wrong = c.call(88, 0, _join(Q, app + "-3", "m1", source, f"{app}-3-store-changelog"))
        assert (wrong.error_code, [s.status_code for s in wrong.status if s.status_code != 5], wrong.active_tasks
                ) == (0, [2], []), wrong
        assert [s.status_detail for s in wrong.status if s.status_code == 2] == [
            f"Existing topic {app}-3-store-changelog has different number of partitions: expected 2, found 1"], wrong
        (g,) = c.call(89, 0, D(group_ids=[app], include_authorized_operations=False)).groups
        assert (g.error_code, g.group_state, [m.member_id for m in g.members]) == (0, "Stable", ["m1"]), g
        assert [(s.subtopology_id, s.source_topics) for s in g.topology.subtopologies] == [("0", [source])]
        (none,) = c.call(89, 0, D(group_ids=[app + "-none"], include_authorized_operations=False)).groups
        assert none.error_code == 69, none
        left = c.call(88, 0, Q(group_id=app, member_id="m1", member_epoch=-1, endpoint_information_epoch=-1))
        assert (left.error_code, left.member_epoch) == (0, -1), left
    finally:
        c.close()
