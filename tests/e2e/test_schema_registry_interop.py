"""One schema registry for both protocols, end to end (issue #25 "Cross-protocol"): Confluent's 5-byte prefix and
Pulsar's schema version meet in the broker (kop/pulsar/convert.py, docs/pulsar.md "Schema ids").

A Pulsar-side module on our broker only (`kop`: Apache Pulsar has no Kafka listener and no Confluent registry),
one broker for the module speaking both protocols, its registry at the admin URL's root. With the real clients:

* confluent-kafka's AvroSerializer (SchemaRegistryClient on the admin URL) -> pulsar-client with AvroSchema: the
  records decode field by field, and a bytes consumer gets exactly the serializer's payload without the prefix;
* pulsar-client's Avro producer (batched) -> confluent-kafka's AvroDeserializer: the records decode field by field;
  a Kafka consumer without a deserializer sees 0x00 + the id the registry gives `<topic>-value` + the Pulsar
  payload, and a Pulsar Avro consumer of the same topic still reads the records (the prefix goes both ways);
* the schema evolves through the registry (Confluent versions 1 and 2 = Pulsar versions 0 and 1): each entry names
  its records' version, and a Pulsar consumer of the new schema reads the old records through their writer schema;
* confluent-kafka's JSONSerializer -> a Pulsar consumer: the JSON document without the prefix;
* a Kafka topic written without a registry: Pulsar consumers get the values unchanged, also values that look
  prefixed (an unknown id, and the id of another topic's schema).
"""

from __future__ import annotations

import json
import uuid

import pulsar
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pulsar.schema import Array, AvroSchema, Double, Integer, Record, String

from tests.support.clients import consume_confluent, create_topic

PULSAR_SIDE_TARGETS = ("kop",)

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


class User(Record):
    _sorted_fields = True
    name = String(required=True)
    age = Integer(required=True)
    score = Double()
    tags = Array(String())


class UserV2(Record):  # + an optional field: compatible both ways with User
    _sorted_fields = True
    name = String(required=True)
    age = Integer(required=True)
    score = Double()
    tags = Array(String())
    email = String(default=None, required_default=True)


UserV2.__name__ = "User"  # one record name, so that Avro reads them as versions of one schema

FIELDS = ("name", "age", "score", "tags")
USER_AVRO = json.dumps(User.schema())  # the Avro schema both sides use (Pulsar's text is the same, indented)


def users(n: int, tag: str) -> list[dict]:
    return [{"name": f"{tag}-{i}-" + "é" * (i % 3), "age": i, "score": None if i % 3 == 0 else i * 1.5,
             "tags": None if i % 4 == 1 else [f"t{j}" for j in range(i % 3)]} for i in range(n)]


def fields(record: object) -> dict:
    return {f: getattr(record, f) for f in FIELDS}


def pulsar_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))


def kafka_produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})  # a few records per batch
    errors: list[object] = []
    for i, value in enumerate(values):
        producer.produce(topic, key=f"k{i}".encode(), value=value,
                         on_delivery=lambda err, _msg: errors.append(err) if err is not None else None)
    assert producer.flush(60) == 0 and not errors, errors


def receive(consumer: pulsar.Consumer, n: int) -> list[pulsar.Message]:
    got = []
    for _ in range(n):
        m = consumer.receive(RECEIVE_MS)
        consumer.acknowledge(m)
        got.append(m)
    return got


def test_confluent_avro_records_read_by_pulsar_avro_consumers(pulsar_broker):
    bootstrap = pulsar_broker.handle.bootstrap
    topic = f"sr-k2p-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    registry = SchemaRegistryClient({"url": pulsar_broker.admin_url})
    serialize = AvroSerializer(registry, USER_AVRO)
    want = users(12, "kafka")
    values = [serialize(u, SerializationContext(topic, MessageField.VALUE)) for u in want]
    schema_id = registry.get_latest_version(f"{topic}-value").schema_id
    assert all(v[:5] == b"\x00" + schema_id.to_bytes(4, "big") for v in values)
    kafka_produce(bootstrap, topic, values)

    client = pulsar_client(pulsar_broker.service_url)
    try:
        typed = client.subscribe(topic, "avro", schema=AvroSchema(User), initial_position=pulsar.InitialPosition.Earliest)
        raw = client.subscribe(topic, "raw", initial_position=pulsar.InitialPosition.Earliest)
        assert [fields(m.value()) for m in receive(typed, len(want))] == want
        # the payload a Pulsar consumer gets is the serializer's Avro body, without magic byte and id
        assert [m.data() for m in receive(raw, len(want))] == [v[5:] for v in values]
    finally:
        client.close()
    # Kafka consumers still read what the serializer wrote, prefix included
    assert [g.value for g in consume_confluent(bootstrap, topic, {0: len(values)})] == values


def test_evolved_confluent_records_name_their_pulsar_versions(pulsar_broker):
    bootstrap = pulsar_broker.handle.bootstrap
    topic = f"sr-evolve-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    registry = SchemaRegistryClient({"url": pulsar_broker.admin_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    old, new = users(3, "v1"), [{**u, "email": f"{u['name']}@example.org"} for u in users(3, "v2")]
    kafka_produce(bootstrap, topic, [AvroSerializer(registry, USER_AVRO)(u, ctx) for u in old])
    kafka_produce(bootstrap, topic, [AvroSerializer(registry, json.dumps(UserV2.schema()))(u, ctx) for u in new])
    assert registry.get_versions(f"{topic}-value") == [1, 2]
    client = pulsar_client(pulsar_broker.service_url)
    try:
        typed = client.subscribe(topic, "avro", schema=AvroSchema(UserV2),
                                 initial_position=pulsar.InitialPosition.Earliest)
        got = receive(typed, len(old) + len(new))
        assert [m._message.int_schema_version() for m in got] == [0] * len(old) + [1] * len(new)
        assert [{**fields(m.value()), "email": m.value().email} for m in got] == [
            {**u, "email": None} for u in old] + new
    finally:
        client.close()


def test_pulsar_avro_records_read_by_confluent_avro_deserializer(pulsar_broker):
    bootstrap = pulsar_broker.handle.bootstrap
    topic = f"sr-p2k-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    want = users(15, "pulsar")
    client = pulsar_client(pulsar_broker.service_url)
    try:
        producer = client.create_producer(topic, schema=AvroSchema(User), batching_enabled=True,
                                          batching_max_messages=4, batching_max_publish_delay_ms=50)
        for u in want:
            producer.send_async(User(**u), None)
        producer.flush()
        producer.close()
        typed = client.subscribe(topic, "avro", schema=AvroSchema(User), initial_position=pulsar.InitialPosition.Earliest)
        assert [fields(m.value()) for m in receive(typed, len(want))] == want  # Pulsar -> Pulsar: prefix removed
    finally:
        client.close()

    registry = SchemaRegistryClient({"url": pulsar_broker.admin_url})
    schema_id = registry.get_latest_version(f"{topic}-value").schema_id  # the producer's schema, by subject
    got = consume_confluent(bootstrap, topic, {0: len(want)})
    encode = AvroSchema(User).encode
    # a Kafka consumer without a deserializer: Confluent's prefix, then the Pulsar producer's payload
    assert [g.value for g in got] == [b"\x00" + schema_id.to_bytes(4, "big") + encode(User(**u)) for u in want]
    deserialize = AvroDeserializer(registry)
    assert [deserialize(g.value, SerializationContext(topic, MessageField.VALUE)) for g in got] == want


def test_confluent_json_records_reach_pulsar_as_json(pulsar_broker):
    bootstrap = pulsar_broker.handle.bootstrap
    topic = f"sr-json-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    registry = SchemaRegistryClient({"url": pulsar_broker.admin_url})
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Point", "type": "object",
                         "properties": {"x": {"type": "integer"}, "label": {"type": "string"}}})
    serialize = JSONSerializer(schema, registry)
    want = [{"x": i, "label": f"p{i}"} for i in range(6)]
    values = [serialize(p, SerializationContext(topic, MessageField.VALUE)) for p in want]
    assert all(v[0] == 0 for v in values)
    kafka_produce(bootstrap, topic, values)
    client = pulsar_client(pulsar_broker.service_url)
    try:
        raw = client.subscribe(topic, "raw", initial_position=pulsar.InitialPosition.Earliest)
        assert [json.loads(m.data()) for m in receive(raw, len(want))] == want
    finally:
        client.close()


def test_a_topic_written_without_a_registry_reaches_pulsar_unchanged(pulsar_broker):
    bootstrap = pulsar_broker.handle.bootstrap
    topic = f"sr-plain-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, partitions=1)
    registry = SchemaRegistryClient({"url": pulsar_broker.admin_url})
    other_id = registry.register_schema(f"sr-other-{uuid.uuid4().hex[:8]}-value", Schema(USER_AVRO, "AVRO"))
    values = [
        b"plain text",
        b"",
        b"\x00" + (2**31 - 7).to_bytes(4, "big") + b"an id no schema has",
        b"\x00" + other_id.to_bytes(4, "big") + b"another topic's schema id",
        b"\x00\x00\x00",
    ]
    kafka_produce(bootstrap, topic, values)
    client = pulsar_client(pulsar_broker.service_url)
    try:
        raw = client.subscribe(topic, "raw", initial_position=pulsar.InitialPosition.Earliest)
        assert [m.data() for m in receive(raw, len(values))] == values
    finally:
        client.close()
