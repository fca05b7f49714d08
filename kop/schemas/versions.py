"""Per-topic schemas, as Pulsar keeps them: versioned, in the metadata store, with Pulsar's compatibility rules.

The broker's one schema store (built by the composition root, kop/server/service.py): the pulsar handler serves
it on the binary protocol and the Pulsar admin REST, and the Confluent registry (kop/schemas/registry.py) reads
the subject `<topic>-value` from it, tells it each topic's strategy (`strategy_of`: the subject's compatibility
level) and the references of definitions registered with them (`refs_of`).

Pulsar's schema registry keys schemas by the topic (a partitioned topic's partitions share one schema) and gives
each new schema the next version, 0, 1, 2, ...; a schema equal to one already stored (same type and same
definition bytes: Pulsar's SchemaHash leaves the properties out) gets that version back, whichever it is. We keep
the same model: version `v` of topic `tenant/ns/t` is the node `/schemas/tenant/ns/<t, URL-quoted>/<v, 10 digits>`
holding JSON (`type` = the wire Schema.Type number, `data` base64, `properties`, `timestamp` in ms). Versions are
created with "must not exist yet", so two brokers (cluster mode) racing for the same next version cannot both win:
the loser reads again and retries. Deleting a topic deletes its schemas, as Pulsar does.

Compatibility (`schemaCompatibilityStrategy`, Pulsar's key and default FULL, broker-wide, unless the namespace's
schemaCompatibilityStrategy policy or the Confluent registry's /config levels say otherwise: a subject's own level
first - the topic's, then the namespace policy, then the registry's global level or the broker's key): a new schema must
be compatible with the latest version (with every version for the *_TRANSITIVE strategies). A different type is
incompatible (Pulsar's rule, except ALWAYS_COMPATIBLE). The definitions are compared by kop/schemas/compat.py, the
checks the Confluent registry uses too: AVRO and JSON schemas that are Avro definitions (what Pulsar's clients
send) with Apache Avro's own schema-resolution checker (the `avro` package: the reader/writer rules Pulsar's
validator applies through Avro's Java library), JSON Schema documents (what Confluent's JSON serializer sends)
and PROTOBUF with Confluent's rules. BACKWARD = the new schema reads data of the old, FORWARD = the old reads the
new, FULL = both. Other types (STRING, primitives, KEY_VALUE, ...) of the same type are compatible without a look
at the definition - a difference from Pulsar, which compares KEY_VALUE halves.

Deleting a schema (the admin REST's `DELETE .../schema`) stores a tombstone as the next version, as Pulsar's
deleteSchema does: the versions up to the last tombstone are then gone for every reader (GET answers nothing for
them, equality and compatibility look only at the versions after it), and the next schema takes the version after
the tombstone - Apache Pulsar 4.0 answers the same (a delete on a topic with versions 1, 2 answers 3, the next upload
gets 4; a delete on a topic without a schema answers 0). Without a delete nothing changes: no tombstone exists.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from kop.protocol.records import update_crc
from kop.schemas import compat
from kop.storage.api import MetadataStore, NodeExistsError
from kop.topics.names import TopicName

ROOT = "/schemas"
# Schema.Type numbers (pulsar_api.proto) and the names Pulsar's admin REST uses for them.
TYPE_NAMES = {0: "NONE", 1: "STRING", 2: "JSON", 3: "PROTOBUF", 4: "AVRO", 5: "BOOLEAN", 6: "INT8", 7: "INT16",
              8: "INT32", 9: "INT64", 10: "FLOAT", 11: "DOUBLE", 12: "DATE", 13: "TIME", 14: "TIMESTAMP",
              15: "KEY_VALUE", 16: "INSTANT", 17: "LOCAL_DATE", 18: "LOCAL_TIME", 19: "LOCAL_DATE_TIME",
              20: "PROTOBUF_NATIVE", 21: "AUTO_CONSUME", 22: "EXTERNAL"}
NONE, JSON, AVRO, AUTO_CONSUME = 0, 2, 4, 21
PROTOBUF = 3
_CHECKED = (JSON, PROTOBUF, AVRO)  # the types whose definitions are compared
_BY_NAME = {n: t for t, n in TYPE_NAMES.items() if n != "AUTO_CONSUME"}
# SchemaType names Pulsar's REST knows but that describe no stored schema (client-side pseudo types)
_NOT_STORED = ("BYTES", "AUTO", "AUTO_CONSUME", "AUTO_PUBLISH")
_RETRIES = 5  # lost races for the next version before giving up (each loss means another broker progressed)


class SchemaRestError(Exception):
    """A schema REST call refused (kop/admin/schemas.py): the HTTP status Pulsar's admin answers and its reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class IncompatibleSchema(Exception):
    """Refused by the compatibility strategy (Pulsar's ServerError IncompatibleSchema)."""


class InvalidSchema(IncompatibleSchema):
    """A definition that cannot be used at all (Pulsar's InvalidSchemaDataException; the admin REST's 422). An
    IncompatibleSchema too, so that the binary protocol's callers refuse it as before."""


@dataclass(frozen=True, slots=True)
class SchemaData:
    type: int
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0
    deleted: bool = False  # a tombstone (see the module docstring)

    def same_as(self, other: SchemaData) -> bool:
        """Pulsar's SchemaHash equality: type and definition bytes; properties do not count."""
        return self.type == other.type and self.data == other.data

    def encode(self) -> bytes:
        d: dict[str, Any] = {"type": self.type, "data": base64.b64encode(self.data).decode("ascii"),
                             "properties": self.properties, "timestamp": self.timestamp}
        if self.deleted:  # only tombstones carry the key: versions written before deletes existed read the same
            d["deleted"] = True
        return json.dumps(d).encode()

    @classmethod
    def decode(cls, raw: bytes) -> SchemaData:
        d = json.loads(raw)
        return cls(int(d["type"]), base64.b64decode(d["data"]), dict(d.get("properties") or {}),
                   int(d.get("timestamp", 0)), bool(d.get("deleted", False)))

    @classmethod
    def from_wire(cls, schema: Any) -> SchemaData:
        """From a wire Schema (PRODUCER, SUBSCRIBE, GET_OR_CREATE_SCHEMA)."""
        return cls(int(schema.type), bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties})

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type, str(self.type))


def version_bytes(version: int) -> bytes:
    """A version as clients carry it (Pulsar's LongSchemaVersion: 8 bytes, big-endian)."""
    return version.to_bytes(8, "big", signed=True)


def version_of(raw: bytes) -> int | None:
    """The version 8 wire bytes name; None for anything else (Pulsar reads other lengths as 'latest' or fails)."""
    return int.from_bytes(raw, "big", signed=True) if len(raw) == 8 else None


# Where a stored entry keeps its schema version: the Kafka batch is what we store (kop/pulsar/convert.py), and a
# Pulsar consumer needs the writer's version back in the entry's MessageMetadata.schema_version to fetch the writer
# schema (GET_SCHEMA) and decode Avro/JSON written with an older schema. The batch header's attributes are an int16
# of which Kafka defines bits 0-6 (codec, timestamp type, transactional, control, delete horizon) and no client or
# broker reads the rest; the high byte holds version + 1 (0: no version, which every Kafka producer's batch has).
# Kafka clients ignore it; a version over 254 is not carried (its messages reach consumers without a version, and
# they decode with their own schema). Neither a record header (Kafka consumers would see it, Pulsar consumers as a
# property, and both conversions would have to rewrite every record) nor a side index was cheaper.
_VERSION_BYTE = 21  # the attributes' high byte (attributes: int16 at byte 21 of the batch header)
MAX_CARRIED_VERSION = 254


def stamp_version(batch: bytes | bytearray, raw_version: bytes) -> bytes | bytearray:
    """The Kafka batch carrying a SEND's schema version (unchanged without a carriable one)."""
    version = version_of(raw_version)
    if version is None or not 0 <= version <= MAX_CARRIED_VERSION:
        return batch
    out = bytearray(batch)
    out[_VERSION_BYTE] = version + 1
    update_crc(out)
    return out


def carried_version(batch: Any) -> bytes | None:
    """The schema version (wire bytes) a stored Kafka batch carries, None for none."""
    v = batch[_VERSION_BYTE]
    return version_bytes(v - 1) if v else None


def topic_path(name: TopicName) -> str:
    return f"{ROOT}/{name.tenant}/{name.namespace}/{urllib.parse.quote(name.local, safe='')}"


# What Pulsar's clients and admin REST register and check with: `record_names=PULSAR_RULES` - Avro records whose
# names differ are compared by their fields (kop/schemas/compat.py _RecordsByFields), as Apache Pulsar does. The
# Confluent registry's own checks keep Confluent's rule (a renamed record is incompatible); a version a Pulsar
# producer registered under Pulsar's rule stays in the subject's history like any other.
PULSAR_RULES = False

Resolver = Callable[[SchemaData], compat.Refs]  # a version's resolved references (kop/schemas/compat.py)


def _no_refs(_schema: SchemaData) -> compat.Refs:
    return compat.NO_REFS


def invalid(schema: SchemaData, refs: Resolver = _no_refs) -> str | None:
    """Why a new schema's definition is unusable (Pulsar's SchemaDataValidator refuses AVRO that does not parse;
    named types of its references, if it has any, are known)."""
    if schema.type == AVRO and compat.avro_or_none(schema.data.decode("utf-8", "replace"), refs(schema)) is None:
        return "Invalid schema definition data for AVRO schema"
    return None


def first_live(versions: list[SchemaData]) -> int:
    """The first version after the last tombstone (0 without one): the versions before it are deleted."""
    for v in range(len(versions) - 1, -1, -1):
        if versions[v].deleted:
            return v + 1
    return 0


def incompatibility(existing: list[SchemaData], new: SchemaData, strategy: str,
                    refs: Resolver = _no_refs, record_names: bool = True) -> str | None:
    """Why `new` may not follow `existing` (oldest first) under `strategy`; None when it may. AVRO and JSON
    definitions that are Avro records are checked by Avro's rules; JSON Schema documents and PROTOBUF by
    kop/schemas/compat.py's checkers; other types of the same type are compatible."""
    if not existing or strategy == "ALWAYS_COMPATIBLE":
        return None
    if strategy == "ALWAYS_INCOMPATIBLE":
        return "the schema compatibility strategy is ALWAYS_INCOMPATIBLE"
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    base = strategy.removesuffix("_TRANSITIVE")
    for old in reversed(against):
        if old.type != new.type:
            return f"Incompatible schema: exists schema type {old.type_name}, new schema type {new.type_name}"
        if new.type not in _CHECKED:
            continue
        why: list[str] = []
        name = TYPE_NAMES[new.type]
        new_text, old_text = new.data.decode("utf-8", "replace"), old.data.decode("utf-8", "replace")
        if base in ("BACKWARD", "FULL"):
            why = compat.incompatibilities(name, new_text, old_text, refs(new), refs(old), record_names=record_names)
        if not why and base in ("FORWARD", "FULL"):
            why = compat.incompatibilities(name, old_text, new_text, refs(old), refs(new), ("old", "new"),
                                           record_names)
        if why:
            return f"Incompatible schema ({strategy}): {'; '.join(why)}"
    return None


class SchemaRegistry:
    """The schemas of every topic, read through to the metadata store (versions never change once written, so
    they are cached; the list of versions is read again on each registration, to see other brokers' writes)."""

    def __init__(self, store: MetadataStore, strategy: str = "FULL") -> None:
        self.store = store
        self.strategy = strategy  # the broker's default, when no registry answers strategy_of
        # The topic's strategy (the Confluent registry's compatibility level of `<topic>-value`, else its global
        # level: kop/schemas/registry.py sets it); None: `strategy` for every topic.
        self.strategy_of: Callable[[TopicName], Awaitable[str]] | None = None
        # The namespace's schemaCompatibilityStrategy policy (kop/topics/namespaces.py; None: not set), set by the
        # composition root: below a topic's own (Confluent subject) level, above the broker's default, as in Pulsar.
        self.namespace_strategy: Callable[[TopicName], str | None] = lambda name: None
        # A version's resolved references (the registry's, for definitions registered with references).
        self.refs_of: Callable[[list[SchemaData]], Awaitable[Resolver]] | None = None
        self.changed: list[Callable[[TopicName], None]] = []  # told after this broker writes a topic's versions
        self._cache: dict[str, list[SchemaData]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def strategy_for(self, name: TopicName) -> str:
        """The compatibility strategy the topic's schemas follow."""
        if self.strategy_of is not None:
            return await self.strategy_of(name)
        return self.namespace_strategy(name) or self.strategy

    async def _resolver(self, versions: list[SchemaData]) -> Resolver:
        return _no_refs if self.refs_of is None else await self.refs_of(versions)

    async def versions(self, name: TopicName) -> list[SchemaData]:
        """Every version of the topic's schema, version i at index i ([] without a schema)."""
        path = topic_path(name)
        children = sorted(int(ch) for ch in await self.store.children(path) if ch.isdigit())
        cached = self._cache.get(path, [])
        if len(cached) > len(children):  # deleted (and maybe recreated) meanwhile: start over
            cached = []
        out = list(cached)
        for v in children[len(cached):]:
            got = await self.store.get(f"{path}/{v:010d}")
            if got is None:  # deleted while we read
                break
            out.append(SchemaData.decode(got[0]))
        self._cache[path] = out
        return out

    async def live(self, name: TopicName) -> tuple[int, list[SchemaData]]:
        """(the first live version, the versions from it on): those after the last tombstone."""
        versions = await self.versions(name)
        start = first_live(versions)
        return start, versions[start:]

    async def get(self, name: TopicName, version: int | None = None) -> tuple[int, SchemaData] | None:
        """(version, schema): the latest when `version` is None; None when there is no such version (or it is
        deleted)."""
        versions = await self.versions(name)
        if not versions:
            return None
        v = len(versions) - 1 if version is None else version
        return (v, versions[v]) if first_live(versions) <= v < len(versions) else None

    async def put_if_absent(self, name: TopicName, schema: SchemaData, strategy: str | None = None,
                            refs: Resolver | None = None, record_names: bool = True) -> int:
        """The version of `schema`: an equal stored one's, else a new version if the strategy allows it
        (IncompatibleSchema otherwise). Pulsar's putSchemaIfAbsent. `strategy` and `refs`: the registry's, when
        it registers (it has read them already); by default the topic's strategy and no references.
        `record_names` False: Pulsar's Avro rule, for Pulsar's clients and admin (see PULSAR_RULES)."""
        if strategy is None:
            strategy = await self.strategy_for(name)
        if refs is None:
            refs = await self._resolver(await self.versions(name) + [schema])
        resolve = refs

        def decide(versions: list[SchemaData]) -> int | SchemaData:
            start = first_live(versions)
            for v, old in enumerate(versions[start:], start):
                if old.same_as(schema):
                    return v
            bad = invalid(schema, resolve)
            if bad is not None:
                raise InvalidSchema(bad)
            why = incompatibility(versions[start:], schema, strategy, resolve, record_names)
            if why is not None:
                raise IncompatibleSchema(why)
            return SchemaData(schema.type, schema.data, schema.properties, int(time.time() * 1000))

        return await self._append(name, decide, "register a schema")

    async def _append(self, name: TopicName, decide: Callable[[list[SchemaData]], int | SchemaData],
                      what: str) -> int:
        """Store what `decide` makes of the current versions as the next version, and answer its number (or the
        number `decide` answers, storing nothing). One writer per topic in this broker; another broker taking
        the same version number first (the store's create-if-absent fails) makes it decide again."""
        path = topic_path(name)
        async with self._locks.setdefault(path, asyncio.Lock()):
            for _ in range(_RETRIES):
                versions = await self.versions(name)
                decided = decide(versions)
                if isinstance(decided, int):
                    return decided
                v = len(versions)
                try:
                    await self.store.put(f"{path}/{v:010d}", decided.encode(), expected_version=-1)
                except NodeExistsError:
                    continue
                self._cache[path] = [*versions, decided]
                for listener in self.changed:
                    listener(name)
                return v
        raise IncompatibleSchema(f"could not {what} for {name.canonical}: concurrent registrations")

    async def check_for_consumer(self, name: TopicName, schema: SchemaData, record_names: bool = True) -> None:
        """A consumer's schema against the stored ones: equal to one of them, or readable under the strategy
        (IncompatibleSchema otherwise). Pulsar's checkSchemaCompatibleForConsumer."""
        _, versions = await self.live(name)
        if not versions:
            raise IncompatibleSchema("Failed to add schema to an active topic with empty(BYTES) schema: "
                                     f"new schema type {schema.type_name}")
        if any(old.same_as(schema) for old in versions):
            return
        why = incompatibility(versions, schema, await self.strategy_for(name),
                              await self._resolver([*versions, schema]), record_names)
        if why is not None:
            raise IncompatibleSchema(why)

    async def rest_schema(self, name: TopicName, version: int | None) -> dict[str, Any] | None:
        """Pulsar's admin GetSchemaResponse of a version (None: the latest): the definition as text, as Pulsar
        gives it (JSON and AVRO definitions are JSON; binary definitions come out with replacement characters)."""
        got = await self.get(name, version)
        if got is None:
            return None
        return _rest(*got)

    async def rest_schemas(self, name: TopicName) -> list[dict[str, Any]]:
        """Pulsar's GetAllVersionsSchemaResponse list: every live version, oldest first."""
        start, versions = await self.live(name)
        return [_rest(v, s) for v, s in enumerate(versions, start)]

    async def version_of_schema(self, name: TopicName, schema: SchemaData) -> int:
        """The live version equal to `schema` (Pulsar's SchemaHash), -1 for none - as Pulsar's `POST .../version`
        answers."""
        start, versions = await self.live(name)
        return next((v for v, old in enumerate(versions, start) if old.same_as(schema)), -1)

    async def check_compatible(self, name: TopicName, schema: SchemaData, record_names: bool = True) -> None:
        """IncompatibleSchema unless `schema` may follow the live versions under the strategy (Pulsar's
        checkCompatible behind `POST .../compatibility`); nothing is stored."""
        _, versions = await self.live(name)
        why = incompatibility(versions, schema, await self.strategy_for(name),
                              await self._resolver([*versions, schema]), record_names)
        if why is not None:
            raise IncompatibleSchema(why)

    async def delete_schema(self, name: TopicName) -> int:
        """Store a tombstone as the next version and answer its number (Pulsar's deleteSchema, not forced)."""
        return await self._append(
            name, lambda _versions: SchemaData(NONE, b"", {}, int(time.time() * 1000), deleted=True),
            "delete the schema")

    # The admin REST (kop/admin/schemas.py; kop/services.py's PulsarSchemas). Refusals carry Apache Pulsar
    # 4.0's status codes, 500 included where Pulsar answers an unexpected-error 500 (checked side by side by
    # tests/e2e/test_pulsar_schema_admin.py).

    async def rest_post(self, name: TopicName, payload: Any) -> int:
        try:
            return await self.put_if_absent(name, _from_payload(payload), record_names=PULSAR_RULES)
        except InvalidSchema as e:
            raise SchemaRestError(422, str(e)) from None
        except IncompatibleSchema as e:
            raise SchemaRestError(409, str(e)) from None

    async def rest_delete(self, name: TopicName, force: bool = False) -> int:
        """A tombstone's version; `force` (Pulsar's deleteSchemaStorage) removes every version, the tombstones
        too, so that the next schema is version 0 again, and answers -1 as Pulsar does."""
        if force:
            await self.delete(name)
            return -1
        return await self.delete_schema(name)

    async def rest_compatibility(self, name: TopicName, payload: Any) -> dict[str, Any]:
        """Pulsar answers `compatibility: true` or, when incompatible, an unexpected-error 500 (its isCompatible
        turns the checker's exception into a failure, never into false) - we answer the same 500."""
        schema = _from_payload(payload)
        try:
            await self.check_compatible(name, schema, record_names=PULSAR_RULES)
        except IncompatibleSchema as e:
            raise SchemaRestError(500, str(e)) from None
        return {"schemaCompatibilityStrategy": await self.strategy_for(name), "compatibility": True}

    async def rest_version(self, name: TopicName, payload: Any) -> int:
        return await self.version_of_schema(name, _from_payload(payload))

    async def delete(self, name: TopicName) -> None:
        path = topic_path(name)
        await self.store.delete_recursive(path)
        self._cache.pop(path, None)
        for listener in self.changed:
            listener(name)


def _from_payload(payload: Any) -> SchemaData:
    """A PostSchemaPayload (`type`, `schema`, `properties`) as a schema, refused as Apache Pulsar 4.0 refuses it:
    a body that is not an object 400 (Jackson's mapping error); a missing body, type or definition and an unknown
    type name an unexpected-error 500 (Pulsar's NullPointerException / IllegalArgumentException)."""
    if payload is None:
        raise SchemaRestError(500, "the body is empty: a PostSchemaPayload is expected")
    if not isinstance(payload, dict):
        raise SchemaRestError(400, f"a PostSchemaPayload is a JSON object, got {type(payload).__name__}")
    type_name, text, props = payload.get("type"), payload.get("schema"), payload.get("properties")
    if type_name is None:
        raise SchemaRestError(500, "the schema type is null")
    if not isinstance(type_name, str) or (type_name not in _BY_NAME and type_name not in _NOT_STORED):
        raise SchemaRestError(500, f"No such schema type: {type_name!r}")
    if type_name in _NOT_STORED:
        raise SchemaRestError(422, f"{type_name} is a client-side schema type: no schema is stored for it")
    if text is None:
        raise SchemaRestError(500, "the schema definition is null")
    if not isinstance(text, str):
        raise SchemaRestError(400, "the schema definition must be a string")
    if props is not None and not (isinstance(props, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in props.items())):
        raise SchemaRestError(400, "properties must be an object of strings")
    return SchemaData(_BY_NAME[type_name], text.encode("utf-8"), dict(props or {}))


def _rest(version: int, schema: SchemaData) -> dict[str, Any]:
    return {"version": version, "type": schema.type_name, "timestamp": schema.timestamp,
            "data": schema.data.decode("utf-8", "replace"), "properties": schema.properties}
