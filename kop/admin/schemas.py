"""Pulsar admin v2's schema reads: `GET /admin/v2/schemas/{tenant}/{namespace}/{topic}/schema` (the latest version)
and `.../schema/{version}`, answering Pulsar 4.x's GetSchemaResponse (`version`, `type`, `timestamp`, `data`,
`properties`) or 404 "Schema not found". A partition's name stands for its topic (schemas are per topic, as in
Pulsar). The schemas are the pulsar handler's (kop/pulsar/schema_registry.py, behind kop/services.py's
`PulsarSchemas`); without the pulsar handler every call answers 404. Not served: schema upload and deletion
(`POST`/`DELETE .../schema`), `/versions`, `/compatibility`.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin.views import AdminError
from kop.topics.names import InvalidTopicName, TopicName, check_local_name

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

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

    r.add_get(schema_path + "/schema", latest)
    r.add_get(schema_path + "/schema/{version}", by_version)


async def _answer(server: AdminServer, request: web.Request, version: int | None) -> web.Response:
    m = request.match_info
    local = m["topic"]
    found = _PARTITION.match(local)
    base = found["base"] if found else local
    try:
        check_local_name(base)
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    registry = getattr(server.service, "pulsar_schemas", None)
    body = None
    if registry is not None:
        body = await registry.rest_schema(TopicName(m["tenant"], m["namespace"], base), version)
    if body is None:
        raise AdminError(404, "Schema not found")
    return web.Response(text=json.dumps(body), content_type="application/json")
