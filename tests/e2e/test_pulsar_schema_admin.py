"""Pulsar admin v2's schema write and listing endpoints (kop/admin/schemas.py over kop/schemas/versions.py):
`POST`/`DELETE .../schema`, `GET .../schemas`, `POST .../compatibility`, `POST .../version`.

A Pulsar-side module (tests/e2e/conftest.py): every test runs on Apache Pulsar standalone (`pulsar`), which
proves the expected bodies and status codes, and on our broker (`kop`, `kop-bk`) with the same assertions. Where we differ
on purpose the assertion is on what both share: error bodies (Pulsar answers some errors with Jetty HTML pages,
text/plain parser messages or Java stack traces, we always answer `{"reason": ...}` JSON) are not compared, only
their status codes.

What the reference answered (and these tests pin): an upload answers `{"version": {"version": N}}`, an equal
schema (type + definition; properties do not count) its existing version; FULL refuses an evolution without
defaults and a type change with 409, an AVRO definition that does not parse with 422; `compatibility` answers 202
`{"schemaCompatibilityStrategy": "FULL", "compatibility": true}` and an incompatible schema an unexpected-error
500 (Pulsar 4.0's isCompatible never answers false); `version` answers -1 for a schema not registered; a delete
writes a tombstone version (`{"version": N}`, 0 on a topic without a schema) after which GET answers 404, the list
is empty, old versions are gone for lookups and compatibility, and the next upload gets N + 1 (`?force=true`:
every version gone, `{"version": -1}`, the next is 0); a non-JSON Content-Type 415, unparsable JSON or JSON that
is not an object 400, a null body, an unknown type name or a missing definition 500.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String, StringSchema

PULSAR_SIDE_TARGETS = ("pulsar", "kop", "kop-bk")

RECEIVE_MS = 30_000  # a generous bound for one receive under load; never a measured quantity


class User(Record):
    _sorted_fields = True
    name = String()
    age = Integer()


class UserV2(Record):  # + a field with a default: FULL compatible with User
    _sorted_fields = True
    name = String()
    age = Integer()
    email = String(default=None, required_default=True)


UserV2.__name__ = "User"  # one record name, so that Avro compares them as versions of one schema

V1 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "age", "type": "int"}, {"name": "name", "type": "string"}]})
V2 = json.dumps({"type": "record", "name": "User", "fields": [
    {"name": "age", "type": "int"}, {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "name", "type": "string"}]})
BROKEN = json.dumps({"type": "record", "name": "User", "fields": [  # a new required field: FULL refuses it
    {"name": "age", "type": "int"}, {"name": "level", "type": "int"}, {"name": "name", "type": "string"}]})


def avro(definition: str, properties: dict[str, str] | None = None) -> dict:
    return {"type": "AVRO", "schema": definition, "properties": properties or {}}


STRING = {"type": "STRING", "schema": "", "properties": {}}


class Rest:
    """The schema endpoints of one topic, through urllib: (status, parsed JSON body or None for a non-JSON one)."""

    def __init__(self, admin_url: str, local: str) -> None:
        self.base = f"{admin_url}/admin/v2/schemas/public/default/{local}"

    def call(self, method: str, path: str, body: object = None, raw: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, object]:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type} if data is not None else {}
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                status, text = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read()
        try:
            return status, json.loads(text)
        except ValueError:
            return status, None  # Pulsar's HTML and text/plain error pages

    def post(self, payload: object) -> tuple[int, object]:
        return self.call("POST", "/schema", payload)

    def versions(self) -> list[tuple[int, str, object]]:
        """(version, type, definition) of every listed version."""
        status, body = self.call("GET", "/schemas")
        assert status == 200, body
        return [(s["version"], s["type"], json.loads(s["data"]) if s["data"] else s["data"])
                for s in body["getSchemaResponses"]]


@pytest.fixture
def client(pulsar_client):
    return pulsar_client


def test_upload_new_identical_and_incompatible_then_list(target, pulsar_broker):
    rest = Rest(pulsar_broker.admin_url, target.topic("upload"))
    assert rest.versions() == []
    assert rest.post(avro(V1, {"origin": "first"})) == (200, {"version": {"version": 0}})
    # equal type + definition: the same version, whatever the properties (the first upload's stay)
    assert rest.post(avro(V1)) == (200, {"version": {"version": 0}})
    assert rest.post(avro(V2)) == (200, {"version": {"version": 1}})
    assert rest.post(avro(BROKEN))[0] == 409  # FULL: the old data has no `level` and it has no default
    assert rest.post(STRING)[0] == 409  # another type
    assert rest.versions() == [(0, "AVRO", json.loads(V1)), (1, "AVRO", json.loads(V2))]
    status, listed = rest.call("GET", "/schemas")
    first = listed["getSchemaResponses"][0]
    assert set(first) == {"version", "type", "timestamp", "data", "properties"}
    assert first["properties"] == {"origin": "first"} and first["timestamp"] > 0
    status, latest = rest.call("GET", "/schema")
    assert status == 200 and latest == listed["getSchemaResponses"][1]


def test_compatibility_and_version_lookup(target, pulsar_broker):
    rest = Rest(pulsar_broker.admin_url, target.topic("compat"))
    compatible = (202, {"schemaCompatibilityStrategy": "FULL", "compatibility": True})
    assert rest.call("POST", "/compatibility", avro(V1)) == compatible  # no schema yet: anything goes
    assert rest.call("POST", "/version", avro(V1)) == (200, {"version": -1})
    assert rest.post(avro(V1))[0] == 200
    assert rest.call("POST", "/compatibility", avro(V2)) == compatible
    assert rest.call("POST", "/compatibility", avro(V1)) == compatible
    # incompatible: Pulsar 4.0 answers an unexpected-error 500 rather than `"compatibility": false`
    status, body = rest.call("POST", "/compatibility", avro(BROKEN))
    assert status == 500 and body["reason"]
    status, body = rest.call("POST", "/compatibility", STRING)
    assert status == 500 and "Incompatible schema" in body["reason"]
    assert rest.call("POST", "/version", avro(V1, {"other": "properties"})) == (200, {"version": 0})
    assert rest.call("POST", "/version", avro(V2)) == (200, {"version": -1})  # compatible, not registered
    assert rest.versions() == [(0, "AVRO", json.loads(V1))]  # the checks stored nothing


def test_delete_then_404_then_reupload(target, pulsar_broker):
    rest = Rest(pulsar_broker.admin_url, target.topic("delete"))
    assert rest.call("DELETE", "/schema") == (200, {"version": 0})  # a tombstone even without a schema
    assert rest.post(avro(V1)) == (200, {"version": {"version": 1}})
    assert rest.post(avro(V2)) == (200, {"version": {"version": 2}})
    assert rest.call("DELETE", "/schema") == (200, {"version": 3})
    assert rest.call("GET", "/schema") == (404, {"reason": "Schema not found"})
    assert rest.call("GET", "/schema/1") == (404, {"reason": "Schema not found"})  # deleted versions are gone
    assert rest.call("GET", "/schema/3") == (404, {"reason": "Schema not found"})  # the tombstone itself
    assert rest.versions() == []
    assert rest.call("POST", "/version", avro(V1)) == (200, {"version": -1})
    # the deleted AVRO versions no longer constrain the next one: another type is accepted, after the tombstone
    assert rest.post(STRING) == (200, {"version": {"version": 4}})
    assert rest.versions() == [(4, "STRING", "")]
    status, latest = rest.call("GET", "/schema")
    assert status == 200 and (latest["version"], latest["type"], latest["data"]) == (4, "STRING", "")
    assert rest.call("DELETE", "/schema") == (200, {"version": 5})  # every delete writes one
    assert rest.call("DELETE", "/schema") == (200, {"version": 6})
    assert rest.post(avro(V1)) == (200, {"version": {"version": 7}})
    # forced: every version goes, tombstones too, Pulsar answers -1 and numbering starts over
    assert rest.call("DELETE", "/schema?force=true") == (200, {"version": -1})
    assert rest.call("GET", "/schema") == (404, {"reason": "Schema not found"})
    assert rest.versions() == []
    assert rest.post(avro(V2)) == (200, {"version": {"version": 0}})
    assert rest.call("DELETE", "/schema?force=true") == (200, {"version": -1})  # a topic without one: the same
    assert rest.call("DELETE", "/schema?force=true") == (200, {"version": -1})


def test_bad_bodies_are_refused_with_pulsars_status(target, pulsar_broker):
    rest = Rest(pulsar_broker.admin_url, target.topic("bad"))
    assert rest.call("POST", "/schema", raw=b"not json")[0] == 400
    assert rest.call("POST", "/compatibility", raw=b"{")[0] == 400
    assert rest.call("POST", "/schema", STRING, content_type="text/plain")[0] == 415
    assert rest.call("POST", "/schema", raw=b"[]")[0] == 400  # JSON, but not an object
    assert rest.call("POST", "/schema", raw=b"null")[0] == 500  # Pulsar: a null payload's NullPointerException
    # Pulsar's own answers for these are unexpected-error 500s (an unknown enum name, a null definition)
    assert rest.post({"type": "NO_SUCH_TYPE", "schema": "", "properties": {}})[0] == 500
    assert rest.call("POST", "/version", {"type": "NO_SUCH_TYPE", "schema": ""})[0] == 500
    assert rest.post({"type": "STRING"})[0] == 500
    assert rest.post({"schema": ""})[0] == 500
    assert rest.post(avro("not an avro schema"))[0] == 422  # "Invalid schema definition data for AVRO schema"
    assert rest.call("GET", "/schema") == (404, {"reason": "Schema not found"})  # nothing was stored
    assert rest.versions() == []


def test_a_producer_gets_the_version_uploaded_over_rest(target, pulsar_broker, client):
    """A schema uploaded over REST is the one a pulsar-client producer with the same definition registers under:
    its messages carry the REST version; after a delete, a producer's schema takes the version after the
    tombstone."""
    local = target.topic("producer")
    topic = f"persistent://public/default/{local}"
    rest = Rest(pulsar_broker.admin_url, local)
    v1 = AvroSchema(User).schema_info().schema()
    v2 = AvroSchema(UserV2).schema_info().schema()
    assert rest.post(avro(v1)) == (200, {"version": {"version": 0}})
    assert rest.post(avro(v2)) == (200, {"version": {"version": 1}})
    consumer = client.subscribe(topic, "s", schema=AvroSchema(UserV2),
                                initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic, schema=AvroSchema(UserV2), batching_enabled=False).send(
        UserV2(name="bob", age=40, email="b@x"))
    client.create_producer(topic, schema=AvroSchema(User), batching_enabled=False).send(User(name="ann", age=30))
    got = [consumer.receive(RECEIVE_MS) for _ in range(2)]
    assert [m._message.int_schema_version() for m in got] == [1, 0]
    assert [(m.value().name, m.value().email) for m in got] == [("bob", "b@x"), ("ann", None)]
    assert [v for v, _t, _d in rest.versions()] == [0, 1]  # the producers registered nothing new
    consumer.close()

    assert rest.call("DELETE", "/schema") == (200, {"version": 2})
    string_topic_producer = client.create_producer(topic, schema=StringSchema())  # allowed: the AVRO ones are gone
    string_topic_producer.close()
    string_definition = StringSchema().schema_info().schema()  # the client sends "null" (JSON's null) as its data
    status, listed = rest.call("GET", "/schemas")
    assert [(s["version"], s["type"], s["data"]) for s in listed["getSchemaResponses"]] == [
        (3, "STRING", string_definition)]
    assert rest.call("POST", "/version", {**STRING, "schema": string_definition}) == (200, {"version": 3})
    assert rest.call("POST", "/version", STRING) == (200, {"version": -1})  # another definition: "" is not "null"
