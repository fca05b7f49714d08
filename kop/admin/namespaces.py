"""Pulsar's admin REST for tenants, namespaces and the namespace policies this broker honours.

Routes (under /admin/v2), answered as Apache Pulsar answers them (status codes, {"reason"} texts, bodies):

* /tenants: GET (list); /tenants/{tenant}: PUT (create, TenantInfo body), POST (update), GET, DELETE (409 while it
  has namespaces);
* /namespaces/{tenant}: GET (list); /namespaces/{tenant}/{namespace}: PUT (create; an optional Policies body),
  GET (Pulsar's Policies JSON), DELETE (409 while it has topics);
* policies, GET / POST (set) / DELETE (remove), a GET of an unset one answering 200 with an empty body as Pulsar:
  maxProducersPerTopic, maxConsumersPerTopic (Pulsar producers/consumers refused past them, ProducerBusy /
  ConsumerBusy), deduplication (Pulsar producers' de-duplication, overriding brokerDeduplicationEnabled),
  autoTopicCreation (overrides allowAutoTopicCreation and defaultNumPartitions for Pulsar clients' auto-creation);
* retention (RetentionPolicies: retentionTimeInMinutes, retentionSizeInMB, -1 = no limit): the retention of the
  namespace's topics that set no retention.ms / retention.bytes of their own (kop/topics/chores.py), what both
  protocols' data is deleted by - Pulsar's durable subscriptions still hold back what they have not acknowledged;
* messageTTL (seconds): Pulsar subscriptions of the namespace's topics acknowledge what was published longer ago
  (kop/pulsar/message_ttl.py);
* backlogQuotaMap (GET), backlogQuota (POST a BacklogQuota / DELETE, `?backlogQuotaType=destination_storage`, the
  default, or `message_age`): the namespace's quota of that type replaces the broker's backlogQuotaDefault* limit
  and policy for Pulsar subscriptions of its topics (kop/pulsar/backlog_quota.py);
* schemaCompatibilityStrategy: GET ("UNDEFINED" when unset) and PUT (a strategy's name; one Pulsar does not know
  unsets it, as Pulsar's does): the strategy new schemas of the namespace's topics are checked with, on both
  protocols' schema paths (kop/schemas/versions.py: a Confluent subject's own level still comes first).

The store and the checks live in kop/topics/namespaces.py; this module only maps HTTP onto them. Policies Pulsar
has and this broker does not honour (offload, dispatch rates, ...) are
not served: their paths answer 404 rather than accept a setting that would change nothing.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web

from kop.admin.views import AdminError
from kop.cluster.bundles import FULL
from kop.topics import namespaces as ns_store
from kop.topics.namespaces import NamespaceError

if TYPE_CHECKING:
    from kop.admin.server import AdminServer

T = TypeVar("T")

# REST path segment -> the Policies field it sets
POLICY_PATHS = {
    "maxProducersPerTopic": ns_store.MAX_PRODUCERS,
    "maxConsumersPerTopic": ns_store.MAX_CONSUMERS,
    "deduplication": ns_store.DEDUPLICATION,
    "autoTopicCreation": ns_store.AUTO_TOPIC_CREATION,
    "retention": ns_store.RETENTION,
    "messageTTL": ns_store.MESSAGE_TTL,
}


def _json(data: object, status: int = 200) -> web.Response:
    if data is None:  # Pulsar answers an unset policy with 200 and no body
        return web.Response(status=status)
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


async def _body(request: web.Request) -> object:
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise AdminError(400, f"Unrecognized JSON body: {e}") from None


def add_routes(server: AdminServer, r: web.UrlDispatcher, v2: str) -> None:
    store = server.service.topics.namespaces
    cluster = server.service.config.clusterName

    def plain(fn: Callable[[str], T], arg: str) -> T:
        try:
            return fn(arg)
        except NamespaceError as e:
            raise AdminError(e.status, e.reason) from None

    async def list_tenants(request: web.Request) -> web.Response:
        return _json(store.tenants())

    async def get_tenant(request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        await store.refresh(tenant)
        return _json(plain(store.tenant, tenant))

    async def put_tenant(request: web.Request) -> web.Response:
        await call(store.create_tenant(request.match_info["tenant"], await _body(request)))
        return web.Response(status=204)

    async def post_tenant(request: web.Request) -> web.Response:
        await call(store.update_tenant(request.match_info["tenant"], await _body(request)))
        return web.Response(status=204)

    async def delete_tenant(request: web.Request) -> web.Response:
        await call(store.delete_tenant(request.match_info["tenant"]))
        return web.Response(status=204)

    async def list_namespaces(request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        await store.refresh(tenant)
        return _json(plain(store.namespaces, tenant))

    async def put_namespace(request: web.Request) -> web.Response:
        m = request.match_info
        await call(store.create_namespace(m["tenant"], m["namespace"], await _body(request)))
        return web.Response(status=204)

    async def get_namespace(request: web.Request) -> web.Response:
        m = request.match_info
        policies = ns_store.view(await call(store.need(m["tenant"], m["namespace"])), cluster)
        return _json({**_pulsar_defaults(server.service.config.defaultNumberOfNamespaceBundles), **policies})

    async def delete_namespace(request: web.Request) -> web.Response:
        m = request.match_info
        np = server.service.pulsar_non_persistent  # its non-persistent topics count too, as in Pulsar
        if np is not None and (np.served(m["tenant"], m["namespace"])
                               or await np.partitioned_names(m["tenant"], m["namespace"])):
            raise AdminError(409, "Cannot delete non empty namespace")
        await call(store.delete_namespace(m["tenant"], m["namespace"]))
        return web.Response(status=204)

    r.add_get(v2 + "/tenants", list_tenants)
    r.add_get(v2 + "/tenants/{tenant}", get_tenant)
    r.add_put(v2 + "/tenants/{tenant}", put_tenant)
    r.add_post(v2 + "/tenants/{tenant}", post_tenant)
    r.add_delete(v2 + "/tenants/{tenant}", delete_tenant)
    r.add_get(v2 + "/namespaces/{tenant}", list_namespaces)
    ns_path = v2 + "/namespaces/{tenant}/{namespace}"
    r.add_get(ns_path, get_namespace)
    r.add_put(ns_path, put_namespace)
    r.add_delete(ns_path, delete_namespace)
    for segment, key in POLICY_PATHS.items():
        _policy_routes(r, store, ns_path + "/" + segment, key)

    _quota_and_strategy_routes(r, store, ns_path)


def _quota_and_strategy_routes(r: web.UrlDispatcher, store: ns_store.Namespaces, ns_path: str) -> None:
    """The two policies whose paths are not GET/POST/DELETE of one value: backlogQuota and schemaCompatibilityStrategy."""

    async def get_strategy(request: web.Request) -> web.Response:
        m = request.match_info
        policies = await call(store.need(m["tenant"], m["namespace"]))
        return _json(policies.get(ns_store.SCHEMA_COMPATIBILITY, "UNDEFINED"))

    async def put_strategy(request: web.Request) -> web.Response:  # PUT only, as Pulsar (POST: 405)
        m = request.match_info
        await call(store.set_policy(m["tenant"], m["namespace"], ns_store.SCHEMA_COMPATIBILITY, await _body(request)))
        return web.Response(status=204)

    async def get_quotas(request: web.Request) -> web.Response:
        m = request.match_info
        return _json((await call(store.need(m["tenant"], m["namespace"]))).get(ns_store.BACKLOG_QUOTA, {}))

    async def set_quota(request: web.Request) -> web.Response:
        m = request.match_info
        kind = request.query.get("backlogQuotaType", ns_store.DESTINATION_STORAGE)
        body = await _body(request) if request.method == "POST" else None
        if request.method == "POST" and body is None:
            raise AdminError(400, "backlogQuota: the body must be a BacklogQuota")
        await call(store.set_backlog_quota(m["tenant"], m["namespace"], kind, body))
        return web.Response(status=204)

    r.add_get(ns_path + "/backlogQuotaMap", get_quotas)
    r.add_post(ns_path + "/backlogQuota", set_quota)
    r.add_delete(ns_path + "/backlogQuota", set_quota)
    r.add_get(ns_path + "/schemaCompatibilityStrategy", get_strategy)
    r.add_put(ns_path + "/schemaCompatibilityStrategy", put_strategy)


def _pulsar_defaults(bundles: int) -> dict[str, object]:
    """The Policies fields Apache Pulsar fills in when it creates a namespace, as this broker has them: the
    namespace's bundles (kop/cluster/bundles.py splits every namespace into defaultNumberOfNamespaceBundles equal
    hash ranges, as Pulsar's initial split), and schema auto-update allowed (Pulsar's isAllowAutoUpdateSchemaEnabled
    default, which this broker follows: a producer's new compatible schema is registered)."""
    step = FULL // bundles
    boundaries = [f"0x{i * step:08x}" for i in range(bundles)] + ["0xffffffff"]
    return {"bundles": {"boundaries": boundaries, "numBundles": bundles}, "is_allow_auto_update_schema": True}


async def call(step: Awaitable[T]) -> T:
    """A store call, its NamespaceError as the AdminError (status and reason) the REST answers."""
    try:
        return await step
    except NamespaceError as e:
        raise AdminError(e.status, e.reason) from None


def _policy_routes(r: web.UrlDispatcher, store: ns_store.Namespaces, path: str, key: str) -> None:
    """GET / POST / DELETE of one namespace policy."""

    async def get(request: web.Request) -> web.Response:
        m = request.match_info
        policies = await call(store.need(m["tenant"], m["namespace"]))
        return _json(policies.get(key))

    async def post(request: web.Request) -> web.Response:
        m = request.match_info
        value = await _body(request)
        if value is None:
            raise AdminError(400, f"{path.rsplit('/', 1)[-1]}: the body must be the value to set")
        await call(store.set_policy(m["tenant"], m["namespace"], key, value))
        return web.Response(status=204)

    async def delete(request: web.Request) -> web.Response:
        m = request.match_info
        await call(store.set_policy(m["tenant"], m["namespace"], key, None))
        return web.Response(status=204)

    r.add_get(path, get)
    r.add_post(path, post)
    r.add_delete(path, delete)
