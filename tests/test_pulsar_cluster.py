"""The pulsar handler in cluster mode: two brokers on one ZooKeeper chroot and the shared bookies
(tests/support/bookkeeper.py). LOOKUP answers Connect for the partitions this broker owns and Redirect to the
owner's registered pulsar:// address for the others; a real `pulsar-client` given only the first broker's URL
produces to and consumes from every partition; a durable subscription survives the takeover of the partitions
of a broker that stopped."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from kop.pulsar.codec import commands as c
from tests.support.bookkeeper import shared_cluster
from tests.support.clients import create_topic, end_offsets
from tests.support.cluster import eventually, metadata, start_brokers, stop_brokers
from tests.support.pulsar_wire import WireClient

PARTITIONS = 12
RECEIVE_MS = 60000  # a guard against hangs, not a timing assertion
LOOKUP = c.pb.CommandLookupTopicResponse


@pytest.fixture
def brokers(tmp_path_factory):
    cluster = shared_cluster()
    cluster.ensure_all_up()
    bs = start_brokers(tmp_path_factory, cluster, 2)
    yield bs
    stop_brokers(bs)


def leaders_of(bootstrap: str, topic: str) -> dict[int, int] | None:
    """Partition -> leader id, None until every partition has one."""
    m = metadata(bootstrap, [topic])
    out = {p: leader for (t, p), (leader, err) in m.leaders.items() if t == topic and err == 0 and leader >= 0}
    return out if len(out) == PARTITIONS else None


def test_lookup_redirects_and_a_subscription_survives_a_takeover(brokers) -> None:
    b1, b2 = brokers
    topic = f"pc-{uuid.uuid4().hex[:8]}"
    create_topic(b1.bootstrap, topic, partitions=PARTITIONS)
    leaders = eventually("every partition has a leader", lambda: leaders_of(b1.bootstrap, topic))
    w = WireClient(b1.pulsar_port)
    w.connect()
    answers = {}
    for p in range(PARTITIONS):
        w.send(c.command(c.LOOKUP, topic=f"persistent://public/default/{topic}-partition-{p}", request_id=p))
        got = w.expect(c.LOOKUP_RESPONSE)
        answers[p] = (got.response, got.brokerServiceUrl, got.authoritative)
    w.close()
    for p, leader in leaders.items():
        url = b1.pulsar_url if leader == 1 else b2.pulsar_url
        kind = LOOKUP.Connect if leader == 1 else LOOKUP.Redirect
        assert answers[p] == (kind, url, True), (p, leader, answers[p])
    assert {LOOKUP.Connect, LOOKUP.Redirect} == {a[0] for a in answers.values()}  # both brokers own some

    client = pulsar.Client(b1.pulsar_url, operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, "across", consumer_type=pulsar.ConsumerType.Shared,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(60):
            producer.send(f"m{i}".encode(), partition_key=f"k{i}")
        offsets = end_offsets(b1.bootstrap, topic, PARTITIONS)
        assert sum(offsets.values()) == 60
        first = [consumer.receive(RECEIVE_MS) for _ in range(30)]
        for m in first:
            consumer.acknowledge(m)
        assert {m.message_id().partition() for m in first} <= set(range(PARTITIONS))
        consumer.close()  # acks persisted (CLOSE_CONSUMER answers once the cursors are written)
        b2.stop()  # broker 1 takes over broker 2's bundles, and the cursors with them
        eventually("broker 1 leads every partition",
                   lambda: (got := leaders_of(b1.bootstrap, topic)) and set(got.values()) == {1})
        consumer = client.subscribe(topic, "across", consumer_type=pulsar.ConsumerType.Shared)
        rest = [consumer.receive(RECEIVE_MS) for _ in range(30)]
        assert {m.data() for m in first} | {m.data() for m in rest} == {f"m{i}".encode() for i in range(60)}
        with pytest.raises(pulsar.Timeout):
            consumer.receive(2000)
    finally:
        client.close()
