"""Pulsar's topic-level policies over the admin REST: `/admin/v2/persistent/{tenant}/{ns}/{topic}/<policy>`.

Why: an application often needs one topic to differ from its namespace (a shorter TTL, one producer), and Pulsar's
admin (pulsar-admin topics set-message-ttl ...) sets that on the topic. The policies served are the namespace
policies this broker honours, with Pulsar's topic-level paths:

* messageTTL: GET, POST `?messageTTL=<seconds>` (without the parameter it removes the policy, as Pulsar's does),
  DELETE;
* retention (RetentionPolicies), deduplicationEnabled (a boolean), maxProducers, maxConsumers (integers): GET,
  POST (the value as the body), DELETE;
* backlogQuotaMap (GET), backlogQuota (POST a BacklogQuota / DELETE, `?backlogQuotaType=`);
* schemaCompatibilityStrategy: GET, PUT (a strategy's name), DELETE.

A GET answers the topic's own value (200 with no body when unset, as Pulsar) or, with `?applied=true`, the value
that applies: the topic's, else the namespace's, else the broker's. A topic's policies override its namespace's
through the same rule functions the namespace level uses (kop/topics/namespaces.py `effective`, `limit`,
`retention`, `backlog_quotas`, `schema_strategy`): Pulsar producers and consumers (max producers/consumers,
de-duplication), the TTL and backlog-quota passes, retention and the schema checks of both protocols. A partition's
name is refused (412) and an unknown topic is 404, as Pulsar answers. They are deleted with the topic.

Difference from Apache Pulsar, on purpose: Pulsar needs `topicLevelPoliciesEnabled` (true by default in 4.0) and
keeps these policies in a system topic per namespace (`__change_events`), read back asynchronously; this broker
keeps them in the metadata store beside the namespaces' (`/kop/topic-policies/<tenant>/<ns>/<topic>`), so a
policy set on one broker applies on the others from their next decision, with no system topic to read. Policies
Pulsar has and this broker does not honour (offload, dispatch rates, ...) are not served (404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from kop.admin.namespaces import _body, _json, call
from kop.admin.views import PARTITION_SUFFIX, AdminError
from kop.topics import namespaces as ns_store
from kop.topics.names import TopicName

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

# REST path segment -> the policy field (the namespace level's names), for the GET / POST body / DELETE ones
BODY_POLICIES = {
    "maxProducers": ns_store.MAX_PRODUCERS,
    "maxConsumers": ns_store.MAX_CONSUMERS,
    "deduplicationEnabled": ns_store.DEDUPLICATION,
    "retention": ns_store.RETENTION,
}


class _Routes:
    def __init__(self, server: AdminServer) -> None:
        self.server = server
        self.store = server.service.topics.namespaces

    async def name(self, request: web.Request) -> TopicName:
        """The topic a URL names: 404 for an unknown namespace or topic, 412 for a partition, as Pulsar."""
        m = request.match_info
        tenant, ns, local = m["tenant"], m["namespace"], m["topic"]
        if not await self.store.exists(tenant, ns):
            raise AdminError(404, "Namespace not found")
        if PARTITION_SUFFIX.match(local):
            raise AdminError(412, "Not allowed to set/get topic policy for a partition")
        name = TopicName(tenant, ns, local)
        topics = self.server.service.topics
        if topics.get(name) is None and await topics.refresh(name) is None:  # refresh: created on another broker
            raise AdminError(404, f"Topic persistent://{tenant}/{ns}/{local} not found")
        return name

    def applied(self, name: TopicName, key: str) -> object:
        """The value that applies to the topic: its own, else its namespace's, else the broker's."""
        value = self.store.effective(name, key)
        if value is not None:
            return value
        cfg = self.server.service.config
        defaults: dict[str, object] = {
            ns_store.MESSAGE_TTL: 0, ns_store.MAX_PRODUCERS: 0, ns_store.MAX_CONSUMERS: 0,
            ns_store.DEDUPLICATION: cfg.brokerDeduplicationEnabled,
            ns_store.RETENTION: {"retentionTimeInMinutes": cfg.defaultRetentionTimeInMinutes,
                                 "retentionSizeInMB": cfg.defaultRetentionSizeInMB},
            ns_store.SCHEMA_COMPATIBILITY: cfg.schemaCompatibilityStrategy,
        }
        return defaults.get(key)

    def applied_quotas(self, name: TopicName) -> dict[str, object]:
        """GET backlogQuotaMap?applied=true as Pulsar 4.0.7 answers it: the topic's own map when it sets any type,
        else its namespace's, else the broker's default quota (backlogQuotaDefault*) under every type. Whole maps,
        not per type: what a producer or subscription is held to is resolved per type (Namespaces.backlog_quotas),
        but this answer is Pulsar's REST one, which a client compares against."""
        for quotas in (self.store.topic_policies(name).get(ns_store.BACKLOG_QUOTA),
                       self.store.policy(name.tenant, name.namespace, ns_store.BACKLOG_QUOTA)):
            if isinstance(quotas, dict) and quotas:
                return quotas
        cfg = self.server.service.config
        default = {"limit": cfg.backlogQuotaDefaultLimitBytes, "limitSize": cfg.backlogQuotaDefaultLimitBytes,
                   "limitTime": cfg.backlogQuotaDefaultLimitSecond, "policy": cfg.backlogQuotaDefaultRetentionPolicy}
        return {ns_store.DESTINATION_STORAGE: default, ns_store.MESSAGE_AGE: dict(default)}

    async def get(self, request: web.Request, key: str) -> web.Response:
        name = await self.name(request)
        own = (await self.store.fresh_topic(name)).get(key)  # re-read: another broker may have set it
        if request.query.get("applied", "").lower() == "true":
            return _json(self.applied(name, key))
        return _json(own)

    async def set(self, request: web.Request, key: str, value: object) -> web.Response:
        await call(self.store.set_topic_policy(await self.name(request), key, value))
        return web.Response(status=204)

    def add(self, r: web.UrlDispatcher, path: str, key: str, body_required: bool = True) -> None:
        """GET / POST (the value as the body) / DELETE of one policy."""
        segment = path.rsplit("/", 1)[-1]

        async def get(request: web.Request) -> web.Response:
            return await self.get(request, key)

        async def post(request: web.Request) -> web.Response:
            value = await _body(request)
            if value is None:
                raise AdminError(400, f"{segment}: the body must be the value to set")
            return await self.set(request, key, value)

        async def delete(request: web.Request) -> web.Response:
            return await self.set(request, key, None)

        r.add_get(path, get)
        r.add_post(path, post)
        r.add_delete(path, delete)


def add_routes(server: AdminServer, r: web.UrlDispatcher, topic_path: str) -> None:
    routes = _Routes(server)
    for segment, key in BODY_POLICIES.items():
        routes.add(r, f"{topic_path}/{segment}", key)

    async def set_ttl(request: web.Request) -> web.Response:
        text = request.query.get("messageTTL")
        try:
            value = None if text is None else int(text)
        except ValueError:
            raise AdminError(404, f"messageTTL must be an integer, got {text!r}") from None  # JAX-RS: 404
        return await routes.set(request, ns_store.MESSAGE_TTL, value)

    async def get_ttl(request: web.Request) -> web.Response:
        return await routes.get(request, ns_store.MESSAGE_TTL)

    async def delete_ttl(request: web.Request) -> web.Response:
        return await routes.set(request, ns_store.MESSAGE_TTL, None)

    r.add_get(topic_path + "/messageTTL", get_ttl)
    r.add_post(topic_path + "/messageTTL", set_ttl)
    r.add_delete(topic_path + "/messageTTL", delete_ttl)
    _quota_and_strategy_routes(routes, r, topic_path)


def _quota_and_strategy_routes(routes: _Routes, r: web.UrlDispatcher, topic_path: str) -> None:
    store = routes.store

    async def get_quotas(request: web.Request) -> web.Response:
        name = await routes.name(request)
        own = (await store.fresh_topic(name)).get(ns_store.BACKLOG_QUOTA, {})
        if request.query.get("applied", "").lower() == "true":
            return _json(routes.applied_quotas(name))
        return _json(own)

    async def set_quota(request: web.Request) -> web.Response:
        name = await routes.name(request)
        kind = request.query.get("backlogQuotaType", ns_store.DESTINATION_STORAGE)
        body = await _body(request) if request.method == "POST" else None
        if request.method == "POST" and body is None:
            raise AdminError(400, "backlogQuota: the body must be a BacklogQuota")
        await call(store.set_topic_backlog_quota(name, kind, body))
        return web.Response(status=204)

    async def get_strategy(request: web.Request) -> web.Response:
        return await routes.get(request, ns_store.SCHEMA_COMPATIBILITY)

    async def put_strategy(request: web.Request) -> web.Response:
        return await routes.set(request, ns_store.SCHEMA_COMPATIBILITY, await _body(request))

    async def delete_strategy(request: web.Request) -> web.Response:
        return await routes.set(request, ns_store.SCHEMA_COMPATIBILITY, None)

    r.add_get(topic_path + "/backlogQuotaMap", get_quotas)
    r.add_post(topic_path + "/backlogQuota", set_quota)
    r.add_delete(topic_path + "/backlogQuota", set_quota)
    r.add_get(topic_path + "/schemaCompatibilityStrategy", get_strategy)
    r.add_put(topic_path + "/schemaCompatibilityStrategy", put_strategy)
    r.add_delete(topic_path + "/schemaCompatibilityStrategy", delete_strategy)
