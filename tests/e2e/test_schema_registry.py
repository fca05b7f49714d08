"""Confluent Schema Registry's REST API on our broker's admin port (kop/admin/registry.py over
kop/schemas/registry.py), with Confluent's own Python clients producing to and consuming from our broker.

kop only: no reference Confluent Schema Registry can run here (no Java registry jars are cached, and it would need
a Kafka of its own), so the expected bodies and error codes are Confluent's documented API (and Karapace's, which
follows it) - what confluent-kafka's SchemaRegistryClient parses. One broker (`messagingProtocols=kafka,pulsar`)
serves the whole module; every test uses subjects of its own. A second broker with admin authentication checks
the one auth case (401 without a token, 200 with one, and a role without ACLs refused by the registry's ACL check).

The same assertions run against a reference registry when one is started by hand (Karapace over Apache Kafka,
docs/schema-registry.md "Checked against Karapace"): `KOP_SCHEMA_REGISTRY_URL` (its REST URL) with
`KOP_SCHEMA_REGISTRY_KAFKA` (its Kafka's bootstrap, for the serializer round trips) replace our broker, and what
only our broker has (Pulsar clients, Pulsar's admin REST, admin authentication) is left out. The reference
registry must start with the global level FULL, our broker's default (Karapace: `KARAPACE_COMPATIBILITY=FULL`).
"""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.broker import KopBroker

pytestmark = pytest.mark.skipif("kop" not in os.environ.get("KOP_E2E_TARGET", "kop").split(","),
                                reason="kop only: the registry is ours (module docstring)")

# A reference registry instead of our broker (module docstring); both or neither.
EXTERNAL_URL = os.environ.get("KOP_SCHEMA_REGISTRY_URL", "").rstrip("/")
EXTERNAL_KAFKA = os.environ.get("KOP_SCHEMA_REGISTRY_KAFKA", "")
if bool(EXTERNAL_URL) != bool(EXTERNAL_KAFKA):
    raise RuntimeError("set KOP_SCHEMA_REGISTRY_URL and KOP_SCHEMA_REGISTRY_KAFKA together")
OURS = not EXTERNAL_URL
ours_only = pytest.mark.skipif(not OURS, reason="our broker only: Pulsar's side of the one store")

CT = "application/vnd.schemaregistry.v1+json"
TOKEN_SECRET = b"0123456789abcdef0123456789abcdef"
POLL_SECONDS = 60  # a generous bound to see one record under load; never a measured quantity


def record(name: str, *fields: dict) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": ["null", "string"], "default": None}
B_REQUIRED = {"name": "b", "type": "string"}
V1, V2, BROKEN = record("R", A), record("R", A, B_DEFAULT), record("R", A, B_REQUIRED)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KopBroker]:
    assert OURS, "the tests that need our broker are ours_only"
    b = KopBroker(tmp_path_factory.mktemp("registry"), {"messagingProtocols": "kafka,pulsar",
                                                        "groupInitialRebalanceDelayMs": "0"}).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def url(request: pytest.FixtureRequest) -> str:
    return EXTERNAL_URL or str(request.getfixturevalue("broker").admin_url)


@pytest.fixture(scope="module")
def bootstrap(request: pytest.FixtureRequest) -> str:
    return EXTERNAL_KAFKA or str(request.getfixturevalue("broker").bootstrap)


def unique(hint: str) -> str:
    return f"{hint}-{uuid.uuid4().hex[:8]}"


def call(url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
         content_type: str = CT) -> tuple[int, Any, str]:
    """(status, parsed JSON body, Content-Type)."""
    data = None if body is None else json.dumps(body).encode()
    h = {"Content-Type": content_type} if data is not None else {}
    h.update(headers or {})
    req = urllib.request.Request(url + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, text, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, text, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
    try:
        parsed = json.loads(text) if text else None
    except ValueError:
        parsed = text.decode()
    return status, parsed, ctype


def parsed(body: Any) -> Any:
    """A body with its Avro/JSON definitions parsed: registries may return the text re-serialized (Confluent
    gives Avro's compact form, Karapace sorts the keys, ours keeps the text as registered, which is the Pulsar
    schema's), so definitions are compared as JSON."""
    if isinstance(body, list):
        return [parsed(b) for b in body]
    if isinstance(body, dict) and isinstance(body.get("schema"), str) and body.get("schemaType") != "PROTOBUF":
        return {**body, "schema": json.loads(body["schema"])}
    return body


def refused(url: str, method: str, path: str, body: Any = None) -> int:
    """The error_code of a refusal, after checking its HTTP status is the code's first three digits."""
    status, got, _ = call(url, method, path, body)
    assert isinstance(got, dict) and "message" in got, (status, got)
    code = got["error_code"]
    assert status == (code if code < 1000 else code // 100), (status, got)
    return int(code)


def roundtrip(bootstrap: str, topic: str, serialize: Any, deserialize: Any, values: list[Any],
              before: int = 0) -> list[Any]:
    """Produce `values`, then read the topic from the start (`before` records are there already): the values read
    after those."""
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, value=serialize(v, SerializationContext(topic, MessageField.VALUE)))
    assert p.flush(POLL_SECONDS) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])  # no group join: nothing but the fetch to wait for
    out: list[Any] = []
    deadline = time.monotonic() + POLL_SECONDS
    try:
        while len(out) < before + len(values) and time.monotonic() < deadline:
            m = c.poll(1)
            if m is not None and not m.error():
                assert m.value()[0] == 0  # Confluent's magic byte, then the id
                out.append(deserialize(m.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        c.close()
    return out[before:]


def test_avro_serializers_through_our_registry(bootstrap: str, url: str) -> None:
    topic = unique("avro")
    sr = SchemaRegistryClient({"url": url})
    got = roundtrip(bootstrap, topic, AvroSerializer(sr, V1), AvroDeserializer(sr), [{"a": 1}, {"a": 2}])
    assert got == [{"a": 1}, {"a": 2}]
    # the subject is the topic's Pulsar schema: Confluent version 1 = Pulsar version 0, the same definition
    latest = sr.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and json.loads(latest.schema.schema_str) == json.loads(V1)
    if OURS:
        status, pulsar, _ = call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")
        assert status == 200 and pulsar["version"] == 0 and pulsar["type"] == "AVRO"
        assert json.loads(pulsar["data"]) == json.loads(V1)
    # an evolution through the serializer is Pulsar's version 1
    got = roundtrip(bootstrap, topic, AvroSerializer(sr, V2), AvroDeserializer(sr), [{"a": 3, "b": "x"}],
                    before=2)
    assert got == [{"a": 3, "b": "x"}]
    if OURS:
        assert call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")[1]["version"] == 1
    assert sr.get_versions(f"{topic}-value") == [1, 2]


@ours_only
def test_pulsar_producers_schema_is_the_value_subject(broker: KopBroker, url: str) -> None:
    """One store, one rule: a Pulsar producer's schema is Confluent version 1 of `<topic>-value` (with an id),
    and the level set through /config on that subject is the strategy the Pulsar side applies."""
    import pulsar
    from pulsar.schema import AvroSchema, Integer, Record, String

    class Reading(Record):
        _sorted_fields = True
        sensor = String()
        value = Integer()

    class Renamed(Record):  # a required field of another type under the same name: incompatible both ways
        _sorted_fields = True
        sensor = Integer()

    Renamed.__name__ = "Reading"
    topic = unique("pulsar")
    client = pulsar.Client(broker.pulsar_service_url, operation_timeout_seconds=60)
    try:
        client.create_producer(f"persistent://public/default/{topic}", schema=AvroSchema(Reading)).close()
        v1 = call(url, "GET", f"/subjects/{topic}-value/versions/1")[1]
        pulsar_text = call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")[1]["data"]
        assert v1["subject"] == f"{topic}-value" and v1["schema"] == pulsar_text
        assert call(url, "GET", f"/schemas/ids/{v1['id']}")[1] == {"schema": pulsar_text}
        with pytest.raises(pulsar.IncompatibleSchema):  # FULL, the broker's default
            client.create_producer(f"persistent://public/default/{topic}", schema=AvroSchema(Renamed))
        assert call(url, "PUT", f"/config/{topic}-value", {"compatibility": "NONE"})[0] == 200
        client.create_producer(f"persistent://public/default/{topic}", schema=AvroSchema(Renamed)).close()
        assert call(url, "GET", f"/subjects/{topic}-value/versions")[1] == [1, 2]
    finally:
        client.close()


def test_json_serializers_through_our_registry(bootstrap: str, url: str) -> None:
    topic = unique("json")
    schema = json.dumps({"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
                         "properties": {"id": {"type": "integer"}}, "required": ["id"]})
    sr = SchemaRegistryClient({"url": url})
    got = roundtrip(bootstrap, topic, JSONSerializer(schema, sr), JSONDeserializer(schema, schema_registry_client=sr),
                    [{"id": 7}])
    assert got == [{"id": 7}]
    v = sr.get_latest_version(f"{topic}-value")
    assert v.schema.schema_type == "JSON"
    if OURS:
        status, pulsar, _ = call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")
        assert status == 200 and pulsar["type"] == "JSON" and json.loads(pulsar["data"]) == json.loads(schema)


def test_protobuf_serializers_through_our_registry(bootstrap: str, url: str) -> None:
    pytest.importorskip("google.type", reason="confluent-kafka's ProtobufSerializer needs googleapis-common-protos")
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name=f"{unique('order')}.proto", package="kop.test", syntax="proto3")
    msg = fd.message_type.add(name="Order")
    msg.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("kop.test.Order"))
    topic = unique("proto")
    sr = SchemaRegistryClient({"url": url})
    ser = ProtobufSerializer(order, sr, {"use.deprecated.format": False})
    de = ProtobufDeserializer(order, {"use.deprecated.format": False})
    got = roundtrip(bootstrap, topic, ser, de, [order(id=42)])
    assert [g.id for g in got] == [42]
    assert sr.get_latest_version(f"{topic}-value").schema.schema_type == "PROTOBUF"
    if OURS:
        status, pulsar, _ = call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")
        assert status == 200 and pulsar["type"] == "PROTOBUF"


@pytest.mark.parametrize(("level", "accepted", "refused_schema"), [
    ("BACKWARD", V2, BROKEN),  # a new required field cannot read old data
    ("FORWARD", BROKEN, record("R", {"name": "a", "type": "string"})),
    ("FULL", V2, BROKEN),
    ("NONE", record("Other", {"name": "z", "type": "long"}), None),
])
def test_evolution_per_level(url: str, level: str, accepted: str, refused_schema: str | None) -> None:
    sr = SchemaRegistryClient({"url": url})
    subject = unique("evolve") + "-value"
    assert call(url, "PUT", f"/config/{subject}", {"compatibility": level})[:2] == (200, {"compatibility": level})
    sr.register_schema(subject, Schema(V1, "AVRO"))
    if refused_schema is not None:
        with pytest.raises(SchemaRegistryError) as e:
            sr.register_schema(subject, Schema(refused_schema, "AVRO"))
        assert e.value.http_status_code == 409 and e.value.error_code == 409
        status, body, ctype = call(url, "POST", f"/subjects/{subject}/versions", {"schema": refused_schema})
        assert status == 409 and body["error_code"] == 409 and "incompatible" in body["message"].lower()
        assert ctype.startswith(CT)
        status, body, _ = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest",
                               {"schema": refused_schema})
        assert status == 200 and body["is_compatible"] is False
        if OURS:  # Confluent: messages only with verbose=true (Karapace always sends them)
            assert body == {"is_compatible": False}
    sr.register_schema(subject, Schema(accepted, "AVRO"))
    assert sr.get_versions(subject) == [1, 2]


def _json_doc(id_type: str) -> str:
    return json.dumps({"type": "object", "properties": {"id": {"type": id_type}}, "additionalProperties": False})


def _proto(id_type: str) -> str:
    return f'syntax = "proto3";\npackage kop.test;\n\nmessage Order {{\n  {id_type} id = 1;\n}}\n'


@pytest.mark.parametrize(("schema_type", "v1", "v2_ok", "v2_refused"), [
    ("JSON", _json_doc("integer"), json.dumps({"type": "object", "properties": {"id": {"type": "integer"}, "note": {
        "type": "string"}}, "additionalProperties": False}), _json_doc("string")),
    ("PROTOBUF", _proto("int64"), _proto("int64").replace("}\n", "  string note = 2;\n}\n"), _proto("string")),
], ids=["JSON", "PROTOBUF"])
def test_json_and_protobuf_evolution(url: str, schema_type: str, v1: str, v2_ok: str, v2_refused: str) -> None:
    subject = unique(schema_type.lower()) + "-value"
    call(url, "PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    assert call(url, "POST", f"/subjects/{subject}/versions", {"schema": v1, "schemaType": schema_type})[0] == 200
    assert refused(url, "POST", f"/subjects/{subject}/versions", {"schema": v2_refused,
                                                                   "schemaType": schema_type}) == 409
    status, body, _ = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
                           {"schema": v2_refused, "schemaType": schema_type})
    assert status == 200 and body["is_compatible"] is False and body["messages"]
    status, body, _ = call(url, "POST", f"/subjects/{subject}/versions", {"schema": v2_ok, "schemaType": schema_type})
    assert status == 200
    if schema_type == "PROTOBUF":  # confluent-kafka asks for references in Protobuf's binary descriptor form
        from google.protobuf import descriptor_pb2

        # Confluent documents `format` on both; Karapace has it on /schemas/ids only
        for path in (f"/schemas/ids/{body['id']}", f"/subjects/{subject}/versions/2")[:2 if OURS else 1]:
            got = call(url, "GET", path + "?format=serialized")[1]
            fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(got["schema"]))
            assert [m.name for m in fd.message_type] == ["Order"] and got["schemaType"] == "PROTOBUF"
    assert refused(url, "POST", f"/subjects/{unique('bad')}/versions", {"schema": "message {",
                                                                         "schemaType": schema_type}) == 42201


def test_transitive_level_compares_every_version(url: str) -> None:
    subject = unique("transitive")
    needs_c = record("R", A, {"name": "c", "type": "int"})
    for s in (V1, record("R", A, {"name": "c", "type": "int", "default": 0})):
        assert call(url, "POST", f"/subjects/{subject}/versions", {"schema": s})[0] == 200
    call(url, "PUT", f"/config/{subject}", {"compatibility": "BACKWARD"})
    status, body, _ = call(url, "POST", f"/compatibility/subjects/{subject}/versions/latest?verbose=true",
                           {"schema": needs_c})
    assert status == 200 and body["is_compatible"] is True
    if OURS:  # Confluent: verbose=true always carries messages (Karapace leaves them out when compatible)
        assert body == {"is_compatible": True, "messages": []}
    if OURS:  # Confluent's check against the versions the level names (Karapace has only /versions/<version>)
        status, body, _ = call(url, "POST", f"/compatibility/subjects/{subject}/versions?verbose=true",
                               {"schema": needs_c})
        assert (status, body) == (200, {"is_compatible": True, "messages": []})
    call(url, "PUT", f"/config/{subject}", {"compatibility": "BACKWARD_TRANSITIVE"})
    if OURS:
        status, body, _ = call(url, "POST", f"/compatibility/subjects/{subject}/versions?verbose=true",
                               {"schema": needs_c})
        assert status == 200 and body["is_compatible"] is False and body["messages"]
    assert refused(url, "POST", f"/subjects/{subject}/versions", {"schema": needs_c}) == 409


def test_read_endpoints(url: str) -> None:
    assert call(url, "GET", "/")[:2] == (200, {})
    status, types, ctype = call(url, "GET", "/schemas/types")
    assert status == 200 and sorted(types) == ["AVRO", "JSON", "PROTOBUF"] and ctype.startswith(CT)
    s1, s2 = unique("reads") + "-key", unique("reads")
    status, body, _ = call(url, "POST", f"/subjects/{s1}/versions", {"schema": V1}, content_type="application/json")
    assert status == 200
    sid = body["id"]
    assert call(url, "POST", f"/subjects/{s2}/versions", {"schema": V1, "schemaType": "AVRO"})[1] == {"id": sid}
    assert parsed(call(url, "GET", f"/schemas/ids/{sid}")[1]) == parsed({"schema": V1})
    if OURS:  # Confluent documents both; Karapace has neither
        assert call(url, "GET", f"/schemas/ids/{sid}/schema")[1] == json.loads(V1)  # the bare definition
        assert {s1, s2} <= set(call(url, "GET", f"/schemas/ids/{sid}/subjects")[1])
    assert {"subject": s1, "version": 1} in call(url, "GET", f"/schemas/ids/{sid}/versions")[1]
    assert call(url, "GET", f"/schemas/ids/{sid}?subject={s1}")[0] == 200
    assert refused(url, "GET", "/schemas/ids/999999") == 40403
    if OURS:  # Confluent's subjectPrefix (Karapace ignores it)
        assert call(url, "GET", f"/subjects?subjectPrefix={s1}")[1] == [s1]
    assert s2 in call(url, "GET", "/subjects")[1]
    if OURS:  # Confluent's subjectPrefix (Karapace lists every subject)
        listed = call(url, "GET", f"/schemas?subjectPrefix={s1}&latestOnly=true")[1]
        assert parsed(listed) == parsed([{"subject": s1, "version": 1, "id": sid, "schema": V1}])
    assert call(url, "GET", f"/subjects/{s1}/versions")[1] == [1]
    one = parsed({"subject": s1, "version": 1, "id": sid, "schema": V1})
    for v in ("1", "latest", "-1"):
        assert parsed(call(url, "GET", f"/subjects/{s1}/versions/{v}")[1]) == one
    assert call(url, "GET", f"/subjects/{s1}/versions/1/schema")[1] == json.loads(V1)
    assert call(url, "GET", f"/subjects/{s1}/versions/1/referencedby")[1] == []
    assert parsed(call(url, "POST", f"/subjects/{s1}", {"schema": V1})[1]) == one  # lookup
    assert refused(url, "POST", f"/subjects/{s1}", {"schema": V2}) == 40403
    assert refused(url, "POST", "/subjects/nobody-here", {"schema": V1}) == 40401
    assert refused(url, "GET", "/subjects/nobody-here/versions") == 40401
    assert refused(url, "GET", f"/subjects/{s1}/versions/7") == 40402
    assert refused(url, "GET", f"/subjects/{s1}/versions/zero") == 42202
    assert refused(url, "POST", f"/subjects/{s1}/versions", {"schema": '{"type": "record"}'}) == 42201
    # Confluent: an unknown type is an invalid schema, 42201 (Karapace: 422 from its request validation)
    assert refused(url, "POST", f"/subjects/{s1}/versions", {"schema": V1, "schemaType": "XML"}) in (
        (42201,) if OURS else (42201, 422))
    assert refused(url, "POST", f"/compatibility/subjects/{s1}/versions/9", {"schema": V1}) == 40402
    assert refused(url, "POST", "/compatibility/subjects/nobody-here/versions/3", {"schema": V1}) == 40402
    if OURS:  # Confluent: nothing to compare with is compatible (Karapace: 40402 for `latest` too)
        assert SchemaRegistryClient({"url": url}).test_compatibility("nobody-here", Schema(V1, "AVRO")) is True
    # what Confluent's JAX-RS answers for an {id} that is no integer
    assert call(url, "GET", "/schemas/ids/abc")[:2] == (404, {"error_code": 404, "message": "HTTP 404 Not Found"})


def test_config_and_mode_endpoints(url: str) -> None:
    subject = unique("cfg")
    status, body, _ = call(url, "GET", "/config")
    assert status == 200 and body["compatibilityLevel"] == "FULL"  # schemaCompatibilityStrategy's default
    if OURS:  # Confluent: a subject's config needs no schema (Karapace answers 40401 for a subject without one)
        assert refused(url, "GET", f"/config/{subject}") == 40408
        assert call(url, "GET", f"/config/{subject}?defaultToGlobal=true")[1] == {"compatibilityLevel": "FULL"}
    assert call(url, "PUT", f"/config/{subject}", {"compatibility": "FORWARD"})[1] == {"compatibility": "FORWARD"}
    assert call(url, "GET", f"/config/{subject}")[1] == {"compatibilityLevel": "FORWARD"}
    assert refused(url, "PUT", f"/config/{subject}", {"compatibility": "SIDEWAYS"}) == 42203
    if OURS:  # Confluent: the deleted config, then 40401 (Karapace answers the global level, both times)
        assert call(url, "DELETE", f"/config/{subject}")[1] == {"compatibilityLevel": "FORWARD"}
        assert refused(url, "DELETE", f"/config/{subject}") == 40401
    if OURS:  # a topic's level is the strategy its Pulsar schema follows
        topic = unique("cfgtopic")
        call(url, "PUT", f"/config/{topic}-value", {"compatibility": "NONE"})
        status, body, _ = call(url, "POST", f"/admin/v2/schemas/public/default/{topic}/compatibility",
                               {"type": "AVRO", "schema": V1, "properties": {}}, content_type="application/json")
        assert body["schemaCompatibilityStrategy"] == "ALWAYS_COMPATIBLE"
    # the global level
    assert call(url, "PUT", "/config", {"compatibility": "BACKWARD"})[1] == {"compatibility": "BACKWARD"}
    if OURS:  # Confluent takes the level in any case (Karapace: upper case only)
        assert call(url, "PUT", "/config", {"compatibility": "backward"})[1] == {"compatibility": "BACKWARD"}
    if OURS:  # Karapace has no DELETE /config
        assert call(url, "GET", f"/config/{subject}?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
        assert call(url, "DELETE", "/config")[1] == {"compatibilityLevel": "BACKWARD"}
    else:
        call(url, "PUT", "/config", {"compatibility": "FULL"})
    assert call(url, "GET", "/config")[1] == {"compatibilityLevel": "FULL"}
    # modes
    assert call(url, "GET", "/mode")[1] == {"mode": "READWRITE"}
    if not OURS:  # Karapace has no PUT /mode nor /mode/<subject> writes: the rest is Confluent's documented API
        return
    assert refused(url, "GET", f"/mode/{subject}") == 40409
    assert call(url, "GET", f"/mode/{subject}?defaultToGlobal=true")[1] == {"mode": "READWRITE"}
    assert call(url, "PUT", f"/mode/{subject}", {"mode": "READONLY"})[1] == {"mode": "READONLY"}
    assert call(url, "GET", f"/mode/{subject}")[1] == {"mode": "READONLY"}
    assert refused(url, "POST", f"/subjects/{subject}/versions", {"schema": V1}) == 42205
    assert refused(url, "PUT", f"/mode/{subject}", {"mode": "SOMETIMES"}) == 42204
    call(url, "PUT", f"/mode/{subject}", {"mode": "IMPORT"})
    imported = record("Imported", A)  # registered nowhere yet: it may take the id the import gives it
    assert call(url, "POST", f"/subjects/{subject}/versions", {"schema": imported, "id": 5000, "version": 3})[1] == {
        "id": 5000}
    assert call(url, "GET", f"/subjects/{subject}/versions/3")[1]["id"] == 5000
    assert call(url, "DELETE", f"/mode/{subject}")[1] == {"mode": "IMPORT"}
    # outside IMPORT mode a registration cannot choose its id
    fresh = record("Fresh", A)
    assert refused(url, "POST", f"/subjects/{unique('x')}/versions", {"schema": fresh, "id": 5001}) == 42205


def test_soft_then_permanent_delete(url: str) -> None:
    topic = unique("del")
    subject = f"{topic}-value"
    for s in (V1, V2):
        call(url, "POST", f"/subjects/{subject}/versions", {"schema": s})
    assert refused(url, "DELETE", f"/subjects/{subject}/versions/1?permanent=true") == 40407
    assert call(url, "DELETE", f"/subjects/{subject}/versions/1")[:2] == (200, 1)
    assert refused(url, "DELETE", f"/subjects/{subject}/versions/1") == 40406
    assert call(url, "GET", f"/subjects/{subject}/versions")[1] == [2]
    assert call(url, "GET", f"/subjects/{subject}/versions?deleted=true")[1] == [1, 2]
    assert call(url, "GET", f"/subjects/{subject}/versions/1?deleted=true")[0] == 200
    assert refused(url, "DELETE", f"/subjects/{subject}?permanent=true") == 40405
    assert call(url, "DELETE", f"/subjects/{subject}")[1] == [2]
    assert refused(url, "DELETE", f"/subjects/{subject}") == 40404
    assert subject not in call(url, "GET", "/subjects")[1]
    assert subject in call(url, "GET", "/subjects?deleted=true")[1]
    # Pulsar still has the soft-deleted versions; a permanent delete removes the Pulsar schema too
    if OURS:
        assert call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")[0] == 200
    assert call(url, "DELETE", f"/subjects/{subject}?permanent=true")[1] == [1, 2]
    if OURS:
        assert call(url, "GET", f"/admin/v2/schemas/public/default/{topic}/schema")[0] == 404
    assert refused(url, "GET", f"/subjects/{subject}/versions") == 40401


def test_references(url: str) -> None:
    address = record("Address", {"name": "street", "type": "string"})
    person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]})
    a, p = unique("address"), unique("person")
    address_id = call(url, "POST", f"/subjects/{a}/versions", {"schema": address})[1]["id"]
    refs = [{"name": "Address", "subject": a, "version": 1}]
    assert refused(url, "POST", f"/subjects/{p}/versions", {"schema": person}) == 42201
    person_id = call(url, "POST", f"/subjects/{p}/versions", {"schema": person, "references": refs})[1]["id"]
    assert person_id != address_id
    assert parsed(call(url, "GET", f"/schemas/ids/{person_id}")[1]) == parsed({"schema": person, "references": refs})
    assert call(url, "GET", f"/subjects/{a}/versions/1/referencedby")[1] == [person_id]
    assert refused(url, "DELETE", f"/subjects/{a}/versions/1") == 42206
    assert refused(url, "DELETE", f"/subjects/{a}") == 42206


@ours_only
def test_admin_authentication_guards_the_registry(tmp_path: Path) -> None:
    (tmp_path / "token.key").write_bytes(TOKEN_SECRET)
    b = KopBroker(tmp_path / "auth", {
        "messagingProtocols": "kafka", "authenticationEnabled": "true",
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": f"file://{tmp_path / 'token.key'}", "superUserRoles": "admin",
        "authorizationEnabled": "true", "saslAllowedMechanisms": "PLAIN"}).start()
    try:
        url = b.admin_url
        status, body, _ = call(url, "GET", "/subjects")
        assert status == 401
        token = jwt.encode({"sub": "admin"}, TOKEN_SECRET, algorithm="HS256")
        auth = {"Authorization": f"Bearer {token}"}
        assert call(url, "GET", "/subjects", headers=auth)[:2] == (200, [])
        assert call(url, "POST", "/subjects/s-value/versions", {"schema": V1}, headers=auth)[:2] == (200, {"id": 1})
        # another role is authorized by the Kafka ACLs (none here: refused), not refused as a non-super user
        bob = {"Authorization": f"Bearer {jwt.encode({'sub': 'bob'}, TOKEN_SECRET, algorithm='HS256')}"}
        assert call(url, "GET", "/subjects", headers=bob)[:2] == (200, [])  # s-value is left out
        status, body, _ = call(url, "GET", "/subjects/s-value/versions", headers=bob)
        assert (status, body["error_code"]) == (403, 40301)
        assert call(url, "GET", "/schemas/ids/1", headers=bob)[:2] == (200, {"schema": V1})
    finally:
        b.stop()
