"""Share groups in cluster mode (issue #23): three of our brokers on the shared ZooKeeper and bookies of
tests/support/bookkeeper.py, Kafka 4.4's KafkaShareConsumer (tests/support/ShareProbe.java).

The roles sit on different brokers, as Kafka places them: the topic partition is led by broker A (the
share-partition leader: acquisition, locks), its share-partition state lives in the __share_group_state
partition owned by B (the share coordinator: A reads and writes it with Read/WriteShareGroupState,
kop/coordinator/share/persister.py). Then:

1. a share consumer accepts r0-r9 (and releases what else it gets): the state is written from A to B;
   kafka-share-groups --describe --offsets and --reset-offsets reach B from the group coordinator, a broker
   other than A (ReadShareGroupStateSummary, InitializeShareGroupState; the lag and the reset's bounds from A
   by ListOffsets), and A takes the reset state up;
2. B is killed (SIGKILL): another broker loads the state partition - the share coordinator takeover - and a
   second consumer accepts r10-r19: it gets none of r0-r9 again;
3. a raw ShareFetch at A acquires r20-r29 and acknowledges nothing; A is killed (SIGKILL): the survivor leads
   the partition and reads the state from the new share coordinator; a third consumer gets exactly r20-r29
   (acquired but unacknowledged records come back, acknowledged ones do not).

Every record is accepted exactly once over the three consumers. FindCoordinator's share key names B first,
then B's successor.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.e2e.test_share_groups import _produce, _run_probe, _share_groups
from tests.support.clients import create_topic
from tests.support.cluster import broker_id, eventually, leader_of, metadata, start_brokers, stop_brokers
from tests.support.txn_wire import RawClient

ZERO_UUID = bytes(16)


def _share_coordinator(bootstrap: str, group: str, topic_id: bytes) -> int:
    """The node FindCoordinator (v6, key type 2) names for the share-partition group:topicId:0, or -1."""
    from kop.coordinator.share.records import coordinator_key

    return _find_coordinator(bootstrap, 2, coordinator_key(group, topic_id, 0))


def _find_coordinator(bootstrap: str, key_type: int, key: str) -> int:
    """The node FindCoordinator (v6) names for the key (0: a group, 2: a share-partition), or -1."""
    c = RawClient(bootstrap)
    try:
        found = c.call(10, 6, key_type=key_type, coordinator_keys=[key]).coordinators[0]
    finally:
        c.close()
    return found.node_id if found.error_code == 0 else -1


def _acquire(bootstrap: str, group: str, topic_id: bytes) -> tuple[RawClient, list[tuple[int, int]]]:
    """A ShareFetch of a member that acknowledges nothing: its connection (kept open, so the records stay
    acquired) and the offset ranges it acquired."""
    from kop.protocol import api_info

    R: Any = api_info(78).request_class
    c = RawClient(bootstrap)
    got = c.call(78, 1, group_id=group, member_id=uuid.uuid4().hex, share_session_epoch=0, max_wait_ms=5000,
                 min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500, forgotten_topics_data=[],
                 topics=[R.FetchTopic(topic_id=topic_id, partitions=[R.FetchTopic.FetchPartition(
                     partition_index=0, acknowledgement_batches=[])])])
    assert got.error_code == 0, got
    ranges = [(a.first_offset, a.last_offset) for t in got.responses for p in t.partitions
              for a in p.acquired_records]
    return c, ranges


def _accepted(out: list[str]) -> list[str]:
    assert out[-1] == "DONE", out
    return [line.split()[1] for line in out if line.startswith("GOT ") and line.split()[2] == "ACCEPT"]


def _got(out: list[str]) -> set[str]:
    return {line.split()[1] for line in out if line.startswith("GOT ")}


def test_share_group_survives_share_coordinator_and_leader_kills(cluster, tmp_path_factory, java_tools) -> None:
    brokers = start_brokers(tmp_path_factory, cluster, 3)
    raw: RawClient | None = None
    try:
        by_id = {broker_id(b): b for b in brokers}
        topic = "share-cluster-" + uuid.uuid4().hex[:6]
        create_topic(brokers[0].bootstrap, topic, 1)
        a = leader_of(brokers, topic, 0)
        topic_id = eventually("the topic's id", lambda: _topic_id_of(a.bootstrap, topic))
        # a group whose share-partition state lives on another broker than the partition's leader, and whose
        # group coordinator (where the admin requests go) is not the leader either: it asks the leader for the
        # partition's offsets (--describe's lag, --reset-offsets's bounds)
        group, b_id = next((g, n) for g in (f"share-cluster-g{i}" for i in range(400))
                           if (n := _share_coordinator(a.bootstrap, g, topic_id)) not in (-1, broker_id(a))
                           and _find_coordinator(a.bootstrap, 0, g) not in (-1, broker_id(a)))
        b = by_id[b_id]
        _produce(a.bootstrap, topic, [f"r{i}" for i in range(30)])

        everywhere = ",".join(x.bootstrap for x in brokers)
        first = _run_probe(everywhere, topic, group, "part", 10, 10)
        assert sorted(_accepted(first)) == sorted(f"r{i}" for i in range(10))
        # the admin path reaches B wherever the group coordinator is: the summary (start 10, lag 20), and a reset
        # to 10 (InitializeShareGroupState at a raised state epoch) that A, holding the old window, takes up
        assert _share_groups(java_tools, everywhere, group, "--describe", "--offsets") == [
            [group, topic, "0", "10", "20"]]
        assert _share_groups(java_tools, everywhere, group, "--reset-offsets", "--to-offset", "10", "--execute",
                             "--topic", topic) == [[group, topic, "0", "10"]]

        b.kill()  # the share coordinator
        live = [x for x in brokers if x is not b]
        successor = eventually("a new share coordinator", lambda: (
            n if (n := _share_coordinator(a.bootstrap, group, topic_id)) not in (-1, b_id) else None), timeout=120)
        assert successor in {broker_id(x) for x in live}
        second = _run_probe(",".join(x.bootstrap for x in live), topic, group, "part", 20, 10)
        assert sorted(_accepted(second)) == sorted(f"r{i}" for i in range(10, 20))
        assert not _got(second) & {f"r{i}" for i in range(10)}  # acknowledged before the takeover: not again

        raw, ranges = _acquire(a.bootstrap, group, topic_id)
        assert ranges and min(f for f, _ in ranges) >= 20, ranges  # r20.. (offsets = indexes here)
        a.kill()  # the share-partition leader, with r20-r29 acquired and unacknowledged
        survivor = next(x for x in live if x is not a)
        eventually("the survivor leads the partition", lambda: metadata(survivor.bootstrap, [topic]).leaders[
            (topic, 0)][0] == broker_id(survivor), timeout=120)
        third = _run_probe(survivor.bootstrap, topic, group, "part", 1000, 10)
        assert sorted(_accepted(third)) == sorted(f"r{i}" for i in range(20, 30))
        assert not _got(third) & {f"r{i}" for i in range(20)}
    finally:
        if raw is not None:
            raw.close()
        stop_brokers(brokers)


def _topic_id_of(bootstrap: str, topic: str) -> bytes | None:
    from kop.protocol import api_info

    R: Any = api_info(3).request_class
    c = RawClient(bootstrap)
    try:
        md = c.call(3, 12, topics=[R.MetadataRequestTopic(topic_id=ZERO_UUID, name=topic)],
                    allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    finally:
        c.close()
    tid = md.topics[0].topic_id
    return tid if tid != ZERO_UUID else None
