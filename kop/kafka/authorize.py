"""Authorization of Kafka requests: the one place API modules ask "may this request's principal do X".

The broker's Authorizer (kop/security/acl, StandardAuthorizer's decisions) is `services.authorizer`, None when
`authorizationEnabled` is false: then every check here allows and costs one attribute read, so the hot path
of an open broker is unchanged. The principal is the connection's (`ctx.principal`: User:ANONYMOUS on
PLAINTEXT, the certificate's or SASL's otherwise); the host is the peer's IP address as Java prints it, which
is what Kafka compares ACL hosts with.

Topic names are authorized under their broker-global Kafka name (`topic`, not
`persistent://public/default/topic`): a topic reachable under KoP's three spellings is one resource, so an
ACL on `t` cannot be side-stepped by asking for `public/default/t`. Topics outside the default namespace are
named `tenant/namespace/topic` - also when a tenant login (kafkaEnableMultiTenantMetadata,
kop/topics/scope.py) asks for its own short `t`: tenant A's `t` is authorized as `A/default/t`, so an ACL on
`t` neither opens nor closes tenant A's topic. Group ids and transactional ids follow the same rule (a tenant
login's group `g` is the resource `A/default/g`); the default tenant's names and ids are unchanged.

The API modules apply Kafka's error choice (research/security.md §6.5): authorization comes before any
existence check, so a denied name answers TOPIC_AUTHORIZATION_FAILED whether or not it exists.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

from kop.protocol.errors import ErrorCode
from kop.security.acl import authorized_operations
from kop.security.acl.authorizer import NOT_REQUESTED
from kop.security.acl.model import CLUSTER_NAME, AclOperation, ResourceType, java_host_address

if TYPE_CHECKING:
    from kop.kafka.context import RequestContext
    from kop.protocol.messages import ProduceRequest
    from kop.security.acl import Authorizer

Op = AclOperation
# Kafka's default messages of the authorization errors (Errors.java), where a response carries one.
MESSAGES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                           ResourceType.TRANSACTIONAL_ID)

__all__ = [
    "CLUSTER", "GROUP", "NOT_REQUESTED", "TOPIC", "TRANSACTIONAL_ID", "Op", "allowed", "authorizer",
    "MESSAGES", "cluster_allowed", "cluster_operations", "configs_refused", "consumer_heartbeat_refused", "coordinator_refused",
    "denied_topics", "group_allowed", "init_producer_id_refused", "may_auto_create", "produce_denied", "operations", "requested_operations",
    "topic_allowed", "txn_group_refused", "txn_marker_writer_allowed", "txn_topics_refused",
]

# Kafka's Topic.isInternal names: AddPartitionsToTxn never authorizes them for a client (below v4).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def authorizer(ctx: RequestContext) -> Authorizer | None:
    return ctx.services.authorizer


@lru_cache(maxsize=4096)
def _java_host(ip: str) -> str:
    return java_host_address(ip)


def client_host(conn: object) -> str:
    """The peer's address for ACL hosts: the acceptor's normalized IP, else the address part of `peer`."""
    ip = getattr(conn, "ip", "") or ""
    if not ip:
        peer = getattr(conn, "peer", "") or ""
        ip = peer.rsplit(":", 1)[0].strip("[]") if ":" in peer else peer
    return _java_host(ip)


def resource_name(ctx: RequestContext, rtype: ResourceType, name: str) -> str:
    """Topics, groups and transactional ids under their broker-global names (module docstring); the
    cluster as given."""
    if not name or rtype == CLUSTER:
        return name
    if rtype == TOPIC:
        return ctx.names.global_name(name)
    return ctx.names.global_id(name)


def allowed(ctx: RequestContext, op: AclOperation, rtype: ResourceType, name: str) -> bool:
    authz = authorizer(ctx)
    if authz is None:
        return True
    return authz.authorize(ctx.principal, client_host(ctx.conn), op, rtype, resource_name(ctx, rtype, name))


def topic_allowed(ctx: RequestContext, op: AclOperation, name: str) -> bool:
    return allowed(ctx, op, TOPIC, name)


def group_allowed(ctx: RequestContext, op: AclOperation, group_id: str) -> bool:
    return allowed(ctx, op, GROUP, group_id)


def cluster_allowed(ctx: RequestContext, op: AclOperation) -> bool:
    return allowed(ctx, op, CLUSTER, CLUSTER_NAME)


def denied_topics(ctx: RequestContext, op: AclOperation, names: Iterable[str | None]) -> set[str]:
    """The names (as asked) the principal may not `op`; empty without an authorizer (checked once each)."""
    if authorizer(ctx) is None:
        return set()
    out: set[str] = set()
    seen: set[str] = set()
    for n in names:
        if n is None or n in seen:
            continue
        seen.add(n)
        if not topic_allowed(ctx, op, n):
            out.add(n)
    return out


def produce_denied(ctx: RequestContext, req: ProduceRequest) -> dict[str, str]:
    """Produce's refusals, {topic name: error}: every topic when a transactional id is given that the
    principal may not WRITE (Kafka refuses the whole request), else the topics it may not WRITE."""
    if authorizer(ctx) is None:
        return {}
    names = [td.name for td in req.topic_data]
    tid = getattr(req, "transactional_id", None)
    if tid is not None and not allowed(ctx, Op.WRITE, TRANSACTIONAL_ID, tid):
        return dict.fromkeys(names, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    return dict.fromkeys(denied_topics(ctx, Op.WRITE, names), "TOPIC_AUTHORIZATION_FAILED")


def coordinator_refused(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, str] | None:
    """FindCoordinator: DESCRIBE on the group (key type 0) or the transactional id (1)."""
    if key_type == 0 and not group_allowed(ctx, Op.DESCRIBE, key):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, MESSAGES[ErrorCode.GROUP_AUTHORIZATION_FAILED]
    if key_type == 1 and not allowed(ctx, Op.DESCRIBE, TRANSACTIONAL_ID, key):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return code, MESSAGES[code]
    return None


def consumer_heartbeat_refused(ctx: RequestContext, group_id: str,
                               topics: list[str] | None) -> tuple[ErrorCode, str | None] | None:
    """ConsumerGroupHeartbeat: READ on the group, then DESCRIBE on every subscribed topic (Kafka 4.x)."""
    if not group_allowed(ctx, Op.READ, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    denied = denied_topics(ctx, Op.DESCRIBE, topics or ())
    if denied:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, None
    return None


def init_producer_id_refused(ctx: RequestContext, transactional_id: str | None) -> ErrorCode | None:
    """WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE
    on some topic (Kafka's authorizeByResourceType)."""
    authz = authorizer(ctx)
    if authz is None:
        return None
    if transactional_id is not None:
        ok = allowed(ctx, Op.WRITE, TRANSACTIONAL_ID, transactional_id)
        return None if ok else ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if cluster_allowed(ctx, Op.IDEMPOTENT_WRITE):
        return None
    if authz.authorize_by_resource_type(ctx.principal, client_host(ctx.conn), Op.WRITE, TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def configs_refused(ctx: RequestContext, op: AclOperation, resource_type: int, name: str) -> ErrorCode | None:
    """Describe/Alter(Incremental)Configs: `op` (DESCRIBE_CONFIGS / ALTER_CONFIGS) on the topic (2) or, for a
    broker (4), broker logger (8) or client metrics subscription (16), on the cluster."""
    if resource_type == 2:
        return None if topic_allowed(ctx, op, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (4, 8, 16):
        return None if cluster_allowed(ctx, op) else ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return None


def may_auto_create(ctx: RequestContext, name: str) -> bool:
    """Auto-creating a topic needs CREATE on the cluster or on the topic (Kafka's Metadata rule)."""
    return cluster_allowed(ctx, Op.CREATE) or topic_allowed(ctx, Op.CREATE, name)


def operations(ctx: RequestContext, rtype: ResourceType, name: str) -> int:
    """The `*_authorized_operations` bitfield: every operation the type supports without an authorizer."""
    authz = authorizer(ctx)
    if authz is None:
        return authorized_operations(None, ctx.principal, "", rtype, name)
    return authorized_operations(authz, ctx.principal, client_host(ctx.conn), rtype, resource_name(ctx, rtype, name))


def cluster_operations(ctx: RequestContext, asked: bool) -> int:
    """Metadata's (v8-v10) and DescribeCluster's cluster bitfield: 0 without DESCRIBE on the cluster."""
    if not asked:
        return NOT_REQUESTED
    return operations(ctx, CLUSTER, CLUSTER_NAME) if cluster_allowed(ctx, Op.DESCRIBE) else 0


def requested_operations(ctx: RequestContext, asked: bool, rtype: ResourceType, name: str) -> int:
    return operations(ctx, rtype, name) if asked else NOT_REQUESTED


def txn_group_refused(ctx: RequestContext, transactional_id: str, group_id: str) -> ErrorCode | None:
    """AddOffsetsToTxn and TxnOffsetCommit: WRITE on the transactional id, then READ on the group."""
    if not allowed(ctx, Op.WRITE, TRANSACTIONAL_ID, transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not group_allowed(ctx, Op.READ, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    return None


def txn_topics_refused(ctx: RequestContext, names: Iterable[str]) -> set[str]:
    """AddPartitionsToTxn (v0-v3): the topics (as asked) the client may not add - those without WRITE and,
    with or without an authorizer, Kafka's internal topics (its filter leaves them out before authorizing)."""
    names = list(names)
    internal = {n for n in names if resource_name(ctx, TOPIC, n) in INTERNAL_TOPICS}
    return internal | denied_topics(ctx, Op.WRITE, (n for n in names if n not in internal))


def txn_marker_writer_allowed(ctx: RequestContext) -> bool:
    """WriteTxnMarkers: ALTER on the cluster (what `kafka-transactions.sh abort`'s admin has) or CLUSTER_ACTION
    (a broker's), in Kafka's order."""
    return cluster_allowed(ctx, Op.ALTER) or cluster_allowed(ctx, Op.CLUSTER_ACTION)
