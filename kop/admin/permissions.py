"""Pulsar admin v2's permission endpoints, on namespaces and on topics: grant, revoke, list.

Paths and bodies are Apache Pulsar's: `POST .../permissions/{role}` with a JSON array of actions (204), `DELETE
.../permissions/{role}` (204), `GET .../permissions` answering `{"role": ["consume", "produce"]}`; a topic's
listing includes its namespace's grants, as Pulsar's does; a topic revoke removes the topic's grant only (a role's
namespace grant stays, and revoking what was never granted is a 204, as on Pulsar 4.0.7). The grants are Kafka ACLs in the broker's one authorizer
(kop/security/pulsar_permissions.py has the mapping and why); without `authorizationEnabled` there is no
authorizer to keep them and every endpoint answers 501 "Authorization is not enabled" (Pulsar stores grants it
will not enforce; an operator is better told). Differences, on purpose: Pulsar 4.0.7 stores an action it does not
know as `null` and accepts functions/sources/sinks/packages, which mean nothing here; both get 400. Only super users reach
these paths (kop/admin/auth.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin import views
from kop.admin.views import AdminError
from kop.security import pulsar_permissions as perms

if TYPE_CHECKING:
    from kop.admin.server import AdminServer
    from kop.security.acl import Authorizer
    from kop.security.acl.model import ResourcePattern

NS = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
NO_CONTENT = 204


def add_routes(server: AdminServer, r: web.UrlDispatcher, topic_path: str) -> None:
    h = _Handlers(server)
    r.add_get(NS, h.list_namespace)
    r.add_post(NS + "/{role}", h.grant_namespace)
    r.add_delete(NS + "/{role}", h.revoke_namespace)
    r.add_get(topic_path + "/permissions", h.list_topic)
    r.add_post(topic_path + "/permissions/{role}", h.grant_topic)
    r.add_delete(topic_path + "/permissions/{role}", h.revoke_topic)


async def _actions(request: web.Request) -> list[str]:
    try:
        body = json.loads(await request.read() or b"null")
        return perms.parse_actions(body)
    except (ValueError, perms.BadGrant) as e:
        raise AdminError(400, str(e)) from None


class _Handlers:
    def __init__(self, server: AdminServer) -> None:
        self.server = server

    def _authorizer(self) -> Authorizer:
        authz = self.server.service.authorizer
        if authz is None:
            raise AdminError(501, "Authorization is not enabled")
        return authz

    def _namespace(self, request: web.Request) -> ResourcePattern:
        m = request.match_info
        views.check_namespace(self.server.service, m["tenant"], m["namespace"])
        return perms.namespace_pattern(m["tenant"], m["namespace"])

    async def _topic(self, request: web.Request) -> tuple[ResourcePattern, ResourcePattern]:
        """(the topic's pattern, its namespace's pattern); a partition's name means its topic."""
        ref = await self.server._ref(request)
        name = ref.topic.name
        kafka_name = self.server.service.topics.kafka_name(name)
        return perms.topic_pattern(kafka_name), perms.namespace_pattern(name.tenant, name.namespace)

    async def list_namespace(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        return _json(perms.held_on(authz.describe_all(), self._namespace(request)))

    async def grant_namespace(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        pattern = self._namespace(request)
        await perms.grant(authz, pattern, request.match_info["role"], await _actions(request))
        return web.Response(status=NO_CONTENT)

    async def revoke_namespace(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        await perms.revoke(authz, self._namespace(request), request.match_info["role"])
        return web.Response(status=NO_CONTENT)

    async def list_topic(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        topic, namespace = await self._topic(request)
        bindings = authz.describe_all()
        merged = perms.held_on(bindings, namespace)
        for role, actions in perms.held_on(bindings, topic).items():
            merged[role] = sorted(set(merged.get(role, [])) | set(actions))
        return _json(dict(sorted(merged.items())))

    async def grant_topic(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        topic, _ = await self._topic(request)
        await perms.grant(authz, topic, request.match_info["role"], await _actions(request))
        return web.Response(status=NO_CONTENT)

    async def revoke_topic(self, request: web.Request) -> web.Response:
        authz = self._authorizer()
        topic, _ = await self._topic(request)
        await perms.revoke(authz, topic, request.match_info["role"])
        return web.Response(status=NO_CONTENT)


def _json(data: object) -> web.Response:
    return web.Response(text=json.dumps(data), status=200, content_type="application/json")
