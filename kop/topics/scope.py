"""NameScope: how one Kafka connection spells topic names, group ids and transactional ids.

KoP's multi-tenant metadata (`kafkaEnableMultiTenantMetadata`, docs/security.md "Tenants"): a client that
logs in with SASL/PLAIN and a Pulsar token names its tenant, or `tenant/namespace`, as the username; its short
names then live there instead of in kafkaTenant/kafkaNamespace. Every other login uses the broker's default
scope (kafkaTenant/kafkaNamespace), which is `TopicManager.names` - what the broker did before tenants.

Two kinds of name meet here:
- the *client's* spelling (what a request carries and a response echoes): `t` for the scope's own
  namespace, `tenant/ns/t` or `persistent://tenant/ns/t` for any topic;
- the *broker-global* Kafka name (what ACLs name and the coordinators store offsets under):
  `t` for the default namespace, `tenant/ns/t` elsewhere (TopicManager.kafka_name). A tenant-A login's `t` is
  globally `A/default/t`, so an ACL on `t` (= public/default/t) says nothing about it.

Group ids and transactional ids follow the same rule, because a group or transaction of tenant A must be
another one than the default tenant's of the same id (KoP ran one coordinator per tenant): a scope's id `g`
is globally `tenant/ns/g`; an id that already reads `tenant/ns/rest` (tenant and namespace legal names)
names that tenant's `rest` explicitly, as `tenant/ns/t` does for topics; the default scope's ids are global
ids unchanged, so stored offsets and ACLs of an existing cluster keep their meaning. A default-tenant group
literally called `A/default/g` is therefore tenant A's `g` - by design, as with topics, and guarded by the
same ACLs on the global id (authorization always uses global ids).

The default scope answers every call with what the broker did before (one attribute test on top), so the
hot path of a broker without tenant logins is unchanged.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kop.topics.names import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, TopicName, parse_topic_name

if TYPE_CHECKING:
    from kop.topics.manager import TopicManager

# The legal tenant and namespace part, as kop.topics.names accepts it in topic names.
_PART = re.compile(r"^[A-Za-z0-9_.\-=:]+$")
_INTERNAL = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


class InvalidTenant(ValueError):
    """A username that does not name a tenant or tenant/namespace."""


def tenant_namespace(username: str, default_namespace: str) -> tuple[str, str]:
    """KoP's PLAIN-with-token username: `tenant` (namespace = kafkaNamespace) or `tenant/namespace`."""
    parts = username.split("/")
    if len(parts) > 2:
        raise InvalidTenant(f"username {username[:100]!r} must name a tenant or tenant/namespace")
    tenant, namespace = (parts[0], default_namespace) if len(parts) == 1 else parts
    for what, part in (("tenant", tenant), ("namespace", namespace)):
        if not _PART.match(part):
            raise InvalidTenant(f"username {username[:100]!r} does not name a valid {what} (letters, digits and "
                                f"_ . - = : only)")
    return tenant, namespace


def explicit_id(name: str) -> bool:
    """A group/transactional id or topic name that reads `tenant/namespace/rest` with legal parts."""
    parts = name.split("/", 2)
    return len(parts) == 3 and bool(_PART.match(parts[0])) and bool(_PART.match(parts[1])) and bool(parts[2])


class NameScope:
    __slots__ = ("topics", "tenant", "namespace", "default", "prefix")

    def __init__(self, topics: TopicManager, tenant: str, namespace: str) -> None:
        self.topics = topics
        self.tenant = tenant
        self.namespace = namespace
        cfg = topics.config
        self.default = (tenant, namespace) == (cfg.kafkaTenant, cfg.kafkaNamespace)
        self.prefix = f"{tenant}/{namespace}/"

    def __repr__(self) -> str:
        return f"NameScope({self.tenant}/{self.namespace})"

    # ------------------------------------------------------------------ topics
    def parse(self, name: str) -> TopicName:
        """The topic a client's name means (InvalidTopicName when it is not a name)."""
        if self.default or name in _INTERNAL:
            return self.topics.parse(name)
        return parse_topic_name(name, self.tenant, self.namespace)

    def owns(self, t: TopicName) -> bool:
        """The topic lives in this scope's namespace (its short name is its name here)."""
        return t.tenant == self.tenant and t.namespace == self.namespace

    def kafka_name(self, t: TopicName) -> str:
        """How this scope spells a topic the broker names (listings): bare in its own namespace,
        tenant/ns/topic elsewhere; the internal topics under their Kafka names."""
        if self.default or t.local in _INTERNAL:
            return self.topics.kafka_name(t)
        return t.kafka_name(self.tenant, self.namespace)

    def global_name(self, name: str) -> str:
        """The broker-global Kafka name of the topic a client names; unparseable names as they are."""
        try:
            return self.topics.kafka_name(self.parse(name))
        except ValueError:
            return name

    def client_name(self, global_name: str) -> str:
        """A broker-global Kafka name (as the coordinators store them) spelled for this scope."""
        if self.default:
            return global_name
        try:
            return self.kafka_name(self.topics.parse(global_name))
        except ValueError:
            return global_name

    # ------------------------------------------------------------------ group and transactional ids
    def global_id(self, client_id: str) -> str:
        """The id the coordinators know a client's group or transactional id by (module docstring)."""
        if self.default or explicit_id(client_id):
            return client_id
        return self.prefix + client_id

    def owns_id(self, global_id: str) -> bool:
        """The global id is one of this scope's own (listings of a tenant scope show only these)."""
        if self.default:
            return True
        return global_id.startswith(self.prefix) and self.global_id(global_id[len(self.prefix):]) == global_id

    def client_id(self, global_id: str) -> str:
        """A global id as this scope spells it: its own ids short, others as they are."""
        if self.default or not self.owns_id(global_id):
            return global_id
        return global_id[len(self.prefix):]
