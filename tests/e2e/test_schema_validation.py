"""Issue #25, "optional, on the topic": `confluent.value.schema.validation` / `confluent.key.schema.validation`
make the broker refuse a Kafka record whose key or value does not name, in Confluent's 5-byte prefix, a schema id
registered under `<topic>-key` / `<topic>-value` (kop/topics/write_rules.py, applied at the partition seam).

One broker of ours for the module (the configs and the registry are this broker's: no Apache Kafka reference).
The registry is the broker's own (its admin URL is confluent-kafka's `schema.registry.url`), so an
AvroSerializer's records pass; a raw producer's unknown id or missing prefix is answered INVALID_RECORD (code 87),
seen by confluent-kafka, by kafka-python (with the broker's message) and on the wire (record_errors); topics
without the configs take anything, and the configs are altered like any other (kafka-configs' path).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kop.protocol.records import NewRecord, build_batch
from tests.support.broker import KopBroker
from tests.support.clients import create_topic

VALUE_VALIDATION = {"confluent.value.schema.validation": "true"}
KEY_VALIDATION = {"confluent.key.schema.validation": "true"}
USER = """{"type": "record", "name": "User", "namespace": "kop.test",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}"""
OTHER = """{"type": "record", "name": "Other", "namespace": "kop.test", "fields": [{"name": "x", "type": "long"}]}"""
UNREGISTERED_ID = 987_654


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    b = KopBroker(tmp_path_factory.mktemp("schema-validation")).start()
    try:
        yield b
    finally:
        b.stop()


def _topic(label: str) -> str:
    return f"sv-{label}-{uuid.uuid4().hex[:8]}"


def _framed(schema_id: int, data: bytes = b"\x06bob\x54") -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + data


def _avro(broker: KopBroker, schema: str, **conf: Any):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(SchemaRegistryClient({"url": broker.admin_url}), schema, conf=conf or None)


def _serialize(serializer: Any, topic: str, obj: object, field: str = "value") -> bytes:
    from confluent_kafka.serialization import MessageField, SerializationContext

    return serializer(obj, SerializationContext(topic, MessageField.VALUE if field == "value" else MessageField.KEY))


def _send_each(broker: KopBroker, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> list[Any]:
    """confluent-kafka: one record per batch (flushed one by one), so each outcome is its own record's; returns
    each record's delivery error (None: delivered)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    outcome: list[Any] = []
    for key, value in records:
        p.produce(topic, key=key, value=value, partition=0, on_delivery=lambda err, msg: outcome.append(err))
        assert p.flush(30) == 0
    return outcome


def _schema_id(value: bytes) -> int:
    assert value[0] == 0, value[:5]
    return int.from_bytes(value[1:5], "big")


def _describe(broker: KopBroker, topic: str) -> dict[str, Any]:
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures die with it
    r = ConfigResource("topic", topic)
    return admin.describe_configs([r])[r].result(30)


def _alter(broker: KopBroker, topic: str, name: str, value: str | None) -> None:
    """IncrementalAlterConfigs SET (value) or DELETE (None), as kafka-configs --alter sends it."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    r = ConfigResource("topic", topic, incremental_configs=[ConfigEntry(name, value, incremental_operation=op)])
    admin.incremental_alter_configs([r])[r].result(30)


def test_an_avro_serializer_producer_is_accepted_and_read_back(broker: KopBroker) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import ConfigSource
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = _topic("avro")
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    entry = _describe(broker, topic)["confluent.value.schema.validation"]
    assert (entry.value, entry.source) == ("true", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert "confluent.key.schema.validation" not in _describe(broker, topic)  # Kafka's list plus what is set

    ser = _avro(broker, USER)
    users = [{"name": f"user-{i}", "age": 20 + i} for i in range(3)]
    values: list[bytes | None] = [_serialize(ser, topic, u) for u in users]
    assert _send_each(broker, topic, [(b"k%d" % i, v) for i, v in enumerate(values)] + [(b"k0", None)]) == \
        [None] * 4  # the tombstone (null value) passes too

    de = AvroDeserializer(SchemaRegistryClient({"url": broker.admin_url}), USER)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[object] = []
        deadline = time.monotonic() + 30
        while len(got) < 4:
            assert time.monotonic() < deadline, f"read {len(got)} of 4"
            m = c.poll(0.5)
            if m is not None and not m.error():
                v = m.value()
                got.append(None if v is None else de(v, SerializationContext(topic, MessageField.VALUE)))
        assert got == [*users, None]
    finally:
        c.close()


def test_unknown_ids_and_missing_prefixes_are_invalid_records(broker: KopBroker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    from tests.support.wire import Negotiated

    topic, elsewhere = _topic("refuse"), _topic("elsewhere")
    create_topic(broker.bootstrap, topic, config=VALUE_VALIDATION)
    good = _serialize(_avro(broker, USER), topic, {"name": "ann", "age": 30})
    other_id = _schema_id(_serialize(_avro(broker, OTHER), elsewhere, {"x": 1}))  # registered, but not here

    # confluent-kafka: each bad record fails with INVALID_RECORD (87); a good one still goes through
    errors = _send_each(broker, topic, [(None, _framed(UNREGISTERED_ID)), (None, b'{"name": "ann"}'),
                                        (None, _framed(other_id)), (None, b"\x00\x00"), (None, good)])
    assert [e and (e.code(), e.name()) for e in errors] == [(87, "INVALID_RECORD")] * 4 + [None]

    # kafka-python raises InvalidRecordError with the broker's words on the failed record: why
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
    try:
        with pytest.raises(InvalidRecordError) as e:
            p.send(topic, _framed(UNREGISTERED_ID), partition=0).get(30)
        assert e.value.errno == 87
        assert (f"The record's value names schema id {UNREGISTERED_ID}, which is not registered under the subject "
                f"{topic}-value (confluent.value.schema.validation=true)") in str(e.value)  # its record_errors entry
        with pytest.raises(InvalidRecordError) as e:
            p.send(topic, b"plain text", partition=0).get(30)
        assert "unknown magic byte 112 (0 expected)" in str(e.value)
        assert p.send(topic, good, partition=0).get(30).offset >= 1
    finally:
        p.close()

    # on the wire: Produce v8+'s record_errors name the refused records of a batch, the others pass unnamed
    with Negotiated(broker.bootstrap) as wire:
        batch = build_batch([NewRecord(None, good), NewRecord(None, _framed(other_id)), NewRecord(b"k", None),
                             NewRecord(None, b"x")], compression=1)
        r = wire.produce(topic, 0, batch)
    assert r.error_code == 87
    assert [(x.batch_index, x.batch_index_error_message) for x in r.record_errors] == [
        (1, f"The record's value names schema id {other_id}, which is not registered under the subject "
            f"{topic}-value (confluent.value.schema.validation=true)"),
        (3, "The record's value is 1 bytes, too short for a Confluent schema id prefix (magic byte 0 and a 4-byte "
            f"schema id), which confluent.value.schema.validation=true on topic {topic} requires"),
    ]
    assert r.error_message.startswith("One or more records have been rejected due to 2 record errors in total")


def test_keys_are_checked_against_the_key_subject(broker: KopBroker) -> None:
    topic = _topic("keys")
    create_topic(broker.bootstrap, topic, config=KEY_VALIDATION)
    key = _serialize(_avro(broker, '"string"'), topic, "customer-1", field="key")
    errors = _send_each(broker, topic, [(key, b"any value"), (None, b"keyless"), (b"plain key", b"v"),
                                        (_framed(UNREGISTERED_ID), b"v")])
    assert [e and e.name() for e in errors] == [None, None, "INVALID_RECORD", "INVALID_RECORD"]


def test_other_topics_and_producers_are_unaffected_and_the_configs_alter(broker: KopBroker) -> None:
    plain, validated = _topic("plain"), _topic("altered")
    create_topic(broker.bootstrap, plain)
    create_topic(broker.bootstrap, validated, config=VALUE_VALIDATION)
    assert "confluent.value.schema.validation" not in _describe(broker, plain)
    assert _send_each(broker, validated, [(None, b"raw")])[0].code() == 87
    assert _send_each(broker, plain, [(None, b"raw"), (None, _framed(UNREGISTERED_ID))]) == [None, None]

    _alter(broker, validated, "confluent.value.schema.validation", None)  # back to the default: off
    _alter(broker, plain, "confluent.value.schema.validation", "true")
    assert _describe(broker, plain)["confluent.value.schema.validation"].value == "true"
    assert _send_each(broker, validated, [(None, b"raw")]) == [None]
    assert _send_each(broker, plain, [(None, b"raw")])[0].code() == 87

    # asked for by name, an unset extension is described with its default (kafka-python's filtered describe)
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        asked = {"confluent.key.schema.validation": None, "confluent.value.schema.validation": None}
        got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, validated, configs=asked)],
                                     config_filter="all")
    finally:
        admin.close()
    entries = got["topic"][validated]
    assert {n: (e["value"], e["config_source"], e["config_type"]) for n, e in entries.items()} == {
        n: ("false", "DEFAULT_CONFIG", "BOOLEAN") for n in asked}  # value validation was DELETEd above
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException) as e:
        _alter(broker, plain, "confluent.value.schema.validation", "yes")
    assert e.value.args[0].name() == "INVALID_CONFIG"
