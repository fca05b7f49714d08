"""Tenants and namespaces: Pulsar's two levels above a topic, stored beside the topics' records.

Why a store of their own: Pulsar refuses a topic in a namespace that does not exist and keeps per-namespace
policies (max producers, deduplication, ...); before this module a namespace was only "whatever some topic
names", so a client could create topics anywhere and nothing could be set on a namespace.

Layout in the metadata store (the topics' one: sqlite when embedded, ZooKeeper in cluster mode):
`/kop/tenants/<tenant>` holds the TenantInfo JSON (adminRoles, allowedClusters) and its children
`/kop/tenants/<tenant>/<namespace>` the namespace's policies - only those set, under the field names of Pulsar's
Policies JSON (max_producers_per_topic, ...), so what GET answers is what was stored. Creates are
compare-and-set (two brokers cannot both create one); deletes check emptiness first, as Pulsar does (409).

Start-up (`load`): `public/default` and `pulsar/system` (the two Apache Pulsar's standalone creates at its first start,
so that `PUT /tenants/pulsar` is a 409 here too), the Kafka namespace (kafkaTenant/kafkaNamespace) and the metadata
namespace (kafkaMetadataTenant/kafkaMetadataNamespace) are created when missing, and so is every namespace an existing topic
names - a data dir written before namespaces were stored keeps working. Kafka clients may name topics in any
namespace (`tenant/ns/topic`) and have never needed one to exist: `ensure` creates it for them (TopicManager.create),
so that no topic ever sits in a namespace that does not exist; the Pulsar side (lookup, PRODUCER, SUBSCRIBE, the
admin REST) refuses instead, as Pulsar does.

Cluster mode: the cache is filled at start-up and on every miss (`exists` re-reads the store), so a namespace
created on another broker is found; its policies are re-read where one decides something (`fresh`: PRODUCER,
SUBSCRIBE, the TTL and backlog-quota passes) and on every admin read, so a policy set on any broker applies on all.

Topic-level policies (the same fields, set on one topic through kop/admin/topic_policies.py) live in
`/kop/topic-policies/<tenant>/<ns>/<topic>`, a tree of their own (a namespace's node keeps no children, so its
delete stays one node's), are loaded at start-up, re-read with their namespace's by `fresh`, and deleted with their
topic (TopicManager's deletion listener). `effective` is the one rule: the topic's value, else the namespace's;
`limit`, `retention`, `backlog_quotas` and `schema_strategy` go through it, so every decision honours both levels.

Errors are NamespaceError with the HTTP status and reason Pulsar's admin answers, so the REST layer only maps them.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from typing import NamedTuple

from kop.config import SCHEMA_COMPATIBILITY_STRATEGIES, BrokerConfig
from kop.storage.api import MetadataStore, NodeExistsError, NoSuchNodeError, StorageError
from kop.topics.names import TopicName

log = logging.getLogger(__name__)

ROOT = "/kop/tenants"
# Pulsar's NamespaceName.SYSTEM_NAMESPACE, which Pulsar's standalone creates with the `pulsar` tenant at start-up
SYSTEM_NAMESPACE = ("pulsar", "system")
TOPIC_ROOT = "/kop/topic-policies"  # /kop/topic-policies/<tenant>/<ns>/<topic>: a topic's policies (JSON)
Policies = dict[str, object]  # a namespace's policies, or a TenantInfo, as stored (JSON)
# Pulsar's NamedEntity rule for tenant and namespace names
_NAME = re.compile(r"^[-=:.\w]+$")

MAX_PRODUCERS = "max_producers_per_topic"
MAX_CONSUMERS = "max_consumers_per_topic"
DEDUPLICATION = "deduplicationEnabled"
AUTO_TOPIC_CREATION = "autoTopicCreationOverride"
MESSAGE_TTL = "message_ttl_in_seconds"
RETENTION = "retention_policies"
SCHEMA_COMPATIBILITY = "schema_compatibility_strategy"
BACKLOG_QUOTA = "backlog_quota_map"

TOPIC_TYPES = ("partitioned", "non-partitioned")
DESTINATION_STORAGE, MESSAGE_AGE = "destination_storage", "message_age"  # Pulsar's BacklogQuotaType
BACKLOG_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


class AutoCreate(NamedTuple):
    """Whether a missing topic is auto-created, of which kind, with how many partitions (a non-partitioned
    topic has one whatever `partitions` says)."""

    allowed: bool
    partitioned: bool
    partitions: int


class NamespaceError(Exception):
    """A refusal: the HTTP status and {"reason"} text Pulsar's admin answers for it."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise NamespaceError(412, f"{what} name is not valid")


def tenant_info(body: object, clusters: Iterable[str]) -> Policies:
    """A TenantInfo body checked as Pulsar checks it (412 for what it refuses); the stored form."""
    if not isinstance(body, dict):
        raise NamespaceError(412, "TenantInfo is null")
    allowed = body.get("allowedClusters") or []
    roles = body.get("adminRoles") or []
    if not isinstance(allowed, list) or not isinstance(roles, list):
        raise NamespaceError(400, "adminRoles and allowedClusters must be lists")
    if not allowed or any(not isinstance(c, str) or not c.strip() for c in allowed):
        raise NamespaceError(412, "Clusters cannot be empty or blank")
    if any(c not in set(clusters) for c in allowed):
        raise NamespaceError(412, "Clusters do not exist")
    return {"adminRoles": [str(r) for r in roles], "allowedClusters": [str(c) for c in allowed]}


def _int_at_least(value: object, low: int, error: str, status: int = 412) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NamespaceError(400, f"expected an integer, got {value!r}")  # Jackson's refusal of the body
    if value < low:
        raise NamespaceError(status, error)
    return value


def _retention(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        raise NamespaceError(400, "expected a RetentionPolicies object")
    minutes = value.get("retentionTimeInMinutes", 0)
    mb = value.get("retentionSizeInMB", 0)
    for v, what in ((minutes, "time"), (mb, "size")):
        _int_at_least(v, -1, f"Invalid retention policy: {what} limit must be >= -1", 400)
    if (minutes == 0) != (mb == 0):
        raise NamespaceError(400, "Invalid retention policy: Setting a single time or size limit to 0 is invalid "
                                  "when one of the limits has a non-zero value. Use the value of -1 instead of 0 "
                                  "to ignore a specific limit. To disable retention both limits must be set to 0.")
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": mb}


def _auto_topic_creation(value: object) -> Policies:
    bad = "Invalid configuration for autoTopicCreationOverride. the detail is "
    if not isinstance(value, dict) or not isinstance(value.get("allowAutoTopicCreation"), bool):
        raise NamespaceError(412, bad + "[allowAutoTopicCreation] cannot be null")
    out: Policies = {"allowAutoTopicCreation": value["allowAutoTopicCreation"]}
    kind = value.get("topicType")
    if not out["allowAutoTopicCreation"]:
        return out
    if kind not in TOPIC_TYPES:
        raise NamespaceError(412, bad + f"Unknown topic type [{kind}]")
    out["topicType"] = kind
    partitions = value.get("defaultNumPartitions")
    if kind == "partitioned":
        if partitions is None:
            raise NamespaceError(412, bad + "[defaultNumPartitions] cannot be null when the type is partitioned.")
        _int_at_least(partitions, 1, bad + "[defaultNumPartitions] cannot be less than 1 for partition type.")
        out["defaultNumPartitions"] = partitions
    return out


def schema_strategy(value: object) -> str | None:
    """Pulsar's SchemaCompatibilityStrategy: a name it does not know (and UNDEFINED) unsets the policy, as on Pulsar."""
    return value if value in SCHEMA_COMPATIBILITY_STRATEGIES else None


def backlog_quota(value: object, where: str) -> Policies:
    """A BacklogQuota body (limitSize bytes, limitTime seconds, policy; absent numbers are 0, as Jackson reads
    them), stored as Pulsar shows it (with `limit`, the deprecated name of limitSize)."""
    if not isinstance(value, dict):
        raise NamespaceError(400, "expected a BacklogQuota object")
    size, seconds = value.get("limitSize", value.get("limit", 0)), value.get("limitTime", 0)
    size, seconds = _int_at_least(size, -(1 << 63), ""), _int_at_least(seconds, -(1 << 31), "")
    policy = value.get("policy")
    if policy not in BACKLOG_POLICIES:
        raise NamespaceError(400, f"Set namespace[{where}] backlog quota failed because the data validation failed. "
                                  "the attribute policy cannot be null")
    return {"limit": size, "limitSize": size, "limitTime": seconds, "policy": policy}


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise NamespaceError(400, f"Cannot deserialize value of type `boolean` from {value!r}")
    return value


# policy field -> its check (raises NamespaceError, returns the value to store)
VALIDATORS: dict[str, Callable[[object], object]] = {
    MAX_PRODUCERS: lambda v: _int_at_least(v, 0, "maxProducersPerTopic must be 0 or more"),
    MAX_CONSUMERS: lambda v: _int_at_least(v, 0, "maxConsumersPerTopic must be 0 or more"),
    MESSAGE_TTL: lambda v: _int_at_least(v, 0, "Invalid value for message TTL, message TTL must >= 0"),
    DEDUPLICATION: _boolean,
    RETENTION: _retention,
    SCHEMA_COMPATIBILITY: schema_strategy,
    AUTO_TOPIC_CREATION: _auto_topic_creation,
}


# The topic level's checks: the namespace level's, with the topic REST's own words where Pulsar's differ
TOPIC_VALIDATORS: dict[str, Callable[[object], object]] = {
    **VALIDATORS,
    MAX_PRODUCERS: lambda v: _int_at_least(v, 0, "maxProducers must be 0 or more"),
    MAX_CONSUMERS: lambda v: _int_at_least(v, 0, "maxConsumers must be 0 or more"),
    MESSAGE_TTL: lambda v: _int_at_least(v, 0, "Invalid value for message TTL"),
}


def check_policies(body: object) -> Policies:
    """A Policies body (PUT of a namespace): the fields this broker serves, each checked; others are ignored."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise NamespaceError(400, "expected a Policies object")
    checked = {k: VALIDATORS[k](v) for k, v in body.items() if k in VALIDATORS and v is not None}
    return {k: v for k, v in checked.items() if v is not None}


def view(policies: Policies, cluster: str) -> Policies:
    """GET of a namespace: Pulsar's Policies JSON, with its defaults for what is not set."""
    out: Policies = {
        "auth_policies": {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}},
        "replication_clusters": [cluster],
        "backlog_quota_map": {},
        "deleted": False,
        "schema_compatibility_strategy": "UNDEFINED",
        "properties": {},
    }
    out.update(policies)
    return out


class Namespaces:
    """The tenants and namespaces (see the module docstring), cached in memory over the metadata store."""

    def __init__(self, config: BrokerConfig, store: MetadataStore) -> None:
        self.config = config
        self.store = store
        self._tenants: dict[str, Policies] = {}
        self._namespaces: dict[tuple[str, str], Policies] = {}  # (tenant, ns) -> policies set
        self._topics: dict[TopicName, Policies] = {}  # topic-level policies, only topics with some set
        # Whether a namespace still has topics (set by TopicManager): deleting a non-empty one answers 409.
        self.has_topics: Callable[[str, str], bool] = lambda tenant, ns: False
        # Whether other brokers share the store (cluster mode, set by TopicManager): `fresh` then re-reads.
        self.clustered: Callable[[], bool] = lambda: False

    @staticmethod
    def _path(tenant: str, namespace: str | None = None) -> str:
        return f"{ROOT}/{tenant}" if namespace is None else f"{ROOT}/{tenant}/{namespace}"

    def builtin(self) -> list[tuple[str, str]]:
        """The namespaces that exist from the start."""
        cfg = self.config
        return [("public", "default"), SYSTEM_NAMESPACE, (cfg.kafkaTenant, cfg.kafkaNamespace),
                (cfg.kafkaMetadataTenant, cfg.kafkaMetadataNamespace)]

    async def load(self, in_use: Iterable[tuple[str, str]]) -> None:
        """Read every tenant and namespace, then create the built-in ones and those `in_use` (by stored topics)."""
        for tenant in await self.store.children(ROOT):
            await self._read_tenant(tenant)
        for tenant, ns in [*self.builtin(), *in_use]:
            await self.ensure(tenant, ns)
        for tenant in await self.store.children(TOPIC_ROOT):
            for ns in await self.store.children(f"{TOPIC_ROOT}/{tenant}"):
                for local in await self.store.children(f"{TOPIC_ROOT}/{tenant}/{ns}"):
                    await self._read_topic(TopicName(tenant, ns, local))
        log.info("loaded %d tenants, %d namespaces, %d topics' policies", len(self._tenants), len(self._namespaces),
                 len(self._topics))

    async def _read_tenant(self, tenant: str) -> bool:
        got = await self.store.get(self._path(tenant))
        if got is None:
            self._tenants.pop(tenant, None)
            return False
        self._tenants[tenant] = json.loads(got[0] or b"{}")
        for ns in await self.store.children(self._path(tenant)):
            await self._read_namespace(tenant, ns)
        return True

    async def _read_namespace(self, tenant: str, ns: str) -> bool:
        got = await self.store.get(self._path(tenant, ns))
        if got is None:
            self._namespaces.pop((tenant, ns), None)
            return False
        self._namespaces[(tenant, ns)] = json.loads(got[0] or b"{}")
        return True

    async def ensure(self, tenant: str, ns: str) -> None:
        """Create the namespace (and its tenant, allowed on this cluster) unless it exists; never fails on a race."""
        if (tenant, ns) in self._namespaces:
            return
        if tenant not in self._tenants:
            info = {"adminRoles": [], "allowedClusters": [self.config.clusterName]}
            try:
                await self.store.put(self._path(tenant), json.dumps(info).encode(), expected_version=-1)
                log.info("created tenant %s", tenant)
            except NodeExistsError:
                pass
            await self._read_tenant(tenant)
        try:
            await self.store.put(self._path(tenant, ns), b"{}", expected_version=-1)
            log.info("created namespace %s/%s", tenant, ns)
        except NodeExistsError:
            pass
        await self._read_namespace(tenant, ns)

    # ------------------------------------------------------------------ queries
    def tenants(self) -> list[str]:
        return sorted(self._tenants)

    def tenant(self, tenant: str) -> Policies:
        info = self._tenants.get(tenant)
        if info is None:
            raise NamespaceError(404, "Tenant does not exist")
        return info

    def namespaces(self, tenant: str) -> list[str]:
        if tenant not in self._tenants:
            raise NamespaceError(404, "Tenant not found")
        return sorted(f"{t}/{ns}" for t, ns in self._namespaces if t == tenant)

    def known(self, tenant: str, ns: str) -> bool:
        """From memory: whether the namespace exists (hot paths; `exists` also asks the store on a miss)."""
        return (tenant, ns) in self._namespaces

    async def exists(self, tenant: str, ns: str) -> bool:
        if (tenant, ns) in self._namespaces:
            return True
        return await self._read_namespace(tenant, ns)  # created on another broker (cluster mode)

    def all(self) -> list[tuple[str, str]]:
        return sorted(self._namespaces)

    def policies(self, tenant: str, ns: str) -> Policies:
        """The policies set on a namespace ({} for one that does not exist: nothing applies)."""
        return self._namespaces.get((tenant, ns), {})

    def policy(self, tenant: str, ns: str, key: str) -> object:
        return self._namespaces.get((tenant, ns), {}).get(key)

    def effective(self, name: TopicName, key: str) -> object:
        """A policy as it applies to a topic: the topic's own (topic-level policies), else its namespace's; None
        when neither sets it (the broker's key applies). The one rule every policy is honoured through."""
        own = self._topics.get(name)
        if own is not None and key in own:
            return own[key]
        return self.policy(name.tenant, name.namespace, key)

    def limit(self, name: TopicName, key: str) -> int:
        """An integer policy of the topic, or else its namespace (max producers, ...); 0 when unset (no limit)."""
        value = self.effective(name, key)
        return value if isinstance(value, int) else 0

    def backlog_quotas(self, name: TopicName) -> Policies:
        """The backlog quotas that apply to a topic, per BacklogQuotaType: the topic's own for each type it sets,
        else its namespace's (Pulsar resolves each type on its own)."""
        out: Policies = {}
        for quotas in (self.policy(name.tenant, name.namespace, BACKLOG_QUOTA), self._topics.get(name, {}).get(
                BACKLOG_QUOTA)):
            if isinstance(quotas, dict):
                out.update(quotas)
        return out

    def topic_policies(self, name: TopicName) -> Policies:
        """The policies set on the topic itself ({} when none)."""
        return self._topics.get(name, {})

    @staticmethod
    def _topic_path(name: TopicName) -> str:
        return f"{TOPIC_ROOT}/{name.tenant}/{name.namespace}/{name.local}"

    async def _read_topic(self, name: TopicName) -> None:
        got = await self.store.get(self._topic_path(name))
        if got is None:
            self._topics.pop(name, None)
        else:
            self._topics[name] = json.loads(got[0] or b"{}")

    async def fresh_topic(self, name: TopicName) -> Policies:
        """The topic's own policies, re-read from the store (another broker may have set them)."""
        await self._read_topic(name)
        return self.topic_policies(name)

    async def set_topic_policy(self, name: TopicName, key: str, value: object) -> None:
        """Set (value not None) or remove (None) one topic-level policy, checked by TOPIC_VALIDATORS."""
        if value is not None and key in TOPIC_VALIDATORS:
            value = TOPIC_VALIDATORS[key](value)
        policies = dict(await self.fresh_topic(name))
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        if policies:
            await self.store.put(self._topic_path(name), json.dumps(policies, sort_keys=True).encode())
            self._topics[name] = policies
        else:
            await self.drop_topic(name)

    async def set_topic_backlog_quota(self, name: TopicName, kind: str, body: object) -> None:
        """Set (a BacklogQuota body) or remove (None) the topic's quota of one BacklogQuotaType."""
        if kind not in (DESTINATION_STORAGE, MESSAGE_AGE):
            raise NamespaceError(404, f"Unknown backlogQuotaType {kind!r}")
        quotas = (await self.fresh_topic(name)).get(BACKLOG_QUOTA)
        new = dict(quotas) if isinstance(quotas, dict) else {}
        if body is None:
            new.pop(kind, None)
        else:
            new[kind] = backlog_quota(body, f"{name.tenant}/{name.namespace}")
        await self.set_topic_policy(name, BACKLOG_QUOTA, new or None)

    async def drop_topic(self, name: TopicName) -> None:
        """Remove a topic's policies (all of them: the topic was deleted, as Pulsar deletes them with it)."""
        self._topics.pop(name, None)
        try:
            await self.store.delete(self._topic_path(name))
        except NoSuchNodeError:
            pass

    async def refresh(self, tenant: str, ns: str | None = None) -> None:
        """Re-read a tenant (and its namespaces) or one namespace from the store (another broker may have changed it)."""
        if ns is None:
            if not await self._read_tenant(tenant):
                for key in [k for k in self._namespaces if k[0] == tenant]:
                    del self._namespaces[key]
        else:
            await self._read_namespace(tenant, ns)

    async def fresh(self, name: TopicName) -> None:
        """In cluster mode, re-read the policies of the topic and of its namespace (another broker may have changed
        them): called where a policy decides something once (PRODUCER, SUBSCRIBE, the periodic passes), so that a
        change made on any broker applies on every broker from its next such decision. Two store reads; none
        embedded."""
        if self.clustered():
            try:
                await self._read_namespace(name.tenant, name.namespace)
                await self._read_topic(name)
            except StorageError as e:  # the store is unreachable now: decide on what was read last
                log.debug("namespace %s/%s not re-read: %s", name.tenant, name.namespace, e)

    async def need(self, tenant: str, ns: str) -> Policies:
        """The namespace's policies, freshly read; 404 "Namespace does not exist" as Pulsar answers."""
        await self.refresh(tenant, ns)
        if (tenant, ns) not in self._namespaces:
            raise NamespaceError(404, "Namespace does not exist")
        return self._namespaces[(tenant, ns)]

    # ------------------------------------------------------------------ changes
    async def create_tenant(self, tenant: str, body: object) -> None:
        check_name(tenant, "Tenant")
        info = tenant_info(body, [self.config.clusterName])
        try:
            await self.store.put(self._path(tenant), json.dumps(info).encode(), expected_version=-1)
        except NodeExistsError:
            await self._read_tenant(tenant)
            raise NamespaceError(409, "Tenant already exist") from None
        self._tenants[tenant] = info

    async def update_tenant(self, tenant: str, body: object) -> None:
        await self.refresh(tenant)
        if tenant not in self._tenants:
            raise NamespaceError(404, f"Tenant {tenant} not found")
        info = tenant_info(body, [self.config.clusterName])
        await self.store.put(self._path(tenant), json.dumps(info).encode())
        self._tenants[tenant] = info

    async def delete_tenant(self, tenant: str) -> None:
        await self.refresh(tenant)
        if tenant not in self._tenants:
            raise NamespaceError(404, "Tenant doesn't exist")
        if any(t == tenant for t, _ in self._namespaces) or await self.store.children(self._path(tenant)):
            raise NamespaceError(409, "The tenant still has active namespaces")
        try:
            await self.store.delete(self._path(tenant))
        except NoSuchNodeError:
            pass
        self._tenants.pop(tenant, None)

    async def create_namespace(self, tenant: str, ns: str, body: object = None) -> None:
        check_name(ns, "Namespace")
        await self.refresh(tenant)
        if tenant not in self._tenants:
            raise NamespaceError(404, "Tenant does not exist")
        policies = check_policies(body)
        try:
            await self.store.put(self._path(tenant, ns), json.dumps(policies).encode(), expected_version=-1)
        except NodeExistsError:
            await self._read_namespace(tenant, ns)
            raise NamespaceError(409, "Namespace already exists") from None
        self._namespaces[(tenant, ns)] = policies

    async def delete_namespace(self, tenant: str, ns: str) -> None:
        await self.refresh(tenant, ns)
        if (tenant, ns) not in self._namespaces:
            raise NamespaceError(404, f"Namespace {tenant}/{ns} does not exist.")
        if self.has_topics(tenant, ns):
            raise NamespaceError(409, "Cannot delete non empty namespace")
        cfg = self.config
        if (tenant, ns) in ((cfg.kafkaTenant, cfg.kafkaNamespace), (cfg.kafkaMetadataTenant, cfg.kafkaMetadataNamespace)):
            raise NamespaceError(403, f"Namespace {tenant}/{ns} is used by this broker and cannot be deleted")
        try:
            await self.store.delete(self._path(tenant, ns))
        except NoSuchNodeError:
            pass
        self._namespaces.pop((tenant, ns), None)

    async def set_backlog_quota(self, tenant: str, ns: str, kind: str, body: object) -> None:
        """Set (a BacklogQuota body) or remove (None) the namespace's quota of one BacklogQuotaType."""
        if kind not in (DESTINATION_STORAGE, MESSAGE_AGE):
            raise NamespaceError(404, f"Unknown backlogQuotaType {kind!r}")
        policies = await self.need(tenant, ns)
        quotas = policies.get(BACKLOG_QUOTA)
        new = dict(quotas) if isinstance(quotas, dict) else {}
        if body is None:
            new.pop(kind, None)
        else:
            new[kind] = backlog_quota(body, f"{tenant}/{ns}")
        await self.set_policy(tenant, ns, BACKLOG_QUOTA, new or None)

    async def set_policy(self, tenant: str, ns: str, key: str, value: object) -> None:
        """Set (value not None) or remove (None) one policy, checked by VALIDATORS (or the caller)."""
        await self.need(tenant, ns)
        if value is not None and key in VALIDATORS:
            value = VALIDATORS[key](value)  # None: unset (an unknown schema compatibility strategy)
        policies = dict(self._namespaces[(tenant, ns)])
        if value is None:
            policies.pop(key, None)
        else:
            policies[key] = value
        await self.store.put(self._path(tenant, ns), json.dumps(policies, sort_keys=True).encode())
        self._namespaces[(tenant, ns)] = policies

    def retention(self, name: TopicName) -> tuple[int, int] | None:
        """The topic's, else its namespace's retention policy as (retention.ms, retention.bytes), -1 for no limit;
        None: unset."""
        policy = self.effective(name, RETENTION)
        if not isinstance(policy, dict):
            return None
        minutes, mb = policy.get("retentionTimeInMinutes", 0), policy.get("retentionSizeInMB", 0)
        ms = -1 if not isinstance(minutes, int) or minutes < 0 else minutes * 60_000
        size = -1 if not isinstance(mb, int) or mb < 0 else mb << 20
        return ms, size

    def schema_strategy(self, name: TopicName) -> str | None:
        """The topic's, else its namespace's schemaCompatibilityStrategy policy (None: unset, the broker's applies)."""
        strategy = self.effective(name, SCHEMA_COMPATIBILITY)
        return None if strategy is None else str(strategy)

    def auto_create_rule(self, name: TopicName, allowed: bool, topic_type: str, partitions: int) -> AutoCreate:
        """What a Pulsar client's missing topic auto-creates, the broker's keys (allowAutoTopicCreation,
        allowAutoTopicCreationType, defaultNumPartitions) under the namespace's autoTopicCreation policy: the one
        rule the binary and the HTTP lookup follow."""
        allowed, kind, count = self.auto_creation(name.tenant, name.namespace, allowed, partitions)
        return AutoCreate(allowed, (kind or topic_type) == "partitioned", count)

    def auto_creation(self, tenant: str, ns: str, allowed: bool, partitions: int) -> tuple[bool, str | None, int]:
        """(allowed, topic type, partitions) for a topic auto-created in the namespace: its autoTopicCreation
        override when set (Pulsar's rule), else the broker's `allowed` and `partitions` (type None: the broker's)."""
        override = self.policy(tenant, ns, AUTO_TOPIC_CREATION)
        if not isinstance(override, dict):
            return allowed, None, partitions
        if not override.get("allowAutoTopicCreation"):
            return False, None, partitions
        count = override.get("defaultNumPartitions")
        return True, str(override.get("topicType")), count if isinstance(count, int) else partitions
