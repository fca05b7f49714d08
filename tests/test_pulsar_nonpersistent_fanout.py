"""The non-persistent fan-out (kop/pulsar/nonpersistent.py), sans-IO: topics, subscriptions and the dispatch rule
driven with plain objects standing for connections (anything with write/send/backlogged is a Sink); the MESSAGE
frames they receive are decoded with the Pulsar codec. The e2e side is tests/e2e/test_pulsar_nonpersistent.py."""

from __future__ import annotations

from kop.pulsar.codec import commands as c
from kop.pulsar.codec.framing import FrameReader, encode_headers_and_payload
from kop.pulsar.key_shared import key_hash
from kop.pulsar.nonpersistent import (
    EXCLUSIVE,
    FAILOVER,
    KEY_SHARED,
    SHARED,
    NonPersistentTopics,
    NPConsumer,
    NPProducer,
    NPTopic,
    topic_stats,
)
from kop.topics.names import TopicName


class Conn:
    """A connection's outside: what was written, and whether its send buffer is over its mark."""

    def __init__(self, name: str = "c") -> None:
        self.reader = FrameReader()
        self.backlogged = False
        self.protocol_version = 21
        self.peer = f"127.0.0.1:{abs(hash(name)) % 60000}"
        self.client_version = "test"
        self.np_producers: dict[int, NPProducer] = {}
        self.np_consumers: dict[int, NPConsumer] = {}
        self.commands: list[c.pb.BaseCommand] = []

    def write(self, data: bytes) -> None:
        self.reader.feed(data)

    def send(self, cmd: c.pb.BaseCommand) -> None:
        self.commands.append(cmd)

    def messages(self) -> list[tuple[int, bytes, tuple[int, int, int]]]:
        """(consumer id, payload, message id) of every MESSAGE written so far."""
        out = []
        while (frame := self.reader.next_frame()) is not None:
            mid = frame.inner.message_id
            out.append((frame.inner.consumer_id, bytes(frame.payload), (mid.ledgerId, mid.entryId, mid.partition)))
        return out


NAME = TopicName("public", "default", "t")


def entry(payload: bytes, key: str | None = None) -> bytes:
    md = c.pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if key is not None:
        md.partition_key = key
    return encode_headers_and_payload(md, payload)


def setup(partition: int | None = None) -> tuple[NonPersistentTopics, NPTopic, NPProducer]:
    registry = NonPersistentTopics()
    topic = registry.open(NAME, partition)
    producer = NPProducer(Conn("producer"), 1, "p", topic, b"")
    topic.producers["p"] = producer
    return registry, topic, producer


def consumer(topic: NPTopic, sub: str, sub_type: int, conn: Conn, cid: int, permits: int, name: str = "",
             priority: int = 0) -> NPConsumer:
    s = topic.subscription(sub, sub_type, True)
    k = NPConsumer(conn, cid, s, name or f"k{cid}", priority)
    k.permits = permits
    assert s.add_consumer(k, sub_type) is None
    return k


def test_exclusive_gets_entries_while_it_has_permits_and_the_rest_is_dropped():
    _, topic, producer = setup()
    conn = Conn()
    k = consumer(topic, "s", EXCLUSIVE, conn, 7, permits=2)
    drops = [topic.publish(producer, entry(f"m{i}".encode()), 1, 0) for i in range(4)]
    assert drops == [0, 0, 1, 1]
    got = conn.messages()
    assert [(cid, payload) for cid, payload, _ in got] == [(7, b"m0"), (7, b"m1")]
    assert {mid for _, _, mid in got} == {(0, 0, -1)}  # non-persistent ids: ledger 0, entry 0, no partition
    sub = topic.subscriptions["s"]
    assert (sub.dropped, sub.msg_out, k.msg_out, k.permits) == (2, 2, 2, 0)
    k.permits += 1  # a FLOW: the next entry goes out, the dropped ones never do
    topic.publish(producer, entry(b"m4"), 1, 0)
    assert [p for _, p, _ in conn.messages()] == [b"m4"]
    stats = topic_stats(topic)
    assert stats["msgInCounter"] == 5 and stats["subscriptions"]["s"]["msgDropCount"] == 2
    assert stats["subscriptions"]["s"]["msgOutCounter"] == 3 and stats["publishers"][0]["producerName"] == "p"


def test_a_backlogged_connection_drops_instead_of_queueing():
    _, topic, producer = setup()
    conn = Conn()
    consumer(topic, "s", EXCLUSIVE, conn, 1, permits=100)
    conn.backlogged = True
    topic.publish(producer, entry(b"lost"), 3, 0)
    conn.backlogged = False
    topic.publish(producer, entry(b"kept"), 1, 0)
    assert [p for _, p, _ in conn.messages()] == [b"kept"]
    assert topic.subscriptions["s"].dropped == 3  # an entry's messages all count


def test_every_subscription_gets_each_entry_and_partition_ids_name_the_partition():
    _, topic, producer = setup(partition=2)
    a, b = Conn("a"), Conn("b")
    consumer(topic, "one", EXCLUSIVE, a, 1, permits=10)
    consumer(topic, "two", EXCLUSIVE, b, 2, permits=10)
    topic.publish(producer, entry(b"x"), 1, 0)
    assert a.messages() == [(1, b"x", (0, 0, 2))]
    assert b.messages() == [(2, b"x", (0, 0, 2))]
    assert topic.full_name == "non-persistent://public/default/t-partition-2"


def test_shared_round_robin_skips_consumers_without_permits():
    _, topic, producer = setup()
    conn = Conn()
    consumer(topic, "s", SHARED, conn, 1, permits=10)
    consumer(topic, "s", SHARED, conn, 2, permits=1)
    consumer(topic, "s", SHARED, conn, 3, permits=10)
    for i in range(6):
        topic.publish(producer, entry(f"m{i}".encode()), 1, 0)
    assert [cid for cid, _, _ in conn.messages()] == [1, 2, 3, 1, 3, 1]


def test_key_shared_keeps_a_key_on_one_consumer():
    _, topic, producer = setup()
    conn = Conn()
    consumer(topic, "s", KEY_SHARED, conn, 1, permits=100)
    consumer(topic, "s", KEY_SHARED, conn, 2, permits=100)
    for i in range(20):
        key = f"key{i % 4}"
        topic.publish(producer, entry(key.encode(), key), 1, key_hash(key.encode()))
    by_key: dict[bytes, set[int]] = {}
    for cid, payload, _ in conn.messages():
        by_key.setdefault(payload, set()).add(cid)
    assert len(by_key) == 4 and all(len(owners) == 1 for owners in by_key.values())


def test_failover_sends_to_the_active_consumer_and_tells_who_is_active():
    _, topic, producer = setup()
    first, second = Conn("1"), Conn("2")
    consumer(topic, "s", FAILOVER, second, 2, permits=10, name="b")
    k1 = consumer(topic, "s", FAILOVER, first, 1, permits=10, name="a")  # sorts first: becomes the active one
    topic.publish(producer, entry(b"x"), 1, 0)
    assert [cid for cid, _, _ in first.messages()] == [1] and second.messages() == []
    told = {cmd.active_consumer_change.consumer_id: cmd.active_consumer_change.is_active
            for conn in (first, second) for cmd in conn.commands if cmd.type == c.ACTIVE_CONSUMER_CHANGE}
    assert told == {1: True, 2: False}
    k1.close()
    topic.publish(producer, entry(b"y"), 1, 0)
    assert [p for _, p, _ in second.messages()] == [b"y"]


def test_consumer_admission_as_pulsar_answers_it():
    _, topic, _ = setup()
    conn = Conn()
    consumer(topic, "ex", EXCLUSIVE, conn, 1, permits=1)
    sub = topic.subscriptions["ex"]
    assert sub.add_consumer(NPConsumer(conn, 2, sub, "k2", 0), EXCLUSIVE) == (
        c.ServerError.ConsumerBusy, "Exclusive consumer is already connected")
    assert sub.add_consumer(NPConsumer(conn, 3, sub, "k3", 0), SHARED) == (
        c.ServerError.ConsumerBusy, "Subscription is of different type")


def test_a_topic_lives_while_it_has_producers_or_subscriptions():
    registry, topic, producer = setup()
    k = consumer(topic, "s", EXCLUSIVE, Conn(), 1, permits=1)
    producer.close()
    assert registry.get(NAME, None) is topic
    k.close()  # its subscription goes with its last consumer, and the idle topic with it
    assert "s" not in topic.subscriptions and registry.get(NAME, None) is None
    assert registry.open(NAME, None) is not topic


def test_drops_are_exported_as_a_counter_per_subscription():
    from prometheus_client import generate_latest

    from kop.metrics import BrokerMetrics
    from kop.pulsar.nonpersistent import metric_samples

    _, topic, producer = setup()
    consumer(topic, "s", EXCLUSIVE, Conn(), 1, permits=1)
    for i in range(3):
        topic.publish(producer, entry(f"m{i}".encode()), 1, 0)
    metrics = BrokerMetrics()
    metrics.pulsar = metric_samples(topic)
    text = generate_latest(metrics.registry).decode()
    line = 'pulsar_subscription_msg_drop_total{namespace="public/default",subscription="s",' \
           'topic="non-persistent://public/default/t"} 2.0'
    assert line in text
    assert 'pulsar_subscription_msg_out_total{namespace="public/default",subscription="s",' \
           'topic="non-persistent://public/default/t"} 1.0' in text


def test_a_released_topic_tells_its_clients_to_go():
    registry, topic, producer = setup()
    producer.conn.np_producers[1] = producer
    conn = Conn()
    k = consumer(topic, "s", SHARED, conn, 4, permits=1)
    conn.np_consumers[4] = k
    other = registry.open(TopicName("public", "default", "kept"), None)
    consumer(other, "s", EXCLUSIVE, Conn(), 5, permits=1)
    assert registry.disown(lambda t: t is other) == 1
    assert [cmd.type for cmd in producer.conn.commands] == [c.CLOSE_PRODUCER]
    assert [(cmd.type, cmd.close_consumer.consumer_id) for cmd in conn.commands] == [(c.CLOSE_CONSUMER, 4)]
    assert not producer.conn.np_producers and not conn.np_consumers
    assert registry.get(NAME, None) is None and registry.get(other.name, None) is other
