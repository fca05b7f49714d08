"""Confluent Schema Registry's model over the broker's schema store, kept in the metadata store.

Everything lives in the metadata store (ZooKeeper in cluster mode), so any broker answers for any subject, and
writes use create-if-absent or expected versions, as kop/schemas/versions.py does, so two brokers racing cannot
both win:

- global ids: `/schema-registry/ids/<id>` holds a definition (kop/schemas/definitions.py), `/fingerprints/<hash>`
  the id of a definition's identity (one id per distinct type, canonical text and references, whatever subject
  registered it); ids come from the counter node `/schema-registry/id-counter`, advanced with compare-and-set.
  The fingerprint node is created "must not exist yet": a broker losing that race takes the winner's id.
  Ids are never removed: a permanently deleted version's id still resolves (a difference from Confluent).
- subject `<topic>-value` (TopicNameStrategy; `<topic>` as the Kafka handler names topics, kop/topics/names.py:
  bare in kafkaTenant/kafkaNamespace, else tenant/ns/topic) is the topic's Pulsar schema: Confluent version k is
  Pulsar version k - 1, and only AVRO, JSON and PROTOBUF versions appear. Deletes of its versions are marks in
  `/schema-registry/marks/<tenant>/<ns>/<topic>/<pulsar version>` (soft, or hard = gone for the registry);
  deleting its last version permanently stores a Pulsar tombstone (kop/schemas/versions.py), so Pulsar sees the
  schema deleted too.
- every other subject (`<topic>-key`, RecordNameStrategy subjects, ...) is the registry's own:
  `/schema-registry/subjects/<subject>/<version>` holds the version's id and whether it is soft-deleted.
- compatibility levels and modes: `/schema-registry/config-global` and `/config/<subject>`, `/mode-global` and
  `/mode/<subject>`. The global level starts as the broker's `schemaCompatibilityStrategy`; a level is Pulsar's
  strategy of the same name (NONE = ALWAYS_COMPATIBLE) and kop/schemas/versions.py asks `topic_strategy` for a
  topic's, so one rule holds for both protocols.

It implements TopicSchemaIds (kop/schemas/api.py) for the prefix code; the answers of `registered_ids` and of
the id <-> version maps are cached (hot paths), dropped on this broker's writes and, for writes through other
brokers, after CACHE_SECONDS.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from kop.schemas import compat
from kop.schemas.api import Part
from kop.schemas.definitions import (
    CONFLUENT_TYPE,
    INCOMPATIBLE,
    INVALID_LEVEL,
    INVALID_MODE,
    INVALID_SCHEMA,
    INVALID_VERSION,
    LEVELS,
    MODES,
    NO_SUBJECT_CONFIG,
    NO_SUBJECT_MODE,
    NOT_PERMITTED,
    PULSAR_TYPE,
    REFERENCE_EXISTS,
    SCHEMA_NOT_FOUND,
    STORE_ERROR,
    SUBJECT_NOT_FOUND,
    SUBJECT_NOT_SOFT_DELETED,
    SUBJECT_SOFT_DELETED,
    VERSION_NOT_FOUND,
    VERSION_NOT_SOFT_DELETED,
    VERSION_SOFT_DELETED,
    Definition,
    Reference,
    RegistryError,
    canonical_text,
    level_to_strategy,
    refs_from_properties,
    refs_property,
    strategy_to_level,
)
from kop.schemas.versions import IncompatibleSchema, InvalidSchema, SchemaData, SchemaRegistry
from kop.storage.api import BadVersionError, MetadataStore, NodeExistsError
from kop.topics.names import TopicName

T = TypeVar("T")
ROOT = "/schema-registry"
COUNTER = f"{ROOT}/id-counter"
CACHE_SECONDS = 2.0  # how stale a cached id set may be for writes made through another broker
_RETRIES = 20


def _q(subject: str) -> str:
    """A subject as one node name (ZooKeeper refuses the names "." and "..": their dots are quoted too)."""
    quoted = urllib.parse.quote(subject, safe="")
    return quoted.replace(".", "%2E") if quoted in (".", "..") else quoted


@dataclass(frozen=True, slots=True)
class Version:
    """One version of a subject as the registry answers it."""

    subject: str
    version: int  # Confluent's, from 1
    id: int
    definition: Definition
    deleted: bool = False

    def body(self) -> dict[str, object]:
        return {"subject": self.subject, "version": self.version, "id": self.id, **self.definition.body()}


class ConfluentRegistry:
    """Subjects, versions, global ids, levels and modes (module docstring) over `versions`, the topics' store.

    `parse` and `kafka_name` are the Kafka handler's topic naming (TopicManager.parse / kafka_name)."""

    def __init__(self, store: MetadataStore, versions: SchemaRegistry, parse: Callable[[str], TopicName],
                 kafka_name: Callable[[TopicName], str], default_strategy: str) -> None:
        self.store = store
        self.versions = versions
        self.parse = parse
        self.kafka_name = kafka_name
        self.default_level = strategy_to_level(default_strategy)
        self._defs: dict[int, Definition] = {}  # ids never change their definition
        self._fp_ids: dict[str, int] = {}  # nor a fingerprint its id
        # TopicSchemaIds' answers, with the time each was read: (topic, version) -> id, (topic, id) -> version
        # (-1: none), (topic, part) -> ids
        self._ids: dict[tuple[TopicName, int], tuple[float, int]] = {}
        self._versions: dict[tuple[TopicName, int], tuple[float, int]] = {}
        self._registered: dict[tuple[TopicName, str], tuple[float, frozenset[int]]] = {}
        versions.strategy_of = self.topic_strategy
        versions.refs_of = self._pulsar_refs
        versions.changed.append(lambda _name: self._forget())

    # ------------------------------------------------------------------ subjects <-> topics
    def topic_of(self, subject: str) -> TopicName | None:
        """The topic whose Pulsar schema the subject is (`<topic>-value`), None for a registry-only subject."""
        if not subject.endswith("-value"):
            return None
        try:
            return self.parse(subject.removesuffix("-value"))
        except ValueError:
            return None

    def subject_of(self, topic: TopicName, part: str = "value") -> str:
        return f"{self.kafka_name(topic)}-{part}"

    # ------------------------------------------------------------------ ids
    async def definition(self, schema_id: int) -> Definition | None:
        got = self._defs.get(schema_id)
        if got is None:
            raw = await self.store.get(f"{ROOT}/ids/{schema_id:010d}")
            if raw is None:
                return None
            got = self._defs[schema_id] = Definition.decode(raw[0])
        return got

    async def _known_id(self, d: Definition) -> int | None:
        fp = d.fingerprint
        got = self._fp_ids.get(fp)
        if got is None:
            raw = await self.store.get(f"{ROOT}/fingerprints/{fp}")
            if raw is None:
                return None
            got = self._fp_ids[fp] = int(raw[0])
        return got

    async def id_of(self, d: Definition, wanted: int | None = None) -> int:
        """The global id of `d`, allocated (or `wanted`, IMPORT mode) when it has none yet."""
        known = await self._known_id(d)
        if known is not None:
            if wanted is not None and wanted != known:
                raise RegistryError(NOT_PERMITTED, f"Schema already registered with id {known} instead of input "
                                                   f"id {wanted}")
            return known
        for _ in range(_RETRIES):
            if wanted is not None:
                new_id = wanted
                other = await self.definition(new_id)
                if other is not None and other.fingerprint != d.fingerprint:
                    raise RegistryError(NOT_PERMITTED, f"Overwrite new schema with id {wanted} is not permitted: "
                                                       "another schema has that id")
                await self._advance_counter(wanted)
            else:
                new_id = await self._next_id()
            await self.store.put(f"{ROOT}/ids/{new_id:010d}", d.encode())
            try:
                await self.store.put(f"{ROOT}/fingerprints/{d.fingerprint}", str(new_id).encode(), expected_version=-1)
            except NodeExistsError:  # another broker registered the same definition first: its id
                known = await self._known_id(d)
                if known is not None:
                    return known
                continue
            self._defs[new_id] = d
            self._fp_ids[d.fingerprint] = new_id
            return new_id
        raise RegistryError(STORE_ERROR, "could not allocate a schema id: concurrent registrations")

    async def _next_id(self) -> int:
        for _ in range(_RETRIES):
            raw = await self.store.get(COUNTER)
            last, expected = (int(raw[0]), raw[1].version) if raw else (0, -1)
            try:
                await self.store.put(COUNTER, str(last + 1).encode(), expected_version=expected)
            except (BadVersionError, NodeExistsError):
                continue
            if await self.definition(last + 1) is None:  # an IMPORT may have taken it
                return last + 1
        raise RegistryError(STORE_ERROR, "could not allocate a schema id: concurrent registrations")

    async def _advance_counter(self, at_least: int) -> None:
        for _ in range(_RETRIES):
            raw = await self.store.get(COUNTER)
            last, expected = (int(raw[0]), raw[1].version) if raw else (0, -1)
            if last >= at_least:
                return
            try:
                await self.store.put(COUNTER, str(at_least).encode(), expected_version=expected)
                return
            except (BadVersionError, NodeExistsError):
                continue

    # ------------------------------------------------------------------ reading subjects
    async def _topic_versions(self, topic: TopicName, subject: str) -> list[Version]:
        """The Confluent view of a topic's live Pulsar versions (hard-deleted ones left out)."""
        start, live = await self.versions.live(topic)
        marks = await self._marks(topic)
        out = []
        for v, sd in enumerate(live, start):
            name = CONFLUENT_TYPE.get(sd.type)
            if name is None:
                continue
            mark = marks.get(v)
            state = mark[1] if mark is not None and mark[0] == sd.timestamp else None
            if state == "hard":
                continue
            d = Definition(name, sd.data.decode("utf-8", "replace"), refs_from_properties(sd.properties))
            out.append(Version(subject, v + 1, await self.id_of(d), d, state == "soft"))
        return out

    def _marks_path(self, topic: TopicName) -> str:
        return f"{ROOT}/marks/{topic.tenant}/{topic.namespace}/{_q(topic.local)}"

    async def _marks(self, topic: TopicName) -> dict[int, tuple[int, str]]:
        """Pulsar version -> (its timestamp, "soft" | "hard"): a mark counts only for the version it was made on
        (a topic deleted and recreated starts its versions at 0 again, with other timestamps)."""
        path = self._marks_path(topic)
        out = {}
        for ch in await self.store.children(path):
            raw = await self.store.get(f"{path}/{ch}")
            if raw is not None and ch.isdigit():
                ts, _, state = raw[0].decode().partition(":")
                out[int(ch)] = (int(ts), state)
        return out

    async def _own_versions(self, subject: str) -> list[Version]:
        path = f"{ROOT}/subjects/{_q(subject)}"
        out = []
        for ch in await self.store.children(path):
            raw = await self.store.get(f"{path}/{ch}")
            if raw is None or not ch.isdigit():
                continue
            schema_id, _, state = raw[0].decode().partition(":")
            d = await self.definition(int(schema_id))
            if d is not None:
                out.append(Version(subject, int(ch), int(schema_id), d, state == "deleted"))
        return out

    async def all_versions(self, subject: str) -> list[Version]:
        """Every version of the subject, soft-deleted ones included, oldest first."""
        topic = self.topic_of(subject)
        if topic is not None:
            return await self._topic_versions(topic, subject)
        return await self._own_versions(subject)

    async def live_versions(self, subject: str) -> list[Version]:
        return [v for v in await self.all_versions(subject) if not v.deleted]

    async def subjects(self, deleted: bool = False, prefix: str = "") -> list[str]:
        """Every subject with a version (a soft-deleted one too with `deleted`)."""
        names: set[str] = set(urllib.parse.unquote(s) for s in await self.store.children(f"{ROOT}/subjects"))
        for tenant in await self.store.children("/schemas"):
            for ns in await self.store.children(f"/schemas/{tenant}"):
                for local in await self.store.children(f"/schemas/{tenant}/{ns}"):
                    names.add(self.subject_of(TopicName(tenant, ns, urllib.parse.unquote(local))))
        out = []
        for s in sorted(n for n in names if n.startswith(prefix)):
            vs = await self.all_versions(s)
            if any(deleted or not v.deleted for v in vs):
                out.append(s)
        return out

    async def get_version(self, subject: str, version: str | int, deleted: bool = False) -> Version:
        """A version by number, `latest` or -1 (40401 / 40402 / 42202 as Confluent answers)."""
        number = parse_version(version)
        vs = await self.all_versions(subject)
        if not any(not v.deleted for v in vs) and not (deleted and vs):
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        pool = vs if deleted else [v for v in vs if not v.deleted]
        if number == -1:
            if pool:
                return pool[-1]
        else:
            for v in pool:
                if v.version == number:
                    return v
        raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")

    async def lookup(self, subject: str, d: Definition, deleted: bool = False) -> Version:
        """The subject's version holding an equal definition (POST /subjects/{s}): 40401 / 40403 otherwise."""
        vs = await self.all_versions(subject)
        if not any(deleted or not v.deleted for v in vs):
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        d = await self._checked(d)
        fp = d.fingerprint
        for v in reversed(vs):
            if (deleted or not v.deleted) and v.definition.fingerprint == fp:
                return v
        raise RegistryError(SCHEMA_NOT_FOUND, "Schema not found")

    async def where_is(self, schema_id: int, deleted: bool = False) -> list[Version]:
        """Every subject version with id `schema_id` (GET /schemas/ids/{id}/versions)."""
        out = []
        for s in await self.subjects(deleted=True):
            out += [v for v in await self.all_versions(s) if v.id == schema_id and (deleted or not v.deleted)]
        return out

    async def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the definitions, registered under some subject, that reference (subject, version)."""
        out = set()
        for s in await self.subjects():
            for v in await self.live_versions(s):
                if any(r.subject == subject and r.version == version for r in v.definition.references):
                    out.add(v.id)
        return sorted(out)

    # ------------------------------------------------------------------ references and checks
    async def resolve(self, references: tuple[Reference, ...]) -> dict[str, str]:
        """Import name -> text of each reference, the references' own references first (42201 when missing)."""
        out: dict[str, str] = {}
        for r in references:
            try:
                v = await self.get_version(r.subject, r.version)
            except RegistryError:
                raise RegistryError(INVALID_SCHEMA, f"Invalid schema: reference {r.name} ({r.subject} version "
                                                    f"{r.version}) not found") from None
            for name, text in (await self.resolve(v.definition.references)).items():
                out.setdefault(name, text)
            out[r.name] = v.definition.text
        return out

    async def _checked(self, d: Definition) -> Definition:
        """`d` after its references resolved and its text validated (42201)."""
        if d.schema_type not in PULSAR_TYPE:
            raise RegistryError(INVALID_SCHEMA, f"Invalid schema type {d.schema_type}")
        why = compat.invalid(d.schema_type, d.text, await self.resolve(d.references))
        if why is not None:
            raise RegistryError(INVALID_SCHEMA, why)
        return d

    async def incompatibilities(self, d: Definition, against: list[Version], level: str) -> list[str]:
        """Why `d` may not follow `against` (oldest first) under Confluent level `level` ([]: it may)."""
        if level == "NONE" or not against:
            return []
        base = level.removesuffix("_TRANSITIVE")
        if base not in ("BACKWARD", "FORWARD", "FULL"):
            return [f"the compatibility level is {level}"]
        pool = against if level.endswith("_TRANSITIVE") else against[-1:]
        refs = await self.resolve(d.references)
        out: list[str] = []
        for old in reversed(pool):
            if old.definition.schema_type != d.schema_type:
                out.append(f"Incompatible because of different schema type: version {old.version} is "
                           f"{old.definition.schema_type}, the new schema {d.schema_type}")
                continue
            old_refs = await self.resolve(old.definition.references)
            t = d.schema_type
            if base in ("BACKWARD", "FULL"):
                out += [f"version {old.version}: {m}" for m in
                        compat.incompatibilities(t, d.text, old.definition.text, refs, old_refs)]
            if base in ("FORWARD", "FULL"):
                out += [f"version {old.version}: {m}" for m in
                        compat.incompatibilities(t, old.definition.text, d.text, old_refs, refs, ("old", "new"))]
        return out

    async def check(self, subject: str, d: Definition, version: str | int | None = None) -> list[str]:
        """POST /compatibility: why `d` cannot follow the subject (one version, or what its level compares)."""
        d = await self._checked(d)
        level = await self.level(subject)
        if version is not None:
            old = await self.get_version(subject, version)
            return await self.incompatibilities(d, [old], level.removesuffix("_TRANSITIVE"))
        return await self.incompatibilities(d, await self.live_versions(subject), level)

    # ------------------------------------------------------------------ registering
    async def register(self, subject: str, d: Definition, *, schema_id: int | None = None,
                       version: int | None = None, normalize: bool = False) -> int:
        """POST /subjects/{s}/versions: the id of `d` under the subject, a new version if no live one is equal.
        `schema_id` / `version`: IMPORT mode's (42205 in other modes unless they name what exists anyway)."""
        mode = await self.mode(subject)
        if mode == "READONLY":
            raise RegistryError(NOT_PERMITTED, f"Subject {subject} is in read-only mode")
        importing = mode == "IMPORT"
        if normalize:
            d = Definition(d.schema_type, canonical_text(d.schema_type, d.text), d.references)
        d = await self._checked(d)
        live = await self.live_versions(subject)
        fp = d.fingerprint
        for v in live:
            if v.definition.fingerprint == fp and (schema_id is None or schema_id == v.id):
                return v.id
        if (schema_id is not None or version is not None) and not importing:
            known = await self._known_id(d)
            if version is not None or known != schema_id:
                raise RegistryError(NOT_PERMITTED, "Overwrite new schema is not permitted: the subject is not "
                                                   "in IMPORT mode")
        if not importing:
            why = await self.incompatibilities(d, live, await self.level(subject))
            if why:  # the details as Confluent prints its list of messages (Java's List.toString())
                raise RegistryError(INCOMPATIBLE, "Schema being registered is incompatible with an earlier schema "
                                                  f"for subject \"{subject}\", details: [{', '.join(why)}]")
        new_id = await self.id_of(d, schema_id if importing else None)
        topic = self.topic_of(subject)
        if topic is not None:
            await self._append_to_topic(topic, d, version)
        else:
            await self._append_own(subject, new_id, version)
        self._forget()
        return new_id

    async def _append_to_topic(self, topic: TopicName, d: Definition, version: int | None) -> None:
        if version is not None:
            all_versions = await self.versions.versions(topic)
            if version != len(all_versions) + 1:
                raise RegistryError(INVALID_VERSION, f"The specified version '{version}' is not valid: the "
                                                     f"topic's next version is {len(all_versions) + 1}")
        schema = SchemaData(PULSAR_TYPE[d.schema_type], d.text.encode(), refs_property(d.references))
        try:  # checked above (soft-deleted versions left out, as Confluent does): Pulsar stores it as it is
            v = await self.versions.put_if_absent(topic, schema, strategy="ALWAYS_COMPATIBLE")
        except InvalidSchema as e:
            raise RegistryError(INVALID_SCHEMA, str(e)) from None
        except IncompatibleSchema as e:
            raise RegistryError(STORE_ERROR, str(e)) from None
        # Pulsar gives an equal definition its existing version back, a deleted one's too: it is live again
        await self.store.delete_recursive(f"{self._marks_path(topic)}/{v:010d}")

    async def _append_own(self, subject: str, schema_id: int, version: int | None) -> None:
        path = f"{ROOT}/subjects/{_q(subject)}"
        for _ in range(_RETRIES):
            existing = [int(ch) for ch in await self.store.children(path) if ch.isdigit()]
            v = version if version is not None else max(existing, default=0) + 1
            if version is not None and (version < 1 or version in existing):
                raise RegistryError(INVALID_VERSION, f"The specified version '{version}' is not valid")
            try:
                await self.store.put(f"{path}/{v:010d}", str(schema_id).encode(), expected_version=-1)
                return
            except NodeExistsError:
                continue
        raise RegistryError(STORE_ERROR, f"could not register under {subject}: concurrent registrations")

    # ------------------------------------------------------------------ deleting
    async def delete_subject(self, subject: str, permanent: bool = False) -> list[int]:
        """DELETE /subjects/{s}: the versions deleted. Soft first (40404 when already), then `permanent`
        (40405 when not soft-deleted first); 42206 while another schema references one of its versions."""
        await self._writable(subject)
        vs = await self.all_versions(subject)
        if not vs:
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        live = [v for v in vs if not v.deleted]
        if permanent and live:
            raise RegistryError(SUBJECT_NOT_SOFT_DELETED, f"Subject '{subject}' was not deleted first before "
                                                          "being permanently deleted")
        if not permanent and not live:
            raise RegistryError(SUBJECT_SOFT_DELETED, f"Subject '{subject}' was soft deleted. Set permanent=true "
                                                      "to delete permanently")
        for v in live:
            await self._refuse_if_referenced(subject, v.version)
        doomed = vs if permanent else live
        for i, v in enumerate(doomed):  # permanent: one tombstone, with the last
            await self._mark(subject, v, "hard" if permanent else "soft", last=permanent and i == len(doomed) - 1)
        if permanent:
            await self.store.delete_recursive(f"{ROOT}/config/{_q(subject)}")
            await self.store.delete_recursive(f"{ROOT}/mode/{_q(subject)}")
        self._forget()
        return [v.version for v in (vs if permanent else live)]

    async def delete_version(self, subject: str, version: str | int, permanent: bool = False) -> int:
        """DELETE /subjects/{s}/versions/{v}: the version deleted (40406 / 40407 as for subjects)."""
        await self._writable(subject)
        v = await self.get_version(subject, version, deleted=True)
        if permanent and not v.deleted:
            raise RegistryError(VERSION_NOT_SOFT_DELETED, f"Subject '{subject}' Version {v.version} was not deleted "
                                                          "first before being permanently deleted")
        if not permanent and v.deleted:
            raise RegistryError(VERSION_SOFT_DELETED, f"Subject '{subject}' Version {v.version} was soft deleted. "
                                                      "Set permanent=true to delete permanently")
        await self._refuse_if_referenced(subject, v.version)
        remaining = [o for o in await self.all_versions(subject) if o.version != v.version]
        await self._mark(subject, v, "hard" if permanent else "soft", last=permanent and not remaining)
        self._forget()
        return v.version

    async def _refuse_if_referenced(self, subject: str, version: int) -> None:
        users = await self.referenced_by(subject, version)
        if users:
            raise RegistryError(REFERENCE_EXISTS, f"One or more references exist to the schema {{subject={subject},"
                                                  f" version={version}}}: ids {users}")

    async def _mark(self, subject: str, v: Version, state: str, last: bool) -> None:
        topic = self.topic_of(subject)
        if topic is None:
            path = f"{ROOT}/subjects/{_q(subject)}/{v.version:010d}"
            if state == "hard":
                await self.store.delete_recursive(path)
            else:
                await self.store.put(path, f"{v.id}:deleted".encode())
            return
        if last:  # the topic's schema is gone for Pulsar too (a tombstone: kop/schemas/versions.py)
            await self.versions.delete_schema(topic)
            await self.store.delete_recursive(self._marks_path(topic))
            return
        got = await self.versions.get(topic, v.version - 1)
        if got is not None:
            await self.store.put(f"{self._marks_path(topic)}/{v.version - 1:010d}",
                                 f"{got[1].timestamp}:{state}".encode())

    # ------------------------------------------------------------------ levels and modes
    async def _setting(self, kind: str, subject: str | None) -> str | None:
        raw = await self.store.get(f"{ROOT}/{kind}-global" if subject is None else f"{ROOT}/{kind}/{_q(subject)}")
        return raw[0].decode() if raw is not None else None

    async def level(self, subject: str | None = None, default_to_global: bool = True) -> str:
        """The subject's compatibility level (its own, else the global one); None subject: the global one."""
        own = await self._setting("config", subject) if subject is not None else None
        if own is not None or (subject is not None and not default_to_global):
            if own is None:
                raise RegistryError(NO_SUBJECT_CONFIG, f"Subject '{subject}' does not have subject-level "
                                                       "compatibility configured")
            return own
        return await self._setting("config", None) or self.default_level

    async def set_level(self, subject: str | None, level: object) -> str:
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise RegistryError(INVALID_LEVEL, f"Invalid compatibility level. Valid values are none, backward, "
                                               f"forward, full, backward_transitive, forward_transitive, and "
                                               f"full_transitive: {level!r}")
        level = level.upper()
        await self.store.put(f"{ROOT}/config-global" if subject is None else f"{ROOT}/config/{_q(subject)}",
                             level.encode())
        return level

    async def delete_level(self, subject: str | None) -> str:
        """DELETE /config[/{s}]: the level it had (the global one goes back to the broker's default)."""
        if subject is not None and await self._setting("config", subject) is None:
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        before = await self.level(subject)
        await self.store.delete_recursive(f"{ROOT}/config-global" if subject is None
                                          else f"{ROOT}/config/{_q(subject)}")
        return before

    async def topic_strategy(self, topic: TopicName) -> str:
        """The Pulsar strategy of the topic (kop/schemas/versions.py asks): `<topic>-value`'s own level, else the
        namespace's schemaCompatibilityStrategy policy, else the global level - Pulsar's topic, namespace, broker."""
        subject = self.subject_of(topic)
        if await self._setting("config", subject) is None:
            policy = self.versions.namespace_strategy(topic)
            if policy is not None:
                return policy
        return level_to_strategy(await self.level(subject))

    async def mode(self, subject: str | None = None, default_to_global: bool = True) -> str:
        own = await self._setting("mode", subject) if subject is not None else None
        if own is not None:
            return own
        if subject is not None and not default_to_global:
            raise RegistryError(NO_SUBJECT_MODE, f"Subject '{subject}' does not have subject-level mode configured")
        return await self._setting("mode", None) or "READWRITE"

    async def set_mode(self, subject: str | None, mode: object) -> str:
        if not isinstance(mode, str) or mode.upper() not in MODES:
            raise RegistryError(INVALID_MODE, f"Invalid mode. Valid values are READWRITE, READONLY, IMPORT: "
                                              f"{mode!r}")
        mode = mode.upper()
        await self.store.put(f"{ROOT}/mode-global" if subject is None else f"{ROOT}/mode/{_q(subject)}",
                             mode.encode())
        return mode

    async def delete_mode(self, subject: str) -> str:
        before = await self.mode(subject, default_to_global=False)
        await self.store.delete_recursive(f"{ROOT}/mode/{_q(subject)}")
        return before

    async def _writable(self, subject: str) -> None:
        if await self.mode(subject) == "READONLY":
            raise RegistryError(NOT_PERMITTED, f"Subject {subject} is in read-only mode")

    # ------------------------------------------------------------------ TopicSchemaIds (kop/schemas/api.py)
    def _forget(self) -> None:
        self._ids.clear()
        self._versions.clear()
        self._registered.clear()

    @staticmethod
    def _fresh(entry: tuple[float, T] | None) -> T | None:
        return entry[1] if entry is not None and time.monotonic() - entry[0] < CACHE_SECONDS else None

    async def confluent_id(self, topic: TopicName, version: int) -> int | None:
        got = self._fresh(self._ids.get((topic, version)))
        if got is not None:
            return got
        found = await self.versions.get(topic, version)
        if found is None or found[1].type not in CONFLUENT_TYPE:
            return None
        sd = found[1]
        schema_id = await self.id_of(Definition(CONFLUENT_TYPE[sd.type], sd.data.decode("utf-8", "replace"),
                                                refs_from_properties(sd.properties)))
        self._ids[(topic, version)] = (time.monotonic(), schema_id)
        return schema_id

    async def pulsar_version(self, topic: TopicName, schema_id: int) -> int | None:
        got = self._fresh(self._versions.get((topic, schema_id)))
        if got is not None:
            return got if got >= 0 else None
        d = await self.definition(schema_id)
        out = -1
        if d is not None:
            start, live = await self.versions.live(topic)
            fp = d.fingerprint
            for v, sd in enumerate(live, start):
                name = CONFLUENT_TYPE.get(sd.type)
                if name is not None and Definition(name, sd.data.decode("utf-8", "replace"),
                                                   refs_from_properties(sd.properties)).fingerprint == fp:
                    out = v
        self._versions[(topic, schema_id)] = (time.monotonic(), out)
        return out if out >= 0 else None

    async def registered_ids(self, topic: TopicName, part: Part, fresh: bool = False) -> frozenset[int]:
        got = None if fresh else self._fresh(self._registered.get((topic, part)))
        if got is not None:
            return got
        ids = frozenset(v.id for v in await self.live_versions(self.subject_of(topic, part)))
        self._registered[(topic, part)] = (time.monotonic(), ids)
        return ids

    async def _pulsar_refs(self, versions: list[SchemaData]) -> Callable[[SchemaData], compat.Refs]:
        """For kop/schemas/versions.py: the resolved references of the versions that carry some."""
        resolved: dict[bytes, compat.Refs] = {}
        for sd in versions:
            refs = refs_from_properties(sd.properties)
            if refs:
                try:
                    resolved[sd.data] = await self.resolve(refs)
                except RegistryError:
                    pass
        return lambda sd: resolved.get(sd.data, compat.NO_REFS)


def parse_version(version: str | int) -> int:
    """A version of a path: a number from 1, `latest` or -1 (-1 = latest); 42202 otherwise."""
    if version == "latest":
        return -1
    try:
        n = int(version)
    except (TypeError, ValueError):
        n = 0
    if n == -1 or n >= 1:
        return n
    raise RegistryError(INVALID_VERSION, f"The specified version '{version}' is not a valid version id. Allowed "
                                         "values are between [1, 2^31-1] and the string \"latest\"")
