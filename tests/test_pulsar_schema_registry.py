"""kop/schemas/versions.py: versions in a real metadata store (sqlite), Pulsar's compatibility strategies
with Avro's resolution rules, and the schema version carried in a stored Kafka batch. End to end with the real
client (and against Apache Pulsar): tests/e2e/test_pulsar_schemas.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from kop.protocol.records import build_batch, parse_batch_header, validate_crc
from kop.schemas.versions import (
    AVRO,
    JSON,
    IncompatibleSchema,
    SchemaData,
    SchemaRegistry,
    SchemaRestError,
    carried_version,
    incompatibility,
    stamp_version,
    topic_path,
    version_bytes,
    version_of,
)
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics.names import TopicName

STRING = 1


def avro(*fields: dict) -> SchemaData:
    return SchemaData(AVRO, json.dumps({"type": "record", "name": "R", "fields": list(fields)}).encode())


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": ["null", "string"], "default": None}
B_REQUIRED = {"name": "b", "type": "string"}


def test_strategies_follow_avro_resolution() -> None:
    v0, v1, broken = avro(A), avro(A, B_DEFAULT), avro(A, B_REQUIRED)
    for strategy in ("FULL", "BACKWARD", "FORWARD", "FULL_TRANSITIVE"):
        assert incompatibility([v0], v1, strategy) is None  # a field with a default: readable both ways
    assert incompatibility([v0], broken, "BACKWARD") is not None  # the new reader lacks b in old data
    assert incompatibility([v0], broken, "FORWARD") is None  # the old reader ignores b
    assert incompatibility([v0], broken, "FULL") is not None
    assert incompatibility([v1], avro(A), "FORWARD") is None  # dropping a defaulted field: old readers default it
    # transitive strategies look at every version, the others at the latest only: a reader that needs c reads
    # the latest version's data (which has c) but not the first one's
    history = [avro(A), avro(A, {"name": "c", "type": "int", "default": 0})]
    needs_c = avro({"name": "c", "type": "int"})
    assert incompatibility(history, needs_c, "BACKWARD") is None
    assert incompatibility(history, needs_c, "BACKWARD_TRANSITIVE") is not None
    # another type is never compatible, except ALWAYS_COMPATIBLE; ALWAYS_INCOMPATIBLE refuses any change
    text = SchemaData(STRING, b"")
    assert "exists schema type AVRO, new schema type STRING" in (incompatibility([v0], text, "FULL") or "")
    assert incompatibility([v0], text, "ALWAYS_COMPATIBLE") is None
    assert incompatibility([text], text, "ALWAYS_INCOMPATIBLE") is not None
    assert incompatibility([], v0, "ALWAYS_INCOMPATIBLE") is None  # the first schema is always taken
    # JSON schemas are Avro definitions too; one that is not (an old JSON Schema document) cannot be checked
    assert incompatibility([SchemaData(JSON, v0.data)], SchemaData(JSON, broken.data), "FULL") is not None
    assert incompatibility([SchemaData(JSON, b'{"$schema": "x"}')], SchemaData(JSON, v0.data), "FULL") is None


def test_registry_versions_reuse_refusal_and_delete(tmp_path: Path) -> None:
    async def main() -> None:
        store = SqliteMetadataStore(tmp_path)
        reg = SchemaRegistry(store, "FULL")
        name = TopicName("public", "default", "t/x")
        assert await reg.get(name) is None
        assert await reg.put_if_absent(name, avro(A)) == 0
        assert await reg.put_if_absent(name, avro(A, B_DEFAULT)) == 1
        # an equal schema gets its version back, the properties do not count (Pulsar's SchemaHash)
        assert await reg.put_if_absent(name, SchemaData(AVRO, avro(A).data, {"k": "v"})) == 0
        with pytest.raises(IncompatibleSchema):
            await reg.put_if_absent(name, avro(A, B_DEFAULT, {"name": "c", "type": "int"}))
        with pytest.raises(IncompatibleSchema, match="Invalid schema definition"):
            await reg.put_if_absent(TopicName("public", "default", "other"), SchemaData(AVRO, b"{not json"))
        assert topic_path(name) == "/schemas/public/default/t%2Fx"
        assert await store.children(topic_path(name)) == ["0000000000", "0000000001"]
        # another broker's registry (its own cache) sees the versions, and races for the next one safely
        other = SchemaRegistry(store, "FULL")
        got = await other.get(name)
        assert got is not None and got[0] == 1 and got[1].same_as(avro(A, B_DEFAULT))
        three = avro(A, B_DEFAULT, {"name": "c", "type": "int", "default": 0})
        four = avro(A, B_DEFAULT, {"name": "d", "type": "int", "default": 0})
        assert sorted(await asyncio.gather(reg.put_if_absent(name, three), other.put_if_absent(name, four))) == [2, 3]
        await reg.check_for_consumer(name, avro(A))  # a stored version
        with pytest.raises(IncompatibleSchema):
            await reg.check_for_consumer(name, SchemaData(STRING, b""))
        body = await reg.rest_schema(name, 0)
        assert body is not None and body["version"] == 0 and body["type"] == "AVRO"
        assert json.loads(body["data"]) == json.loads(avro(A).data)
        assert await reg.rest_schema(name, 9) is None
        await reg.delete(name)
        assert await reg.get(name) is None and await other.get(name) is None
        with pytest.raises(IncompatibleSchema, match="empty"):  # Pulsar's refusal of a typed consumer then
            await reg.check_for_consumer(name, avro(A))
        await store.close()

    asyncio.run(main())


def test_schema_delete_writes_a_tombstone_version(tmp_path: Path) -> None:
    """The admin REST's delete (Pulsar's, not forced): a tombstone takes the next version; the versions before it
    are gone for reads, equality and compatibility, another broker's registry sees the same, and the REST refusals
    carry Pulsar's status codes. Against Apache Pulsar: tests/e2e/test_pulsar_schema_admin.py."""
    async def main() -> None:
        store = SqliteMetadataStore(tmp_path)
        reg, other = SchemaRegistry(store, "FULL"), SchemaRegistry(store, "FULL")
        name = TopicName("public", "default", "t")
        assert await reg.delete_schema(name) == 0  # a tombstone even without a schema, as Pulsar answers
        assert await reg.get(name) is None and await reg.rest_schemas(name) == []
        assert await reg.put_if_absent(name, avro(A)) == 1
        assert await other.get(name) == (1, (await reg.get(name))[1])  # type: ignore[index]
        assert await reg.delete_schema(name) == 2
        assert await other.get(name) is None and await other.get(name, 1) is None
        assert await other.version_of_schema(name, avro(A)) == -1
        # the deleted AVRO version no longer constrains: another type is taken, after the tombstone
        assert await other.put_if_absent(name, SchemaData(STRING, b"")) == 3
        assert await reg.version_of_schema(name, SchemaData(STRING, b"", {"k": "v"})) == 3
        assert [b["version"] for b in await reg.rest_schemas(name)] == [3]
        with pytest.raises(IncompatibleSchema):
            await reg.check_compatible(name, avro(A))
        with pytest.raises(SchemaRestError) as refused:
            await reg.rest_post(name, {"type": "AVRO", "schema": json.dumps({"type": "record", "name": "R",
                                                                              "fields": [A]})})
        assert refused.value.status == 409
        for payload, status in (({"type": "AVRO", "schema": "{"}, 422), ({"type": "NOPE", "schema": ""}, 500),
                                ({"type": "STRING"}, 500), (None, 500), ([], 400)):
            with pytest.raises(SchemaRestError) as refused:
                await reg.rest_post(name, payload)
            assert refused.value.status == status, payload
        assert await reg.rest_compatibility(name, {"type": "STRING", "schema": "x"}) == {
            "schemaCompatibilityStrategy": "FULL", "compatibility": True}
        assert await reg.rest_delete(name, force=True) == -1  # every version gone, numbering starts over
        assert await store.children(topic_path(name)) == [] and await other.rest_schemas(name) == []
        assert await other.put_if_absent(name, avro(A)) == 0
        await store.close()

    asyncio.run(main())


def test_the_version_travels_in_the_kafka_batch() -> None:
    batch = build_batch([(b"k", b"v", [], 1)])
    assert carried_version(batch) is None  # what every Kafka producer's batch looks like
    for v in (0, 1, 254):
        stamped = stamp_version(batch, version_bytes(v))
        assert carried_version(stamped) == version_bytes(v) and version_of(carried_version(stamped)) == v
        assert validate_crc(stamped)
        header = parse_batch_header(stamped)  # Kafka's own fields are untouched
        assert (header.compression, header.timestamp_type, header.is_transactional, header.is_control) == (
            0, 0, False, False)
    assert stamp_version(batch, version_bytes(255)) == batch  # over what the byte holds: not carried
    assert stamp_version(batch, b"\x01") == batch  # not a version
