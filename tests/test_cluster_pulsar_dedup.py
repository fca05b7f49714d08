"""Pulsar de-duplication across an owner change (kop/pulsar/dedup.py), on two brokers sharing ZooKeeper and the
bookies of tests/support/bookkeeper.py, with the real pulsar-client.

The owner of a partition dies (SIGKILL) after appending SENDs whose de-duplication snapshot it did not write - the
case of an owner that lost its ZooKeeper session, or died between an append and the snapshot's write - and the
survivor takes the partition over. A producer of the same name that comes back learns its real last sequence id,
and its resend of a message the dead owner had stored is dropped: the survivor rebuilt the state from the
snapshot plus the entries after it (each keeps its producer name and sequence id). The stale snapshot is set in
ZooKeeper by the test, after the kill, as the dead owner left it before its last appends: the chaos suite meets
the same state by chance (tests/chaos/runner.py), this test every time.
"""

from __future__ import annotations

import uuid

import pulsar

from kop.managed_ledger.cursor import CursorInfo, cursor_path
from kop.pulsar.dedup import CURSOR
from kop.topics.names import TopicName
from tests.support.clients import consume_kafka_python, create_topic, end_offsets
from tests.support.cluster import eventually, leader_of, start_brokers, stop_brokers


def _client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def test_a_producer_resending_after_the_owner_died_stores_no_duplicate(cluster, tmp_path_factory):
    brokers = start_brokers(tmp_path_factory, cluster, 2, brokerDeduplicationEnabled="true",
                            messagingProtocols="kafka,pulsar")
    try:
        topic = "dedup-" + uuid.uuid4().hex[:6]
        create_topic(brokers[0].bootstrap, topic, 1)
        owner = leader_of(brokers, topic, 0)
        survivor = next(b for b in brokers if b is not owner)
        node = owner.chroot + cursor_path(TopicName("public", "default", topic).ledger_name(0), CURSOR)

        def snapshot(at_least: int) -> bytes | None:
            raw = cluster.zk().get(node)[0]
            return raw if CursorInfo.decode(raw).properties.get("dp", -1) >= at_least else None

        client = _client(owner.pulsar_url)
        producer = client.create_producer(topic, producer_name="dp", batching_enabled=False)
        for seq in range(2):
            producer.send(f"m{seq}".encode(), sequence_id=seq)
        stale = eventually("the snapshot after m1", lambda: snapshot(1))
        for seq in range(2, 5):
            producer.send(f"m{seq}".encode(), sequence_id=seq)
        eventually("the snapshot after m4", lambda: snapshot(4))
        client.close()
        owner.kill()
        cluster.zk().set(node, stale)  # what the owner left had its last snapshot writes not landed

        client = _client(survivor.pulsar_url)
        try:
            producer = eventually("a producer on the survivor", lambda: _producer(client, topic), timeout=120)
            assert producer.last_sequence_id() == 4  # the survivor replayed m2..m4 after the snapshot
            producer.send(b"resent m3", sequence_id=3)  # dropped: no entry stored
            producer.send(b"m5", sequence_id=5)
        finally:
            client.close()
        assert end_offsets(survivor.bootstrap, topic, 1) == {0: 6}
        values = [r.value for r in consume_kafka_python(survivor.bootstrap, topic, {0: 6})]
        assert values == [f"m{i}".encode() for i in range(6)]
    finally:
        stop_brokers(brokers)


def _producer(client: pulsar.Client, topic: str) -> pulsar.Producer | None:
    """The producer "dp" on the topic, once its partition has an owner again (None while it has none)."""
    try:
        return client.create_producer(topic, producer_name="dp", batching_enabled=False)
    except pulsar.PulsarException:
        return None
