"""PRODUCER/SEND/CLOSE_PRODUCER (kop/pulsar/produce.py) with the real `pulsar-client` against `kop standalone`:
messages land in the Kafka handler's partition logs, so Kafka consumers (kafka-python, confluent-kafka) read them
with continuous offsets and the mapped key/timestamp/headers; receipts carry ids that PIP-415's getMessageIdByIndex
names; producer names are unique and Exclusive access excludes others."""

from __future__ import annotations

import uuid

import pulsar
import pytest

from tests.support.admin import ok, topic_url
from tests.support.broker import KopBroker
from tests.support.clients import (
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    end_offsets,
)
from tests.support.java import JavaTools


def name() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def message_id_by_index(broker: KopBroker, topic: str, index: int) -> dict[str, int]:
    """PIP-415's answer for `topic` (a non-partitioned topic, or one partition's name)."""
    return ok(topic_url(broker.admin_url, topic) + f"/getMessageIdByIndex?index={index}")


CODECS = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("batched", [False, True], ids=["unbatched", "batched"])
def test_pulsar_messages_read_by_kafka_consumers(broker: KopBroker, client: pulsar.Client, codec: str,
                                                 batched: bool) -> None:
    topic = name()
    producer = client.create_producer(topic, compression_type=CODECS[codec], batching_enabled=batched,
                                      batching_max_messages=10, batching_max_publish_delay_ms=1000)
    ids: list[pulsar.MessageId] = []
    sent = []
    for i in range(25):
        key = f"key-{i}" if i % 5 else None
        props = {"idx": str(i), **({"even": "yes"} if i % 2 == 0 else {})}  # differ within a batch
        event = 1_700_000_000_000 + i if i % 3 else None
        value = b"" if i == 7 else f"value-{i}-".encode() * 20
        kw = {"properties": props}
        if key is not None:
            kw["partition_key"] = key
        if event is not None:
            kw["event_timestamp"] = event
        sent.append((key, value, props, event))
        if batched:
            producer.send_async(value, lambda res, mid: ids.append(mid) if res == pulsar.Result.Ok else None, **kw)
        else:
            ids.append(producer.send(value, **kw))
    producer.flush()
    assert len(ids) == 25
    assert end_offsets(broker.bootstrap, topic, 1) == {0: 25}  # N messages = N offsets, batched or not
    for got in (consume_kafka_python(broker.bootstrap, topic, {0: 25}), consume_confluent(broker.bootstrap, topic, {0: 25})):
        assert [g.offset for g in got] == list(range(25))
        for g, (key, value, props, event) in zip(got, sent, strict=True):
            assert g.key == (key.encode() if key else None)
            assert g.value == value
            assert dict((k, v.decode()) for k, v in g.headers) == props
            if event is not None:
                assert g.timestamp == event
            assert g.create_time
    # Receipts: (ledger, entry, partition); batch index = position in the batch; PIP-415 agrees offset by offset.
    # The producer auto-created a non-partitioned topic (Pulsar's default kind): partition -1.
    ordered = sorted(ids, key=lambda m: (m.ledger_id(), m.entry_id(), m.batch_index()))
    for offset, mid in enumerate(ordered):
        assert mid.partition() == -1
        admin = message_id_by_index(broker, topic, offset)
        assert (admin["ledgerId"], admin["entryId"], admin["partitionIndex"]) == (mid.ledger_id(), mid.entry_id(), -1)
    if batched:
        assert len({(m.ledger_id(), m.entry_id()) for m in ids}) < 25  # some entries hold several messages
    else:
        assert all(m.batch_index() == -1 for m in ids)


def test_keys_route_over_the_partitions_of_a_kafka_created_topic(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    create_topic(broker.bootstrap, topic, partitions=3)
    producer = client.create_producer(topic)
    parts: dict[str, set[int]] = {}
    for i in range(30):
        key = f"k{i % 6}"
        mid = producer.send(f"{i}".encode(), partition_key=key)
        parts.setdefault(key, set()).add(mid.partition())
    assert all(len(p) == 1 for p in parts.values())  # one key, one partition
    offsets = end_offsets(broker.bootstrap, topic, 3)
    assert sum(offsets.values()) == 30
    got = consume_kafka_python(broker.bootstrap, topic, offsets)
    for g in got:
        assert g.partition in parts[g.key.decode()]


def test_producer_names_are_unique_per_topic(client: pulsar.Client) -> None:
    topic = name()
    first = client.create_producer(topic, producer_name="only-one")
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="only-one")
    assert client.create_producer(topic).producer_name() != "only-one"  # generated names are unique too
    first.close()
    client.create_producer(topic, producer_name="only-one").send(b"after the first closed")


def test_exclusive_access_mode(client: pulsar.Client) -> None:
    topic = name()
    excl = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    excl.close()
    shared = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):  # Pulsar 4.0's answer (tests/e2e/test_pulsar_message_answers.py)
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.send(b"x")


def test_string_and_json_schemas_are_accepted(broker: KopBroker, client: pulsar.Client) -> None:
    """Schemas travel in PRODUCER/SUBSCRIBE and are registered (tests/e2e/test_pulsar_schemas.py has the rest); the
    payloads are the schema's bytes, which Kafka consumers read - the batch carrying the schema version in its
    attributes' high byte (kop/schemas/versions.py) included: kafka-python, librdkafka, aiokafka and the Java
    consumer (what Spark reads with) ignore it."""
    from pulsar.schema import Integer, JsonSchema, Record, String, StringSchema

    class Order(Record):
        item = String()
        count = Integer()

    topic = name()
    consumer = client.subscribe(topic, "s", schema=StringSchema(), initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic, schema=StringSchema()).send("grüße")
    assert consumer.receive(30000).value() == "grüße"
    assert [g.value for g in consume_kafka_python(broker.bootstrap, topic, {0: 1})] == ["grüße".encode()]
    assert [g.value for g in consume_confluent(broker.bootstrap, topic, {0: 1})] == ["grüße".encode()]
    assert [g.value for g in consume_aiokafka(broker.bootstrap, topic, {0: 1})] == ["grüße".encode()]
    java = JavaTools().run("kafka-console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                           "--from-beginning", "--max-messages", "1", "--timeout-ms", "30000", check=True)
    assert java.stdout.splitlines() == ["grüße"]
    topic = name()
    consumer = client.subscribe(topic, "s", schema=JsonSchema(Order), initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic, schema=JsonSchema(Order)).send(Order(item="tea", count=3))
    got = consumer.receive(30000).value()
    assert (got.item, got.count) == ("tea", 3)


def test_deduplication_by_producer_name_and_sequence_id(tmp_path) -> None:
    """brokerDeduplicationEnabled: a producer coming back learns its last sequence id, resends are not stored
    (also after a restart); without it (the module's broker) a resend is stored again."""
    broker = KopBroker(tmp_path / "kop", {"brokerDeduplicationEnabled": "true"})
    broker.start()
    try:
        topic = name()
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
        producer = client.create_producer(topic, producer_name="dp")
        assert producer.last_sequence_id() == -1
        for seq in range(5):
            producer.send(f"m{seq}".encode(), sequence_id=seq)
        producer.close()
        producer = client.create_producer(topic, producer_name="dp")
        assert producer.last_sequence_id() == 4
        producer.send(b"resent", sequence_id=3)
        producer.send(b"m5", sequence_id=5)
        assert end_offsets(broker.bootstrap, topic, 1) == {0: 6}
        client.close()
        broker.stop()
        broker.start()
        client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=30)
        producer = client.create_producer(topic, producer_name="dp")
        assert producer.last_sequence_id() == 5
        producer.send(b"resent again", sequence_id=5)
        producer.send(b"m6", sequence_id=6)
        values = [g.value for g in consume_kafka_python(broker.bootstrap, topic, {0: 7})]
        assert values == [f"m{i}".encode() for i in range(7)]
        client.close()
    finally:
        broker.stop()


def test_without_deduplication_a_resend_is_stored(broker: KopBroker, client: pulsar.Client) -> None:
    topic = name()
    producer = client.create_producer(topic, producer_name="nd")
    producer.send(b"a", sequence_id=0)
    producer.close()
    producer = client.create_producer(topic, producer_name="nd")
    assert producer.last_sequence_id() == -1
    producer.send(b"a", sequence_id=0)
    assert end_offsets(broker.bootstrap, topic, 1) == {0: 2}
