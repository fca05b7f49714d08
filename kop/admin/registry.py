"""Confluent Schema Registry's REST API at the root of the admin HTTP port (kop/schemas/registry.py's model).

A Confluent client's `schema.registry.url` is the broker's admin URL. Answers are what Confluent's clients parse:
Content-Type `application/vnd.schemaregistry.v1+json`, refusals `{"error_code": N, "message": "..."}` with the
HTTP status of the code's first three digits (40401 -> 404; 409 stays 409). Bodies are read as JSON whatever
their Content-Type says (clients send application/json or application/vnd.schemaregistry(.v1)+json).

Security (with `authenticationEnabled`, kop/admin/auth.py): every call needs a token; super users may do
everything; for other roles these routes decide, with the broker's Kafka ACLs (kop/security/acl) when
`authorizationEnabled` (without it every authenticated role is allowed, as Kafka allows everything without an
authorizer). A subject `<topic>-value` / `<topic>-key` is authorized as its topic (its Kafka name):

- reading its versions, a lookup and a compatibility check: DESCRIBE on the topic (READ and WRITE imply it);
- registering: WRITE on the topic (what producing with that schema needs);
- deleting versions or the subject: DELETE on the topic;
- its /config and /mode: DESCRIBE_CONFIGS to read, ALTER_CONFIGS to change.

Other subjects (RecordNameStrategy, ...) and the global /config and /mode: DESCRIBE on the CLUSTER to read and
ALTER on the CLUSTER to change (Kafka's operation for cluster-wide administration). Reading a schema by id
(/schemas/ids/...) needs only a valid token: an id is what every consumer of a topic must resolve, and says
nothing of which topic it is used in. Listings leave out the subjects the role may not describe.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from kop.schemas import compat
from kop.schemas.definitions import (
    INVALID_SCHEMA,
    SCHEMA_NOT_FOUND,
    STORE_ERROR,
    SUBJECT_NOT_FOUND,
    TYPES,
    VERSION_NOT_FOUND,
    Definition,
    RegistryError,
    canonical_text,
    parse_references,
)
from kop.schemas.registry import ConfluentRegistry, Version, parse_version
from kop.security.acl.model import CLUSTER_NAME, AclOperation, ResourceType
from kop.security.principal import KafkaPrincipal

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

log = logging.getLogger("kop.admin")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Paths this module serves; kop/admin/auth.py leaves their authorization to it (DELEGATED_PREFIXES).
PREFIXES = ("/subjects", "/schemas", "/config", "/mode", "/compatibility")
ROLE_KEY = "kop.role"  # where kop/admin/auth.py leaves an authenticated role (absent: authentication is off)
Op = AclOperation
Route = Callable[[web.Request], Awaitable[object]]


def _answer(data: object, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type=CONTENT_TYPE)


def _error(code: int, message: str) -> web.Response:
    e = RegistryError(code, message)
    return _answer({"error_code": code, "message": message}, e.status)


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "false").lower() == "true"


async def _body(request: web.Request) -> dict[str, object]:
    raw = await request.read()
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        raise RegistryError(400, f"Unrecognized body: {e}") from None
    if not isinstance(body, dict):
        raise RegistryError(INVALID_SCHEMA if request.path.startswith(("/subjects", "/compatibility")) else 400,
                            "the body must be a JSON object")
    return body


def _definition(body: dict[str, object]) -> Definition:
    text = body.get("schema")
    if not isinstance(text, str) or not text:
        raise RegistryError(INVALID_SCHEMA, "Empty schema")
    schema_type = body.get("schemaType") or "AVRO"
    if not isinstance(schema_type, str) or schema_type.upper() not in TYPES:
        raise RegistryError(INVALID_SCHEMA, f"Invalid schema type {schema_type!r}")
    return Definition(schema_type.upper(), text, parse_references(body.get("references")))


def _int(value: object, code: int, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegistryError(code, f"{what} must be an integer")
    return value


class RegistryRoutes:
    """The routes, over the broker's registry (BrokerServices.schema_registry)."""

    def __init__(self, server: AdminServer) -> None:
        self.service = server.service

    @property
    def registry(self) -> ConfluentRegistry:
        return self.service.schema_registry

    # ------------------------------------------------------------------ authorization
    def _allowed(self, request: web.Request, op: AclOperation, subject: str | None) -> bool:
        role = request.get(ROLE_KEY)
        authorizer = self.service.authorizer
        if role is None or authorizer is None:
            return True
        principal = KafkaPrincipal("User", role)
        host = request.remote or ""
        topic = self.registry.topic_of(subject) if subject is not None else None
        if subject is not None and topic is None and subject.endswith("-key"):
            try:
                topic = self.registry.parse(subject.removesuffix("-key"))
            except ValueError:
                topic = None
        if topic is None:
            cluster_op = Op.DESCRIBE if op in (Op.DESCRIBE, Op.DESCRIBE_CONFIGS) else Op.ALTER
            return authorizer.authorize(principal, host, cluster_op, ResourceType.CLUSTER, CLUSTER_NAME)
        return authorizer.authorize(principal, host, op, ResourceType.TOPIC, self.registry.kafka_name(topic))

    def _authorize(self, request: web.Request, op: AclOperation, subject: str | None) -> None:
        if not self._allowed(request, op, subject):
            raise RegistryError(40301, "User is denied operation on this server.")

    # ------------------------------------------------------------------ routes
    def add_routes(self, r: web.UrlDispatcher) -> None:
        def route(fn: Route) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
            async def handler(request: web.Request) -> web.StreamResponse:
                try:
                    got = await fn(request)
                except RegistryError as e:
                    return _error(e.error_code, e.message)
                except Exception as e:  # the store failed, or a bug: Confluent's 50001 with the reason
                    log.exception("schema registry %s %s failed", request.method, request.path)
                    return _error(STORE_ERROR, f"Error in the backend data store: {e!r}")
                return got if isinstance(got, web.StreamResponse) else _answer(got)
            return handler

        r.add_get("/", route(self.root))
        r.add_get("/schemas/types", route(self.types))
        r.add_get("/schemas", route(self.schemas))
        r.add_get("/schemas/ids/{id}", route(self.by_id))
        r.add_get("/schemas/ids/{id}/schema", route(self.by_id_text))
        r.add_get("/schemas/ids/{id}/subjects", route(self.id_subjects))
        r.add_get("/schemas/ids/{id}/versions", route(self.id_versions))
        r.add_get("/subjects", route(self.subjects))
        r.add_post("/subjects/{subject}", route(self.lookup))
        r.add_delete("/subjects/{subject}", route(self.delete_subject))
        r.add_get("/subjects/{subject}/versions", route(self.versions))
        r.add_post("/subjects/{subject}/versions", route(self.register))
        r.add_get("/subjects/{subject}/versions/{version}", route(self.version))
        r.add_delete("/subjects/{subject}/versions/{version}", route(self.delete_version))
        r.add_get("/subjects/{subject}/versions/{version}/schema", route(self.version_text))
        r.add_get("/subjects/{subject}/versions/{version}/referencedby", route(self.referenced_by))
        r.add_post("/compatibility/subjects/{subject}/versions", route(self.compatibility))
        r.add_post("/compatibility/subjects/{subject}/versions/{version}", route(self.compatibility))
        for path in ("/config", "/config/{subject}"):
            r.add_get(path, route(self.get_config))
            r.add_put(path, route(self.put_config))
            r.add_delete(path, route(self.delete_config))
        for path in ("/mode", "/mode/{subject}"):
            r.add_get(path, route(self.get_mode))
            r.add_put(path, route(self.put_mode))
        r.add_delete("/mode/{subject}", route(self.delete_mode))

    async def root(self, request: web.Request) -> object:
        return {}

    async def types(self, request: web.Request) -> object:
        return sorted(TYPES)

    async def _visible_subjects(self, request: web.Request, deleted: bool, prefix: str) -> list[str]:
        return [s for s in await self.registry.subjects(deleted, prefix) if self._allowed(request, Op.DESCRIBE, s)]

    async def schemas(self, request: web.Request) -> object:
        deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
        out = []
        for s in await self._visible_subjects(request, deleted, request.query.get("subjectPrefix", "")):
            vs = [v for v in await self.registry.all_versions(s) if deleted or not v.deleted]
            out += [v.body() for v in (vs[-1:] if latest_only else vs)]
        return out

    async def _schema_id(self, request: web.Request) -> tuple[int, Definition]:
        try:
            schema_id = int(request.match_info["id"])
        except ValueError:
            # what Confluent's JAX-RS answers when the path's {id} is no integer (no route matches)
            raise RegistryError(404, "HTTP 404 Not Found") from None
        d = await self.registry.definition(schema_id)
        if d is None:
            raise RegistryError(SCHEMA_NOT_FOUND, f"Schema {schema_id} not found")
        return schema_id, d

    async def by_id(self, request: web.Request) -> object:
        schema_id, d = await self._schema_id(request)
        body = await self._formatted(request, d.body(), d)
        subject = request.query.get("subject")
        if subject and not any(v.id == schema_id for v in await self.registry.all_versions(subject)):
            raise RegistryError(SCHEMA_NOT_FOUND, f"Schema {schema_id} not found under subject {subject}")
        return body

    async def by_id_text(self, request: web.Request) -> object:
        _, d = await self._schema_id(request)
        return web.Response(text=d.text, content_type=CONTENT_TYPE)

    async def id_subjects(self, request: web.Request) -> object:
        schema_id, _ = await self._schema_id(request)
        found = await self.registry.where_is(schema_id, _flag(request, "deleted"))
        return sorted({v.subject for v in found if self._allowed(request, Op.DESCRIBE, v.subject)})

    async def id_versions(self, request: web.Request) -> object:
        schema_id, _ = await self._schema_id(request)
        found = await self.registry.where_is(schema_id, _flag(request, "deleted"))
        return [{"subject": v.subject, "version": v.version} for v in found
                if self._allowed(request, Op.DESCRIBE, v.subject)]

    async def subjects(self, request: web.Request) -> object:
        return await self._visible_subjects(request, _flag(request, "deleted"),
                                            request.query.get("subjectPrefix", ""))

    def _subject(self, request: web.Request, op: AclOperation) -> str:
        subject = request.match_info["subject"]
        self._authorize(request, op, subject)
        return subject

    async def versions(self, request: web.Request) -> object:
        subject = self._subject(request, Op.DESCRIBE)
        deleted = _flag(request, "deleted")
        vs = [v.version for v in await self.registry.all_versions(subject) if deleted or not v.deleted]
        if not vs:
            raise RegistryError(SUBJECT_NOT_FOUND, f"Subject '{subject}' not found.")
        return vs

    async def _version(self, request: web.Request) -> Version:
        subject = self._subject(request, Op.DESCRIBE)
        return await self.registry.get_version(subject, request.match_info["version"], _flag(request, "deleted"))

    async def version(self, request: web.Request) -> object:
        v = await self._version(request)
        return await self._formatted(request, v.body(), v.definition)

    async def _formatted(self, request: web.Request, body: dict[str, object], d: Definition) -> dict[str, object]:
        """`?format=serialized`: a PROTOBUF schema as base64 FileDescriptorProto (what confluent-kafka's Protobuf
        serializer asks for its references); other formats and types answer the text as registered."""
        if request.query.get("format") == "serialized" and d.schema_type == "PROTOBUF":
            body["schema"] = compat.protobuf_serialized(d.text, await self.registry.resolve(d.references))
        return body

    async def version_text(self, request: web.Request) -> object:
        return web.Response(text=(await self._version(request)).definition.text, content_type=CONTENT_TYPE)

    async def referenced_by(self, request: web.Request) -> object:
        v = await self._version(request)
        return await self.registry.referenced_by(v.subject, v.version)

    async def register(self, request: web.Request) -> object:
        subject = self._subject(request, Op.WRITE)
        body = await _body(request)
        d = _definition(body)
        schema_id = _int(body.get("id"), INVALID_SCHEMA, "id")
        version = _int(body.get("version"), INVALID_SCHEMA, "version")
        got = await self.registry.register(subject, d, schema_id=schema_id if schema_id and schema_id > 0 else None,
                                           version=version if version and version > 0 else None,
                                           normalize=_flag(request, "normalize"))
        return {"id": got}

    async def lookup(self, request: web.Request) -> object:
        subject = self._subject(request, Op.DESCRIBE)
        d = _definition(await _body(request))
        if _flag(request, "normalize"):
            d = Definition(d.schema_type, canonical_text(d.schema_type, d.text), d.references)
        return (await self.registry.lookup(subject, d, _flag(request, "deleted"))).body()

    async def delete_subject(self, request: web.Request) -> object:
        subject = self._subject(request, Op.DELETE)
        return await self.registry.delete_subject(subject, _flag(request, "permanent"))

    async def delete_version(self, request: web.Request) -> object:
        subject = self._subject(request, Op.DELETE)
        return await self.registry.delete_version(subject, request.match_info["version"], _flag(request, "permanent"))

    async def compatibility(self, request: web.Request) -> object:
        subject = self._subject(request, Op.DESCRIBE)
        d = _definition(await _body(request))
        version = request.match_info.get("version")
        number = None if version is None else parse_version(version)
        if not await self.registry.live_versions(subject):
            # Confluent: nothing to compare with is compatible, also against `latest` of a subject with no live
            # version (a client's test_compatibility before the first registration); a numbered one is 40402
            if number is not None and number != -1:
                raise RegistryError(VERSION_NOT_FOUND, f"Version {version} not found.")
            return {"is_compatible": True, **({"messages": []} if _flag(request, "verbose") else {})}
        why = await self.registry.check(subject, d, version)
        out: dict[str, object] = {"is_compatible": not why}
        if _flag(request, "verbose"):
            out["messages"] = why
        return out

    async def get_config(self, request: web.Request) -> object:
        subject = request.match_info.get("subject")
        self._authorize(request, Op.DESCRIBE_CONFIGS, subject)
        return {"compatibilityLevel": await self.registry.level(subject, _flag(request, "defaultToGlobal"))}

    async def put_config(self, request: web.Request) -> object:
        subject = request.match_info.get("subject")
        self._authorize(request, Op.ALTER_CONFIGS, subject)
        body = await _body(request)
        return {"compatibility": await self.registry.set_level(subject, body.get("compatibility"))}

    async def delete_config(self, request: web.Request) -> object:
        subject = request.match_info.get("subject")
        self._authorize(request, Op.ALTER_CONFIGS, subject)
        return {"compatibilityLevel": await self.registry.delete_level(subject)}

    async def get_mode(self, request: web.Request) -> object:
        subject = request.match_info.get("subject")
        self._authorize(request, Op.DESCRIBE_CONFIGS, subject)
        return {"mode": await self.registry.mode(subject, _flag(request, "defaultToGlobal") or subject is None)}

    async def put_mode(self, request: web.Request) -> object:
        subject = request.match_info.get("subject")
        self._authorize(request, Op.ALTER_CONFIGS, subject)
        body = await _body(request)
        return {"mode": await self.registry.set_mode(subject, body.get("mode"))}

    async def delete_mode(self, request: web.Request) -> object:
        subject = self._subject(request, Op.ALTER_CONFIGS)
        return {"mode": await self.registry.delete_mode(subject)}


def add_routes(server: AdminServer, r: web.UrlDispatcher) -> None:
    RegistryRoutes(server).add_routes(r)
