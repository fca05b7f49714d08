"""Pulsar delayed delivery (issue #22): `deliver_after` / `deliver_at` with pulsar-client.

A Pulsar-side module (tests/e2e/conftest.py): the same tests on Apache Pulsar standalone (`pulsar`, which
proves them right) and on ours on both storage backends. A delayed message is held back on Shared and Key_Shared
subscriptions - a receive shorter than the delay gets nothing, while messages sent after it arrive first, and it
comes later; the subscription's stats count it as delayed - and an Exclusive subscription gets it at once; a
delayed message negatively acknowledged after its time is redelivered. Ours only (the reference's fixture does not
restart): still-delayed messages are held again after a broker restart, and the others come when due; a Kafka
consumer reads every record at once, the delayed ones with their `pulsar.deliver_at` header.

No timed assertion beyond that ordering: the delay (DELAY_MS) is several times the short receive (SHORT_MS), and
the tick (delayedDeliveryTickTimeMillis, 1 s: how early a delayed message may go) is left at its default.
"""

from __future__ import annotations

import datetime
import time

import pulsar
import pytest

from tests.support.admin import ok, topic_url

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")
RECEIVE_MS = 30_000  # a generous bound for a receive that must succeed; never a measured quantity
SHORT_MS = 1000  # a receive that must get nothing: well inside the delay
DELAY_MS = 5000


def _client(service_url: str) -> pulsar.Client:
    return pulsar.Client(service_url, operation_timeout_seconds=60,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


@pytest.fixture
def client(pulsar_service_url: str):
    c = _client(pulsar_service_url)
    yield c
    c.close()


def _receive_nothing(consumer: pulsar.Consumer) -> None:
    with pytest.raises(pulsar.Timeout):
        got = consumer.receive(timeout_millis=SHORT_MS)
        pytest.fail(f"received {got.data()!r} before its time")


def _kafka_records(bootstrap: str, topic: str, n: int) -> list:
    """The first n records of the topic's partition 0, read by kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=RECEIVE_MS)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = []
        for record in consumer:
            records.append(record)
            if len(records) == n:
                break
        return records
    finally:
        consumer.close()


def _sub_stats(admin_url: str, topic: str, sub: str) -> dict:
    stats = ok(topic_url(admin_url, topic.rsplit('/', 1)[1]) + "/stats")  # non-partitioned
    return stats["subscriptions"][sub]


def test_shared_and_key_shared_hold_a_delayed_message_exclusive_does_not(target, client, pulsar_broker):
    """... and a delayed message negatively acknowledged after its time comes again."""
    topic = f"persistent://public/default/{target.topic('delay')}"
    held = {name: client.subscribe(topic, name, consumer_type=kind, negative_ack_redelivery_delay_ms=300)
            for name, kind in (("shared", pulsar.ConsumerType.Shared), ("key-shared", pulsar.ConsumerType.KeyShared))}
    exclusive = client.subscribe(topic, "exclusive", consumer_type=pulsar.ConsumerType.Exclusive)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"after", deliver_after=datetime.timedelta(milliseconds=DELAY_MS))
    producer.send(b"at", deliver_at=int(time.time() * 1000) + DELAY_MS)
    producer.send(b"now-1")
    producer.send(b"now-2")
    got = [exclusive.receive(RECEIVE_MS) for _ in range(4)]  # at once, in order
    assert [m.data() for m in got] == [b"after", b"at", b"now-1", b"now-2"]
    for consumer in held.values():
        first = [consumer.receive(RECEIVE_MS) for _ in range(2)]
        assert [m.data() for m in first] == [b"now-1", b"now-2"]
        for m in first:
            consumer.acknowledge(m)
    for consumer in held.values():
        _receive_nothing(consumer)
    for name in held:
        stats = _sub_stats(pulsar_broker.admin_url, topic, name)
        assert (stats["msgBacklog"], stats["msgDelayed"], stats["msgBacklogNoDelayed"]) == (2, 2, 0), stats
    for consumer in held.values():
        later = [consumer.receive(RECEIVE_MS) for _ in range(2)]
        assert sorted(m.data() for m in later) == [b"after", b"at"]
        assert [m.redelivery_count() for m in later] == [0, 0]
        consumer.acknowledge(later[1])
        consumer.negative_acknowledge(later[0])
        again = consumer.receive(RECEIVE_MS)
        assert (again.data(), again.redelivery_count()) == (later[0].data(), 1)
        consumer.acknowledge(again)


def test_still_delayed_messages_are_held_again_after_a_restart(tmp_path):
    """Ours only, so not parametrized by target (the reference's fixture does not restart; one embedded-storage
    broker suffices): the tracker is memory only and is rebuilt from the unacknowledged entries."""
    from tests.e2e.conftest import KOP_DEFAULTS
    from tests.support.broker import KopBroker

    broker = KopBroker(tmp_path / "kop", {**KOP_DEFAULTS, "messagingProtocols": "kafka,pulsar"})
    broker.start()
    try:
        topic = f"persistent://public/default/delay-restart-{int(time.time() * 1000)}"
        client = _client(broker.pulsar_service_url)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"in-an-hour", deliver_after=datetime.timedelta(hours=1))
        producer.send(b"soon", deliver_after=datetime.timedelta(milliseconds=DELAY_MS))
        producer.send(b"now")
        now = consumer.receive(RECEIVE_MS)
        assert now.data() == b"now"
        consumer.acknowledge(now)
        records = _kafka_records(broker.bootstrap, topic.rsplit("/", 1)[1], 3)  # Kafka has no delay: all at once
        assert [(r.value, dict(r.headers).get("pulsar.deliver_at") is not None) for r in records] == [
            (b"in-an-hour", True), (b"soon", True), (b"now", False)]
        client.close()  # its acknowledgement goes out first
        broker.stop()
        broker.start()
        client = _client(broker.pulsar_service_url)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        soon = consumer.receive(RECEIVE_MS)  # when due, whether that was before the restart finished or after
        assert soon.data() == b"soon"
        consumer.acknowledge(soon)
        _receive_nothing(consumer)
        stats = _sub_stats(broker.admin_url, topic, "sub")
        assert (stats["msgBacklog"], stats["msgDelayed"], stats["msgBacklogNoDelayed"]) == (1, 1, 0), stats
        client.close()
    finally:
        broker.stop()
