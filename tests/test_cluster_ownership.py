"""Two brokers sharing one ZooKeeper chroot and the 4 bookies of tests/support/bookkeeper.py (E/Qw/Qa
3/3/2): what the Kafka APIs say about ownership (kop/cluster/ownership.py), asked with raw requests.

* Metadata and DescribeCluster list both brokers on either broker; both name the same leader for every
  partition, the leaders are spread over both brokers, and the ownership znodes in ZooKeeper
  (/namespace/<tenant>/<ns>/<range>) agree with the leaders.
* Produce, Fetch, ListOffsets and OffsetForLeaderEpoch for a partition sent to the broker that does not own
  it get NOT_LEADER_OR_FOLLOWER (nothing is written); the owner serves them.
* FindCoordinator answers the owner of the group's __consumer_offsets partition on both brokers; group
  APIs sent to the other broker get NOT_COORDINATOR, the coordinator serves them.
* Topic records are shared: created on one broker, altered (configs, partitions) and deleted on the
  other, each change is seen by the first.
* A second broker with the same kafkaBrokerId refuses to start with a message naming the id.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from kafka.protocol.admin import (
    CreatePartitionsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import (
    HeartbeatRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
)

from kop.cluster.bundles import bundle_for
from kop.coordinator.records import partition_for
from tests.support.admin import batch
from tests.support.bookkeeper import shared_cluster
from tests.support.clients import create_topic
from tests.support.cluster import (
    broker_id,
    eventually,
    find_coordinator,
    metadata,
    start_brokers,
    stop_brokers,
)
from tests.support.net import free_port
from tests.support.wire import Negotiated

NOT_LEADER_OR_FOLLOWER = 6
NOT_COORDINATOR = 16
UNKNOWN_TOPIC_OR_PARTITION = 3
PARTITIONS = 12
OFFSETS_PARTITIONS = 4


@pytest.fixture
def brokers(tmp_path_factory):
    cluster = shared_cluster()
    cluster.ensure_all_up()
    bs = start_brokers(tmp_path_factory, cluster, 2, offsetsTopicNumPartitions=OFFSETS_PARTITIONS)
    yield bs
    stop_brokers(bs)


def _spread(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> leader, once every partition has one."""
    md = eventually(f"leaders of {topic}", lambda: (m := metadata(bootstrap, [topic])) and all(
        m.leaders.get((topic, p), (-1, -1))[0] >= 0 for p in range(partitions)) and m)
    return {p: md.leaders[(topic, p)][0] for p in range(partitions)}


def _epoch_request(topic: str, partition: int) -> OffsetForLeaderEpochRequest:
    T = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
    return OffsetForLeaderEpochRequest(replica_id=-1, topics=[T(topic=topic, partitions=[
        T.OffsetForLeaderPartition(partition=partition, current_leader_epoch=-1, leader_epoch=0)])])


def test_metadata_leaders_and_not_leader_or_follower(brokers):
    b1, b2 = brokers
    by_id = {broker_id(b): b for b in brokers}
    # A fixed name (each test has its own chroot): placement is a function of names and broker ids, and
    # this topic's 12 partitions fall into bundles of both brokers.
    topic = "owned-a"
    create_topic(b1.bootstrap, topic, PARTITIONS)
    leaders = _spread(b1.bootstrap, topic, PARTITIONS)
    assert set(leaders.values()) == {1, 2}, f"every partition on one broker: {leaders}"

    # Both brokers list both brokers and agree on every leader and on the controller.
    for b in brokers:
        md = metadata(b.bootstrap, [topic])
        assert md.brokers == {1: ("127.0.0.1", b1.port), 2: ("127.0.0.1", b2.port)}
        assert md.controller == 1
        assert {p: md.leaders[(topic, p)] for p in range(PARTITIONS)} == {p: (leaders[p], 0) for p in leaders}
        with Negotiated(b.bootstrap) as w:
            dc = w.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1), cap=1)
        assert dc.error_code == 0 and dc.controller_id == 1
        assert {(x.broker_id, x.host, x.port) for x in dc.brokers} == {(1, "127.0.0.1", b1.port),
                                                                        (2, "127.0.0.1", b2.port)}

    # The ownership znodes say the same: the owner of each partition's bundle is its leader.
    zk = b1.cluster.zk()
    for p, leader in leaders.items():
        b = bundle_for("public", "default", topic, p, 4)
        data, stat = zk.get(f"{b1.chroot}/namespace/public/default/{b.range_name}")
        assert stat.ephemeralOwner != 0
        assert f'"brokerId": {leader}' in data.decode()

    # Each partition: the other broker refuses every partition-level request, the owner serves it.
    for p, leader in leaders.items():
        owner, other = by_id[leader], by_id[3 - leader]
        with Negotiated(other.bootstrap) as w:
            assert w.produce(topic, p, batch([b"refused"])).error_code == NOT_LEADER_OR_FOLLOWER
            assert w.fetch(topic, p, 0).error_code == NOT_LEADER_OR_FOLLOWER
            assert w.list_offset(topic, p, -1)[0] == NOT_LEADER_OR_FOLLOWER
            r = w.call(_epoch_request(topic, p), cap=4)
            assert r.topics[0].partitions[0].error_code == NOT_LEADER_OR_FOLLOWER
        with Negotiated(owner.bootstrap) as w:
            assert w.produce(topic, p, batch([f"v{p}".encode()])).error_code == 0
            fetched = w.fetch(topic, p, 0)
            assert fetched.error_code == 0 and fetched.high_watermark == 1  # the refused batch is not there
            assert w.list_offset(topic, p, -1)[:2] == (0, 1)
            r = w.call(_epoch_request(topic, p), cap=4)
            assert (r.topics[0].partitions[0].error_code, r.topics[0].partitions[0].end_offset) == (0, 1)


def test_find_coordinator_and_not_coordinator(brokers):
    by_id = {broker_id(b): b for b in brokers}
    md = metadata(brokers[0].bootstrap, ["__consumer_offsets"])
    offsets_leaders = {p: md.leaders[("__consumer_offsets", p)][0] for p in range(OFFSETS_PARTITIONS)}
    assert set(offsets_leaders.values()) == {1, 2}
    topic = "coord-" + uuid.uuid4().hex[:6]
    create_topic(brokers[0].bootstrap, topic, 1)
    seen = set()
    for group in [f"group-{i}" for i in range(12)]:
        expected = offsets_leaders[partition_for(group, OFFSETS_PARTITIONS)]
        seen.add(expected)
        for b in brokers:  # every broker names the same coordinator: the partition's owner
            err, node, host, port = eventually("a coordinator", lambda b=b, g=group: (
                r := find_coordinator(b.bootstrap, g))[0] == 0 and r)
            assert (node, host, port) == (expected, "127.0.0.1", by_id[expected].port)
        coordinator, other = by_id[expected], by_id[3 - expected]
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        commit = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                     group_instance_id=None, retention_time_ms=-1, topics=[T(name=topic, partitions=[
                                         T.OffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                                        committed_leader_epoch=-1,
                                                                        committed_metadata="")])])
        FT = OffsetFetchRequest.OffsetFetchRequestTopic
        fetch = OffsetFetchRequest(group_id=group, topics=[FT(name=topic, partition_indexes=[0])],
                                   require_stable=False)
        with Negotiated(other.bootstrap) as w:
            r = w.call(commit, cap=7)
            assert r.topics[0].partitions[0].error_code == NOT_COORDINATOR
            assert w.call(fetch, cap=7).error_code == NOT_COORDINATOR
            hb = w.call(HeartbeatRequest(group_id=group, generation_id=1, member_id="m",
                                         group_instance_id=None), cap=4)
            assert hb.error_code == NOT_COORDINATOR
        with Negotiated(coordinator.bootstrap) as w:
            assert eventually("commit", lambda w=w, c=commit: w.call(c, cap=7).topics[0].partitions[0].error_code == 0)
            r = w.call(fetch, cap=7)
            assert (r.error_code, r.topics[0].partitions[0].committed_offset) == (0, 5)
    assert seen == {1, 2}


def test_topic_changes_are_seen_by_every_broker(brokers):
    b1, b2 = brokers
    topic = "shared-" + uuid.uuid4().hex[:6]
    create_topic(b1.bootstrap, topic, 2)
    assert metadata(b2.bootstrap, [topic]).topic_errors[topic] == 0  # re-read on a miss, or the watch

    R = IncrementalAlterConfigsRequest
    with Negotiated(b2.bootstrap) as w:
        r = w.call(R(resources=[R.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            R.AlterConfigsResource.AlterableConfig(name="retention.ms", config_operation=0, value="123456")])],
            validate_only=False), cap=1)
        assert r.responses[0].error_code == 0
        r = w.call(CreatePartitionsRequest(topics=[CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic, count=5, assignments=None)], timeout_ms=30000, validate_only=False), cap=3)
        assert r.results[0].error_code == 0

    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": b1.bootstrap})

    def retention_on_b1() -> bool:
        res = ConfigResource("topic", topic)
        return admin.describe_configs([res])[res].result(30)["retention.ms"].value == "123456"

    eventually("retention.ms on broker 1", retention_on_b1)
    eventually("5 partitions on broker 1", lambda: sum(
        1 for t, _ in metadata(b1.bootstrap, [topic]).leaders if t == topic) == 5)

    with Negotiated(b2.bootstrap) as w:
        r = w.call(DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=topic, topic_id=b"\0" * 16)],
                                       topic_names=[topic], timeout_ms=30000), cap=5)
        assert r.responses[0].error_code == 0
    eventually("topic gone on broker 1",
               lambda: metadata(b1.bootstrap, [topic]).topic_errors[topic] == UNKNOWN_TOPIC_OR_PARTITION)


def test_a_second_broker_with_the_same_id_refuses_to_start(brokers, tmp_path):
    b1 = brokers[0]
    port = free_port()
    overrides = dict(b1.overrides, kafkaListeners=f"PLAINTEXT://127.0.0.1:{port}", kafkaBrokerId="1",
                     webServicePort="0", brokerServicePort=str(free_port()))
    cmd = [sys.executable, "-m", "kop.cli", "standalone", "--data-dir", str(tmp_path / "data")]
    for k, v in overrides.items():
        cmd += ["--override", f"{k}={v}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "kafkaBrokerId=1" in r.stderr and "already registered" in r.stderr, r.stderr[-3000:]
    # The first broker 1 is untouched: still registered and serving.
    assert metadata(b1.bootstrap, None).brokers.keys() == {1, 2}


def test_no_live_broker_means_no_controller_not_a_crash():
    """A Metadata request that arrives before this broker registered itself in ZooKeeper sees no live
    broker; it gets Kafka's -1 ("no controller") rather than a ValueError from min() of nothing."""
    from kop.cluster.ownership import Ownership

    class NoneLive(Ownership):
        def live_brokers(self):
            return []

    assert NoneLive().controller_id == -1
