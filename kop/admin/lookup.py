"""Pulsar's HTTP lookup, `GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}`: who serves a topic.

Why here: a Pulsar client given an `http://` service URL (the admin port) finds brokers over HTTP instead of the
binary LOOKUP - the C++-based clients (Python's `pulsar-client`) ask this endpoint for each partition, the
partitioned metadata at `/admin/v2/persistent/.../partitions?checkAllowAutoCreation=true` (served by
kop/admin/server.py, which calls `auto_create` here first) and schemas at `/admin/v2/schemas/...`
(kop/admin/schemas.py), a regex consumer's topic list at `/admin/v2/namespaces/{tenant}/{namespace}/topics`
(here), then connect to the pulsar:// address this answers. It gives the same answer as
the binary LOOKUP (kop/pulsar/lookup.py), in Pulsar's LookupData shape (TopicLookupBase in Pulsar 5.0):
`{"brokerId", "brokerUrl", "brokerUrlTls", "httpUrl", "httpUrlTls", "nativeUrl", "brokerUrlSsl"}`, the owning
broker's id (host:port of its web address) and its pulsar:// and http(s):// addresses (an address it lacks left
out; `brokerUrlSsl`, deprecated, is `brokerUrlTls` or "", as Pulsar writes it).

The same rules as the binary LOOKUP, so the transport does not change what a client may do:
- `{topic}` is a topic or one of its partitions (`t-partition-N`); a base name stands for partition 0, as the
  binary lookup has it. A missing base name that the role may auto-create (`allowAutoTopicCreation`, CREATE on
  the cluster or the topic) is answered without creating anything when `allowAutoTopicCreationType` is
  `non-partitioned` (the client's producer or consumer creates it; the partitioned metadata answers 0), and
  created with `defaultNumPartitions` when it is `partitioned` (or the name is a partition's); else 404. The namespace's autoTopicCreation policy overrides the broker's keys; in a
  namespace that does not exist, 404 "Namespace not found".
- With `authorizationEnabled`, the role (the bearer token's, kop/admin/auth.py; this path is delegated, so any
  authenticated role may ask, not only super users) needs DESCRIBE on the topic: 403 with Pulsar's "Client is
  not authorized to Lookup" otherwise, checked before the topic is looked for.
- In cluster mode a partition another broker owns is answered as Pulsar does: 307 Temporary Redirect to the
  owner's web URL with the same path and query (the client repeats the GET there); an owner without admin HTTP
  is answered with its own addresses from its registration; still no owner after owner_of's wait -> 503 (the
  binary LOOKUP's ServiceNotReady; the C++ client does not retry an HTTP error, it fails the operation).
- Named listeners: the `listenerName` query (or the `X-Pulsar-ListenerName` header) picks the pulsar addresses
  of that listener (kop/cluster/listeners.py); a name the broker lacks is Pulsar's 500 "The broker '<id>' does
  not have '<name>' listener configured."
`non-persistent` topics are looked up as the persistent topic of the same name (its owner serves them,
kop/pulsar/nonpersistent_commands.py); only their namespace must exist (their producer or consumer creates them).
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from kop.admin import views
from kop.admin.views import AdminError
from kop.cluster import listeners as named_listeners
from kop.security.acl.model import CLUSTER_NAME, AclOperation, ResourceType, java_host_address
from kop.security.principal import KafkaPrincipal
from kop.topics.manager import Topic, TopicError
from kop.topics.names import InvalidTopicName, TopicName, check_local_name
from kop.topics.namespaces import AutoCreate

if TYPE_CHECKING:
    from kop.admin.server import AdminServer
    from kop.cluster.ownership import BrokerInfo

log = logging.getLogger("kop.admin")

PREFIXES = ("/lookup/",)  # kop/admin/auth.py: any authenticated role; authorized here, as the binary LOOKUP is
PATH = "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}"
NAMESPACE_NOT_FOUND = "Namespace not found"  # Pulsar's answer for a topic in a namespace that does not exist
NAMESPACE_TOPICS = "/admin/v2/namespaces/{tenant}/{namespace}/topics"
LOOKUP_REFUSED = "Client is not authorized to Lookup"  # Pulsar's message (ServerCnx, TopicLookupBase)
_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,8})$")


def add_routes(server: AdminServer, r: web.UrlDispatcher, role_key: str) -> None:
    async def lookup(request: web.Request) -> web.Response:
        return await _lookup(server, request, role_key)

    async def namespace_topics(request: web.Request) -> web.Response:
        return web.json_response(_namespace_topics(server, request))

    r.add_get(PATH, lookup)
    r.add_get(NAMESPACE_TOPICS, namespace_topics)


def _namespace_topics(server: AdminServer, request: web.Request) -> list[str]:
    """Pulsar's `GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=...` (what an HTTP lookup client's regex
    consumer lists): every partition of every topic, as GET_TOPICS_OF_NAMESPACE lists them; for mode NON_PERSISTENT
    the non-persistent topics served now, for ALL both; 404 for a namespace that does not exist."""
    m = request.match_info
    tenant, namespace = m["tenant"], m["namespace"]
    views.topic_list(server.service, tenant, namespace)  # 404 for an unknown namespace
    mode = request.query.get("mode", "PERSISTENT").upper()
    np = server.service.pulsar_non_persistent
    names = np.served(tenant, namespace) if np is not None and mode in ("NON_PERSISTENT", "ALL") else []
    if mode == "NON_PERSISTENT":
        return names
    for topic in server.service.topics.all():
        if topic.internal or topic.deleted or (topic.name.tenant, topic.name.namespace) != (tenant, namespace):
            continue
        names.extend(topic.pulsar_names())
    return sorted(names)


async def auto_create(server: AdminServer, request: web.Request, role_key: str) -> bool:
    """`GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions?checkAllowAutoCreation=true`, an HTTP
    lookup client's first call for a topic: as the binary PARTITIONED_METADATA (same switch, kind and CREATE rule),
    create a missing topic first when allowAutoTopicCreationType=partitioned; the route then answers the partition
    count. True: the topic is missing and the client's producer or consumer will create it non-partitioned (the
    route answers 0 partitions). A partition's name creates nothing (it answers 0 or 404, as before)."""
    m = request.match_info
    if _PARTITION.match(m["topic"]):
        return False
    try:
        check_local_name(m["topic"])
        name = TopicName(m["tenant"], m["namespace"], m["topic"])
    except InvalidTopicName:
        return False  # the route answers 404 for the name
    if not _allowed(server, request, role_key, AclOperation.DESCRIBE, ResourceType.TOPIC,
                    server.service.topics.kafka_name(name)):
        raise AdminError(403, "Client is not authorized to Get Partition Metadata")
    if not await server.service.topics.namespaces.exists(name.tenant, name.namespace):
        raise AdminError(404, NAMESPACE_NOT_FOUND)  # Pulsar's rule (kop/topics/namespaces.py)
    if not _rule(server, name).partitioned:
        return server.service.topics.get(name) is None and _may_create(server, request, role_key, name)
    try:
        await _find_or_create(server, request, role_key, name, f"persistent://{name.tenant}/{name.namespace}/"
                                                               f"{name.local}")
    except AdminError as e:
        if e.status != 404 or e.reason == NAMESPACE_NOT_FOUND:
            raise
    return False


def _allowed(server: AdminServer, request: web.Request, role_key: str, op: AclOperation,
             rtype: ResourceType, name: str) -> bool:
    authorizer = server.service.authorizer
    role = request.get(role_key)  # absent: authentication off, or a super user (auth.py does not set it then)
    if authorizer is None or role is None:
        return True
    return authorizer.authorize(KafkaPrincipal("User", role), java_host_address(request.remote or ""), op, rtype,
                                name)


def _rule(server: AdminServer, name: TopicName) -> AutoCreate:
    """The binary lookup's auto-creation rule (kop/topics/namespaces.py): the broker's keys under the policy."""
    cfg = server.service.config
    return server.service.topics.namespaces.auto_create_rule(
        name, cfg.allowAutoTopicCreation, cfg.allowAutoTopicCreationType, cfg.defaultNumPartitions)


def _may_create(server: AdminServer, request: web.Request, role_key: str, name: TopicName) -> bool:
    """Whether a missing topic of this name is auto-created for this role (the switch, CREATE on cluster or topic)."""
    kafka_name = server.service.topics.kafka_name(name)
    return _rule(server, name).allowed and (
        _allowed(server, request, role_key, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME)
        or _allowed(server, request, role_key, AclOperation.CREATE, ResourceType.TOPIC, kafka_name))


async def _find_or_create(server: AdminServer, request: web.Request, role_key: str, name: TopicName,
                          shown: str) -> Topic:
    """The topic, auto-created as the binary lookup's find_topic does (same config switch, same CREATE rule)."""
    service = server.service
    topics = service.topics
    topic = topics.get(name)
    if topic is not None:
        return topic
    if not await topics.namespaces.exists(name.tenant, name.namespace):
        raise AdminError(404, NAMESPACE_NOT_FOUND)  # Pulsar's rule (kop/topics/namespaces.py)
    if not _may_create(server, request, role_key, name):
        raise AdminError(404, f"Topic {shown} does not exist")
    rule = _rule(server, name)
    try:
        return await topics.create(name, rule.partitions)
    except TopicError as e:
        found = topics.get(name) if e.error == "TOPIC_ALREADY_EXISTS" else None
        if found is None:
            raise AdminError(500, f"{shown}: {e}") from None
        return found


def lookup_data(info: BrokerInfo, http_url: str | None, https_url: str | None,
                listener: str | None = None) -> dict[str, Any]:
    """Pulsar's LookupData for a broker's registered addresses, under the client's listener name (500 with
    Pulsar's message for a name the broker does not have). `brokerId` first, as Pulsar 5.0 answers: the broker's
    id (its web address's host:port, kop/cluster/listeners.py's broker_id)."""
    broker = named_listeners.broker_id(http_url or https_url or info.web_url, info.key)
    try:
        plain, tls = named_listeners.select(info.listeners, listener)
    except named_listeners.UnknownListener as e:
        raise AdminError(500, e.refusal(broker)) from None
    data = {"brokerId": broker, "brokerUrl": plain, "brokerUrlTls": tls, "httpUrl": http_url,
            "httpUrlTls": https_url, "nativeUrl": plain}
    # Pulsar leaves out what a broker does not have (Jackson NON_NULL) and adds the deprecated brokerUrlSsl,
    # "" without TLS
    return {**{k: v for k, v in data.items() if v is not None}, "brokerUrlSsl": tls or ""}


async def _lookup(server: AdminServer, request: web.Request, role_key: str) -> web.Response:
    m = request.match_info
    domain, tenant, namespace, local = m["domain"], m["tenant"], m["namespace"], m["topic"]
    shown = f"{domain}://{tenant}/{namespace}/{local}"
    if domain not in ("persistent", "non-persistent"):
        raise AdminError(404, f"Unknown topic domain {domain!r}")
    pm = _PARTITION.match(local)
    base, partition = (pm["base"], int(pm["index"])) if pm else (local, 0)
    try:
        check_local_name(base)
        name = TopicName(tenant, namespace, base)
    except InvalidTopicName as e:
        raise AdminError(412, str(e)) from None
    service = server.service
    if not _allowed(server, request, role_key, AclOperation.DESCRIBE, ResourceType.TOPIC,
                    service.topics.kafka_name(name)):
        log.warning("admin lookup of %s refused to role %s", shown, request.get(role_key))
        raise AdminError(403, LOOKUP_REFUSED)
    if domain == "persistent":
        await _check_target(server, request, role_key, name, shown, None if pm is None else partition)
    elif not await service.topics.namespaces.exists(tenant, namespace):  # its producer or consumer creates it
        raise AdminError(404, NAMESPACE_NOT_FOUND)
    ownership = service.ownership
    if not service.topics.owns_name(name, partition):  # cluster mode: the bundle may have no owner yet, or another
        await ownership.owner_of(name, partition)  # triggers an acquisition when the bundle has none
    if service.topics.owns_name(name, partition):
        return _answer(lookup_data(ownership.local, server.url if server.port >= 0 else None, server.tls_url,
                                   _listener(request)))
    owner = await ownership.owner_of(name, partition)
    info = ownership.owner_cached(name, partition)
    if owner is None or info is None or info.broker_id == ownership.local.broker_id:
        raise AdminError(503, f"{shown} has no owner serving Pulsar clients now; retry")
    if owner.web_url:
        location = owner.web_url.rstrip("/") + str(request.rel_url)
        log.debug("admin lookup %s: owned by broker %d, redirecting to %s", shown, owner.broker_id, location)
        raise web.HTTPTemporaryRedirect(location)
    data = lookup_data(info, None, None, _listener(request))
    if "brokerUrl" not in data and "brokerUrlTls" not in data:
        raise AdminError(503, f"{shown}: its owner, broker {info.broker_id}, serves no Pulsar clients")
    return _answer(data)


def _listener(request: web.Request) -> str | None:
    """The client's listener name: the `listenerName` query, else the `X-Pulsar-ListenerName` header."""
    return request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName") or None


async def _check_target(server: AdminServer, request: web.Request, role_key: str, name: TopicName, shown: str,
                        partition: int | None) -> None:
    """404 unless the lookup names an existing topic's partition (`partition` None: the base name) or a missing
    base name that the client's producer or consumer will auto-create non-partitioned - Pulsar's lookup creates
    nothing then; with allowAutoTopicCreationType=partitioned (or a partition's name) it creates the topic first,
    as the binary lookup does (kop/pulsar/lookup.py)."""
    service = server.service
    if partition is None and not _rule(server, name).partitioned and service.topics.get(name) is None:
        if not await service.topics.namespaces.exists(name.tenant, name.namespace):
            raise AdminError(404, NAMESPACE_NOT_FOUND)  # Pulsar's rule (kop/topics/namespaces.py)
        if _may_create(server, request, role_key, name):
            return
    topic = await _find_or_create(server, request, role_key, name, shown)
    if partition is not None and not topic.partitioned:
        raise AdminError(404, f"Topic {shown} does not exist: {topic.name.canonical} is a non-partitioned topic")
    if (partition or 0) >= topic.partitions:
        raise AdminError(404, f"Topic {shown}: partition {partition} does not exist (of {topic.partitions})")


def _answer(data: dict[str, Any]) -> web.Response:
    return web.json_response(data)
