"""kop/schemas/registry.py: Confluent Schema Registry's model over the Pulsar version store, on a real metadata
store (sqlite; no network, no broker): global ids, subjects (the topic-backed `<topic>-value` against the Pulsar
versions), deletes, compatibility levels as Pulsar strategies, modes, references, and the TopicSchemaIds answers.
The REST API and real Confluent clients: tests/e2e/test_schema_registry.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kop.schemas.definitions import Definition, Reference, RegistryError
from kop.schemas.registry import ConfluentRegistry
from kop.schemas.versions import AVRO, PULSAR_RULES, IncompatibleSchema, SchemaData, SchemaRegistry
from kop.storage.local.metadata import SqliteMetadataStore
from kop.topics.names import TopicName, parse_topic_name

T = TopicName("public", "default", "orders")


def record(name: str = "R", *fields: dict) -> str:
    return json.dumps({"type": "record", "name": name, "fields": list(fields)})


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": ["null", "string"], "default": None}
B_REQUIRED = {"name": "b", "type": "string"}
V1, V2, BROKEN = record("R", A), record("R", A, B_DEFAULT), record("R", A, B_REQUIRED)


def avro(text: str, refs: tuple[Reference, ...] = ()) -> Definition:
    return Definition("AVRO", text, refs)


def run(tmp_path: Path, body: Callable[[ConfluentRegistry, SchemaRegistry], Awaitable[None]],
        strategy: str = "BACKWARD") -> None:
    async def main() -> None:
        store = SqliteMetadataStore(tmp_path)
        versions = SchemaRegistry(store, strategy)
        reg = ConfluentRegistry(store, versions, lambda n: parse_topic_name(n, "public", "default"),
                                lambda t: t.kafka_name("public", "default"), strategy)
        await body(reg, versions)

    asyncio.run(main())


async def code_of(awaitable: Awaitable[object]) -> int:
    with pytest.raises(RegistryError) as refused:
        await awaitable
    return refused.value.error_code


def test_ids_name_one_definition_across_subjects(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        first = await reg.register("orders-value", avro(V1))
        assert first == 1
        assert await reg.register("other-subject", avro(V1)) == first  # the same definition, the same id
        spaced = json.dumps(json.loads(V1), indent=4)  # whitespace is not identity
        assert await reg.register("orders-key", avro(spaced)) == first
        assert await reg.register("orders-value", avro(V2)) == 2
        assert await reg.register("orders-value", avro(V1)) == first  # already a live version: no new one
        assert [v.version for v in await reg.live_versions("orders-value")] == [1, 2]
        assert (await reg.definition(2)) == avro(V2)
        assert await reg.definition(99) is None
        assert {(v.subject, v.version) for v in await reg.where_is(first)} == {
            ("orders-value", 1), ("other-subject", 1), ("orders-key", 1)}
        assert await reg.subjects() == ["orders-key", "orders-value", "other-subject"]
        assert await reg.subjects(prefix="orders") == ["orders-key", "orders-value"]

    run(tmp_path, body)


def test_value_subject_is_the_topics_pulsar_schema(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        # a Pulsar producer's schema (version 0) is Confluent version 1, with an id assigned on first use
        assert await versions.put_if_absent(T, SchemaData(AVRO, V1.encode())) == 0
        v1 = await reg.get_version("orders-value", 1)
        assert v1.definition == avro(V1) and v1.id == await reg.confluent_id(T, 0)
        # a Confluent registration is the next Pulsar version
        new_id = await reg.register("orders-value", avro(V2))
        got = await versions.get(T)
        assert got is not None and got[0] == 1 and got[1].data == V2.encode()
        assert await reg.confluent_id(T, 1) == new_id
        assert await reg.pulsar_version(T, new_id) == 1 and await reg.pulsar_version(T, 12345) is None
        assert await reg.registered_ids(T, "value") == frozenset({v1.id, new_id})
        assert await reg.registered_ids(T, "key") == frozenset()
        # versions of other types (a Pulsar STRING schema) are not Confluent versions, and have no id
        other = TopicName("public", "default", "strings")
        await versions.put_if_absent(other, SchemaData(1, b""))
        assert await reg.confluent_id(other, 0) is None
        assert await code_of(reg.get_version("strings-value", 1)) == 40401
        # a topic outside the default namespace is named tenant/ns/topic
        elsewhere = TopicName("t1", "ns1", "x")
        await versions.put_if_absent(elsewhere, SchemaData(AVRO, V1.encode()))
        assert "t1/ns1/x-value" in await reg.subjects()
        assert (await reg.get_version("t1/ns1/x-value", "latest")).id == v1.id

    run(tmp_path, body)


def test_a_renamed_avro_record_pulsar_takes_confluent_refuses(tmp_path: Path) -> None:
    """Pulsar compares Avro records by their fields (its check is Avro's ResolvingGrammarGenerator), Confluent by
    name too: the same renamed record is a new version for a Pulsar producer and a 409 for a Confluent client."""
    renamed = record("Renamed", A)

    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        await reg.register("orders-value", avro(V1))
        assert await code_of(reg.register("orders-value", avro(renamed))) == 409
        assert await reg.check("orders-value", avro(renamed))  # POST /compatibility: reasons, the name's
        with pytest.raises(IncompatibleSchema):  # the store's default rule is Confluent's
            await versions.put_if_absent(T, SchemaData(AVRO, renamed.encode()))
        # a Pulsar producer (kop/pulsar/schemas.py) registers with Pulsar's rule
        assert await versions.put_if_absent(T, SchemaData(AVRO, renamed.encode()), record_names=PULSAR_RULES) == 1
        # a renamed record with an incompatible field is refused by both
        with pytest.raises(IncompatibleSchema):
            await versions.put_if_absent(T, SchemaData(AVRO, record("Other", A, B_REQUIRED).encode()),
                                         record_names=PULSAR_RULES)
        # an enum's name still counts under Pulsar's rule (Avro's resolver checks it)
        enum_v = record("E", {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["R"]}})
        enum_renamed = record("E", {"name": "e", "type": {"type": "enum", "name": "Shade", "symbols": ["R"]}})
        other = TopicName("public", "default", "enums")
        await versions.put_if_absent(other, SchemaData(AVRO, enum_v.encode()), record_names=PULSAR_RULES)
        with pytest.raises(IncompatibleSchema):
            await versions.put_if_absent(other, SchemaData(AVRO, enum_renamed.encode()), record_names=PULSAR_RULES)

    run(tmp_path, body)


def test_levels_are_the_pulsar_strategies(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        assert await reg.level() == "BACKWARD"  # the broker's schemaCompatibilityStrategy
        await reg.register("orders-value", avro(V1))
        # BACKWARD: a new required field cannot read old data - for Confluent (409) and Pulsar alike
        assert await code_of(reg.register("orders-value", avro(BROKEN))) == 409
        with pytest.raises(IncompatibleSchema):
            await versions.put_if_absent(T, SchemaData(AVRO, BROKEN.encode()))
        assert await reg.check("orders-value", avro(BROKEN)) != []
        assert await reg.check("orders-value", avro(V2)) == []
        # FORWARD on the subject: the old schema reads data of the new one, so the Pulsar side takes it too
        assert await reg.set_level("orders-value", "forward") == "FORWARD"
        assert await versions.strategy_for(T) == "FORWARD"
        assert await versions.put_if_absent(T, SchemaData(AVRO, BROKEN.encode())) == 1
        # NONE is Pulsar's ALWAYS_COMPATIBLE; the global level applies to subjects without their own
        assert await reg.delete_level("orders-value") == "FORWARD"
        assert await code_of(reg.level("orders-value", default_to_global=False)) == 40408
        await reg.set_level(None, "NONE")
        assert await versions.strategy_for(T) == "ALWAYS_COMPATIBLE"
        assert await reg.register("orders-value", avro(record("Other", {"name": "z", "type": "long"}))) > 0
        assert await code_of(reg.set_level(None, "SOMETIMES")) == 42203
        # transitive: compared with every version, not only the latest
        await reg.set_level("k", "BACKWARD")
        await reg.register("k", avro(V1))
        await reg.register("k", avro(record("R", A, {"name": "c", "type": "int", "default": 0})))
        needs_c = avro(record("R", A, {"name": "c", "type": "int"}))
        assert await reg.check("k", needs_c) == []
        await reg.set_level("k", "BACKWARD_TRANSITIVE")
        assert await reg.check("k", needs_c) != []
        assert await reg.check("k", needs_c, "latest") == []  # one version: that one only
        assert await code_of(reg.register("k", Definition("JSON", "{}"))) == 409  # another type

    run(tmp_path, body)


def test_soft_then_permanent_deletes(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        first = await reg.register("k", avro(V1))
        await reg.register("k", avro(V2))
        assert await code_of(reg.delete_version("k", 1, permanent=True)) == 40407  # soft first
        assert await reg.delete_version("k", 1) == 1
        assert await code_of(reg.delete_version("k", 1)) == 40406
        assert await code_of(reg.get_version("k", 1)) == 40402
        assert (await reg.get_version("k", 1, deleted=True)).deleted
        assert await reg.definition(first) is not None  # ids stay resolvable
        assert await reg.delete_version("k", 1, permanent=True) == 1
        assert await code_of(reg.get_version("k", 1, deleted=True)) == 40402
        assert await code_of(reg.delete_subject("k", permanent=True)) == 40405
        assert await reg.delete_subject("k") == [2]
        assert await code_of(reg.delete_subject("k")) == 40404
        assert await reg.subjects() == [] and await reg.subjects(deleted=True) == ["k"]
        assert await reg.delete_subject("k", permanent=True) == [2]
        assert await code_of(reg.delete_subject("k")) == 40401
        assert await code_of(reg.get_version("k", "latest")) == 40401
        assert await code_of(reg.get_version("k", "0")) == 42202
        # the topic-backed subject: soft-deleted versions stay for Pulsar, a permanent delete of the last one
        # deletes the Pulsar schema (a tombstone)
        await reg.register("orders-value", avro(V1))
        await reg.register("orders-value", avro(V2))
        assert await reg.delete_version("orders-value", 1) == 1
        assert await reg.register("orders-value", avro(V1)) == first  # Pulsar's version 0 again, live again
        assert [v.version for v in await reg.live_versions("orders-value")] == [1, 2]
        assert await reg.delete_subject("orders-value") == [1, 2]
        assert len((await versions.live(T))[1]) == 2
        assert await reg.registered_ids(T, "value") == frozenset()
        assert await reg.delete_subject("orders-value", permanent=True) == [1, 2]
        assert await versions.get(T) is None
        assert await code_of(reg.get_version("orders-value", 1, deleted=True)) == 40401
        assert await reg.register("orders-value", avro(V1)) == first  # the next Pulsar version after the tombstone
        assert [v.version for v in await reg.live_versions("orders-value")] == [4]

    run(tmp_path, body)


def test_modes(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        assert await reg.mode() == "READWRITE"
        await reg.set_mode("ro", "READONLY")
        assert await code_of(reg.register("ro", avro(V1))) == 42205
        assert await reg.register("rw", avro(V1)) == 1
        assert await code_of(reg.set_mode(None, "WRITEONLY")) == 42204
        assert await code_of(reg.register("rw", avro(V2), schema_id=40)) == 42205  # ids only in IMPORT mode
        await reg.set_mode("imported", "IMPORT")
        assert await reg.register("imported", avro(V2), schema_id=40, version=7) == 40
        assert (await reg.get_version("imported", 7)).id == 40
        assert await reg.register("rw", avro(BROKEN)) == 41  # the next id follows the imported one
        assert await code_of(reg.register("imported", avro(V1), schema_id=40)) == 42205  # 40 names another one
        assert await reg.delete_mode("ro") == "READONLY"
        assert await reg.mode("ro") == "READWRITE"

    run(tmp_path, body, strategy="NONE")


def test_references(tmp_path: Path) -> None:
    address = record("Address", {"name": "street", "type": "string"})
    person = json.dumps({"type": "record", "name": "Person", "fields": [{"name": "home", "type": "Address"}]})
    ref = (Reference("Address", "address-value", 1),)

    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        assert await code_of(reg.register("person-value", avro(person))) == 42201  # Address is unknown alone
        assert await code_of(reg.register("person-value", avro(person, ref))) == 42201  # not registered yet
        address_id = await reg.register("address-value", avro(address))
        person_id = await reg.register("person-value", avro(person, ref))
        assert person_id != address_id
        assert (await reg.get_version("person-value", 1)).definition.references == ref
        assert await reg.referenced_by("address-value", 1) == [person_id]
        assert await code_of(reg.delete_version("address-value", 1)) == 42206
        assert await code_of(reg.delete_subject("address-value")) == 42206
        # the Pulsar version keeps its references, so its id is the registered one
        assert await reg.confluent_id(TopicName("public", "default", "person"), 0) == person_id
        await reg.delete_subject("person-value")
        assert await reg.delete_subject("address-value") == [1]

    run(tmp_path, body)


def test_invalid_definitions(tmp_path: Path) -> None:
    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        assert await code_of(reg.register("x", avro('{"type": "record"}'))) == 42201
        assert await code_of(reg.register("x", Definition("JSON", "{not json"))) == 42201
        assert await code_of(reg.register("x", Definition("XML", "<a/>"))) == 42201
        assert await code_of(reg.lookup("x", avro(V1))) == 40401
        await reg.register("x", avro(V1))
        assert (await reg.lookup("x", avro(json.dumps(json.loads(V1), indent=2)))).version == 1
        assert await code_of(reg.lookup("x", avro(V2))) == 40403

    run(tmp_path, body)


def test_protobuf_imports_are_references(tmp_path: Path) -> None:
    common = 'syntax = "proto3";\npackage kop.test;\n\nmessage Money {\n  int64 cents = 1;\n}\n'
    order = ('syntax = "proto3";\npackage kop.test;\n\nimport "common.proto";\n\nmessage Order {\n'
             '  kop.test.Money total = 1;\n}\n')
    ref = (Reference("common.proto", "common", 1),)

    async def body(reg: ConfluentRegistry, versions: SchemaRegistry) -> None:
        await reg.register("common", Definition("PROTOBUF", common))
        assert await code_of(reg.register("order-value", Definition("PROTOBUF", order))) == 42201  # import unknown
        order_id = await reg.register("order-value", Definition("PROTOBUF", order, ref))
        assert await reg.referenced_by("common", 1) == [order_id]
        # the Pulsar version of order keeps them: a consumer's check resolves the import
        await versions.check_for_consumer(TopicName("public", "default", "order"),
                                          SchemaData(3, order.encode(), {"confluent.references": json.dumps(
                                              [r.json() for r in ref])}))
        # a changed field type is refused under BACKWARD, with the import resolved on both sides
        changed = order.replace("kop.test.Money total", "string total")
        assert await code_of(reg.register("order-value", Definition("PROTOBUF", changed, ref))) == 409

    run(tmp_path, body)
