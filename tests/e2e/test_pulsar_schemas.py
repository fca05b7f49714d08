"""Pulsar schemas end to end (issue 13): typed records with `pulsar-client`'s StringSchema, JsonSchema and
AvroSchema, schema versions, compatibility, GET_SCHEMA and the admin REST's schema endpoints.

A Pulsar-side module (tests/e2e/conftest.py): the same tests run on Apache Pulsar standalone (`pulsar`), which
proves them right, and on our broker, both on Pulsar's defaults (a client auto-creates a non-partitioned topic); the
admin REST test's topic is created partitioned (two partitions), whose partitions share one schema, on Pulsar as on
ours.

What is checked: a StringSchema and a JsonSchema round trip; an Avro producer gets version 0, a second producer with
an evolved (FULL-compatible: a new optional field) schema gets version 1, a third with the first schema gets
version 0 back; each message carries its producer's version (`schema_version()`), and a consumer with the new schema
reads the old messages through the writer schema it fetches by that version (GET_SCHEMA); a producer whose schema
breaks FULL compatibility (a new required field) or changes type is refused IncompatibleSchema; a consumer's
schema is checked the same way; GET_SCHEMA by version and for the latest through `client.get_schema_info`; the
admin REST's `/admin/v2/schemas/{tenant}/{ns}/{topic}/schema` (latest) and `/schema/{version}`; Pulsar's Java client
consuming with AUTO_CONSUME (writer schemas fetched by version) and producing with the evolved definition.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pulsar
import pytest
from _pulsar import SchemaType  # the C++ client's enum (pulsar.schema uses it too)
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

from tests.support.admin import create_partitioned_topic
from tests.support.pulsar_java import PulsarJava

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")  # kop-bk: the versions live in ZooKeeper there

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


class Order(Record):
    item = String()
    count = Integer()


class User(Record):
    _sorted_fields = True
    name = String()
    age = Integer()


class UserV2(Record):  # + a field with a default: FULL compatible with User (each reads the other's data)
    _sorted_fields = True
    name = String()
    age = Integer()
    email = String(default=None, required_default=True)  # with its default, as Avro evolution asks


class UserBroken(Record):  # + a required field without default: the old schema's data cannot be read by it
    _sorted_fields = True
    name = String()
    age = Integer()
    level = Integer(required=True)


for cls in (UserV2, UserBroken):  # one record name, so that Avro compares them as versions of one schema
    cls.__name__ = "User"


@pytest.fixture
def client(pulsar_service_url: str):
    c = pulsar.Client(pulsar_service_url, operation_timeout_seconds=60,
                      logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    yield c
    c.close()


def topic_name(target, hint: str) -> str:
    return f"persistent://public/default/{target.topic(hint)}"


def version_of(msg: pulsar.Message) -> int:
    """The schema version the message carries (-1: none), as AvroSchema.decode_message reads it."""
    return msg._message.int_schema_version()


def schema_info(client: pulsar.Client, topic: str, version: int = -1):
    """GET_SCHEMA through the C++ client (the call AvroSchema makes to fetch a writer schema; -1: the latest)."""
    return client._client.get_schema_info(topic, version)


def test_string_and_json_schemas_round_trip(target, client):
    topic = topic_name(target, "str")
    consumer = client.subscribe(topic, "s", schema=StringSchema(), initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("grüße")
    msg = consumer.receive(RECEIVE_MS)
    assert msg.value() == "grüße" and version_of(msg) == 0
    info = schema_info(client, topic)
    assert info.schema_type() == SchemaType.STRING

    topic = topic_name(target, "json")
    consumer = client.subscribe(topic, "s", schema=JsonSchema(Order), initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic, schema=JsonSchema(Order)).send(Order(item="tea", count=3))
    msg = consumer.receive(RECEIVE_MS)
    assert (msg.value().item, msg.value().count) == ("tea", 3)
    info = schema_info(client, topic)
    assert info.schema_type() == SchemaType.JSON
    assert json.loads(info.schema())["fields"] == json.loads(JsonSchema(Order).schema_info().schema())["fields"]


def test_avro_versions_evolve_and_old_messages_decode_with_their_writer_schema(target, client):
    topic = topic_name(target, "avro")
    p0 = client.create_producer(topic, schema=AvroSchema(User), batching_enabled=False)
    p0.send(User(name="ann", age=30))
    p1 = client.create_producer(topic, schema=AvroSchema(UserV2), batching_enabled=False)
    p1.send(UserV2(name="bob", age=40, email="bob@example.org"))
    p0_again = client.create_producer(topic, schema=AvroSchema(User), batching_enabled=False)
    p0_again.send(User(name="cid", age=50))

    # a consumer with the new schema: each message is decoded with its writer's version, fetched by GET_SCHEMA
    consumer = client.subscribe(topic, "s", schema=AvroSchema(UserV2),
                                initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(RECEIVE_MS) for _ in range(3)]
    assert [version_of(m) for m in got] == [0, 1, 0]
    assert [(m.value().name, m.value().age, m.value().email) for m in got] == [
        ("ann", 30, None), ("bob", 40, "bob@example.org"), ("cid", 50, None)]

    info0, info1 = schema_info(client, topic, 0), schema_info(client, topic, 1)
    assert [f["name"] for f in json.loads(info0.schema())["fields"]] == ["age", "name"]
    assert [f["name"] for f in json.loads(info1.schema())["fields"]] == ["age", "email", "name"]
    assert json.loads(schema_info(client, topic).schema()) == json.loads(info1.schema())  # latest
    with pytest.raises(pulsar.PulsarException):  # no such version: TopicNotFound "Topic not found or no-schema"
        schema_info(client, topic, 7)


def test_incompatible_schemas_are_refused(target, client):
    topic = topic_name(target, "incompat")
    client.create_producer(topic, schema=AvroSchema(User)).send(User(name="ann", age=30))
    with pytest.raises(pulsar.IncompatibleSchema):  # FULL: the old data has no `level` and there is no default
        client.create_producer(topic, schema=AvroSchema(UserBroken))
    with pytest.raises(pulsar.IncompatibleSchema):  # another type
        client.create_producer(topic, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):  # a consumer's schema is checked the same way
        client.subscribe(topic, "s", schema=AvroSchema(UserBroken))
    # a schema-less (BYTES) producer is let in: Pulsar's schemaValidationEnforced is off by default
    client.create_producer(topic).send(b"raw")


def test_a_typed_consumer_is_refused_on_a_topic_with_data_but_no_schema(target, client):
    topic = topic_name(target, "noschema")
    client.create_producer(topic).send(b"raw")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "s", schema=JsonSchema(Order))


def _get_json(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def test_admin_rest_schema_latest_and_by_version(target, client, pulsar_broker):
    local = target.topic("rest")
    topic = f"persistent://public/default/{local}"
    create_partitioned_topic(pulsar_broker.admin_url, topic, 2)  # the schema is the topic's, not a partition's
    client.create_producer(topic, schema=AvroSchema(User)).close()
    client.create_producer(topic, schema=AvroSchema(UserV2)).close()
    base = f"{pulsar_broker.admin_url}/admin/v2/schemas/public/default/{local}/schema"
    status, latest = _get_json(base)
    assert status == 200
    assert latest["version"] == 1 and latest["type"] == "AVRO"
    assert json.loads(latest["data"]) == json.loads(AvroSchema(UserV2).schema_info().schema())
    status, v0 = _get_json(f"{base}/0")
    assert status == 200 and v0["version"] == 0 and json.loads(v0["data"]) == json.loads(
        AvroSchema(User).schema_info().schema())
    status, _ = _get_json(f"{base}/5")
    assert status == 404
    status, _ = _get_json(f"{pulsar_broker.admin_url}/admin/v2/schemas/public/default/{target.topic('none')}/schema")
    assert status == 404


def test_java_client_reads_and_writes_the_versions(target, client, pulsar_broker):
    """Pulsar's Java client: an AUTO_CONSUME consumer decodes each message with the writer schema it fetches by the
    message's version (GET_SCHEMA), and a Java producer with the evolved definition gets that version, 1."""
    topic = topic_name(target, "java")
    client.create_producer(topic, schema=AvroSchema(User)).send(User(name="ann", age=30))
    client.create_producer(topic, schema=AvroSchema(UserV2)).send(UserV2(name="bob", age=40, email="b@x"))
    java = PulsarJava(pulsar_broker.service_url, pulsar_broker.admin_url)
    v2 = base64.b64encode(AvroSchema(UserV2).schema_info().schema().encode()).decode()
    records = base64.b64encode(json.dumps([{"name": "cid", "age": 50, "email": "c@x"}]).encode()).decode()
    _ids, got = java.run(f"produce-avro {topic} {v2} {records}", f"consume-auto {topic} auto 3")
    assert [m["version"] for m in got] == [0, 1, 1]
    assert [m["record"] for m in got] == [
        {"age": "30", "name": "ann"},
        {"age": "40", "email": "b@x", "name": "bob"},
        {"age": "50", "email": "c@x", "name": "cid"},
    ]
