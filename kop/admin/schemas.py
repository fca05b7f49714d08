"""Pulsar admin v2's schema endpoints under `/admin/v2/schemas/{tenant}/{namespace}/{topic}`, answering as Apache
Pulsar 4.0 does (bodies and status codes checked side by side by tests/e2e/test_pulsar_schema_admin.py):

- `GET .../schema` (the latest version) and `.../schema/{version}`: Pulsar's GetSchemaResponse (`version`, `type`,
  `timestamp`, `data`, `properties`), 404 "Schema not found" for none (or a deleted version);
- `GET .../schemas`: `{"getSchemaResponses": [...]}`, every version since the last delete, oldest first;
- `POST .../schema` with a PostSchemaPayload (`type`, `schema`, `properties`): `{"version": {"version": N}}` - a new
  version, or an equal schema's (type and definition; properties do not count); 409 when the broker's
  `schemaCompatibilityStrategy` refuses it, 422 for an AVRO definition that does not parse;
- `DELETE .../schema`: `{"version": N}`, N the tombstone version Pulsar writes (the next upload gets N + 1);
  `?force=true` removes every version (the next is 0 again) and answers `{"version": -1}`;
- `POST .../compatibility`: 202 `{"schemaCompatibilityStrategy": "FULL", "compatibility": true}`; an incompatible
  schema gets Pulsar's answer, an unexpected-error 500 with the reason (Pulsar 4.0 never answers false);
- `POST .../version`: `{"version": N}` of an equal registered schema, `{"version": -1}` for none.

Bodies: a non-JSON Content-Type 415, unparsable JSON or JSON that is not an object 400, a null body, a missing type
or definition and an unknown type name 500 - all Pulsar's codes. Differences on purpose: errors are our
`{"reason": ...}` JSON with our own text (Pulsar mixes Jetty HTML pages, text/plain parser messages and Java stack
traces); `GET .../schema/x` stays 400 (Pulsar: 500); only AVRO definitions are validated (Pulsar also refuses
e.g. a STRING definition "x" with 422: the registry's producer path would have to change too); KEY_VALUE
definitions are stored as given (Pulsar re-encodes the JSON key/value pair into its binary layout); BYTES and
AUTO* (client-side pseudo types) are refused 422 (Pulsar stores a BYTES schema); the strategy is broker-wide (no
namespace or topic policies). A partition's name stands for its
topic (schemas are per topic, as in Pulsar). The schemas are the pulsar handler's (kop/schemas/versions.py,
behind kop/services.py's `PulsarSchemas`); without the pulsar handler every call answers 404.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

from kop.admin.views import AdminError
from kop.schemas.versions import SchemaRestError
from kop.topics.names import InvalidTopicName, TopicName, check_local_name

if TYPE_CHECKING:
    from kop.admin.server import AdminServer
    from kop.services import PulsarSchemas

T = TypeVar("T")
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(0|[1-9][0-9]{0,8})$")


def add_routes(server: AdminServer, r: web.UrlDispatcher, schema_path: str) -> None:
    async def latest(request: web.Request) -> web.Response:
        return await _answer(server, request, None)

    async def by_version(request: web.Request) -> web.Response:
        text = request.match_info["version"]
        try:
            version = int(text)
        except ValueError:
            raise AdminError(400, f"version must be an integer, got {text!r}") from None
        return await _answer(server, request, version)

    async def all_versions(request: web.Request) -> web.Response:
        registry, name = _resolve(server, request)
        return _json({"getSchemaResponses": await registry.rest_schemas(name)})

    async def post(request: web.Request) -> web.Response:
        registry, name = _resolve(server, request)
        payload = await _payload(request)
        return _json({"version": {"version": await _call(registry.rest_post(name, payload))}})

    async def delete(request: web.Request) -> web.Response:
        registry, name = _resolve(server, request)
        force = request.query.get("force", "").lower() == "true"  # JAX-RS's boolean: anything else is false
        return _json({"version": await registry.rest_delete(name, force)})

    async def compatibility(request: web.Request) -> web.Response:
        registry, name = _resolve(server, request)
        payload = await _payload(request)
        return _json(await _call(registry.rest_compatibility(name, payload)), 202)  # Pulsar's 202 Accepted

    async def version_of(request: web.Request) -> web.Response:
        registry, name = _resolve(server, request)
        payload = await _payload(request)
        return _json({"version": await _call(registry.rest_version(name, payload))})

    r.add_get(schema_path + "/schema", latest)
    r.add_get(schema_path + "/schema/{version}", by_version)
    r.add_get(schema_path + "/schemas", all_versions)
    r.add_post(schema_path + "/schema", post)
    r.add_delete(schema_path + "/schema", delete)
    r.add_post(schema_path + "/compatibility", compatibility)
    r.add_post(schema_path + "/version", version_of)


def _topic(request: web.Request) -> TopicName:
    """The topic the path names (a partition's name: its topic's)."""
    m = request.match_info
    local = m["topic"]
    found = _PARTITION.match(local)
    base = found["base"] if found else local
    try:
        check_local_name(base)
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    return TopicName(m["tenant"], m["namespace"], base)


def _resolve(server: AdminServer, request: web.Request) -> tuple[PulsarSchemas, TopicName]:
    name = _topic(request)
    registry = server.service.pulsar_schemas
    if registry is None:
        raise AdminError(404, "Schema registry not available: the pulsar protocol handler is not running")
    return registry, name


async def _payload(request: web.Request) -> Any:
    """The parsed JSON body (None for an empty one); 415 for another Content-Type and 400 for unparsable JSON,
    as Pulsar's JAX-RS resource answers."""
    if request.content_type != "application/json":
        raise AdminError(415, "Unsupported Media Type")
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as e:  # UnicodeDecodeError included
        raise AdminError(400, f"the body is not JSON: {e}") from None


async def _call(answer: Awaitable[T]) -> T:
    try:
        return await answer
    except SchemaRestError as e:
        raise AdminError(e.status, e.reason) from None


def _json(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(body), status=status, content_type="application/json")


async def _answer(server: AdminServer, request: web.Request, version: int | None) -> web.Response:
    name = _topic(request)
    registry = server.service.pulsar_schemas
    body = None
    if registry is not None:
        body = await registry.rest_schema(name, version)
    if body is None:
        raise AdminError(404, "Schema not found")
    return _json(body)
