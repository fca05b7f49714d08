"""Metadata (key 3): v0-v13.

- Alone (embedded storage), this broker is the only broker, the controller, and the leader of every
  partition (replicas = ISR = [self]); it advertises the endpoint of the listener the request arrived on
  (KoP's multi-listener rule).
- Cluster mode (kop/cluster/ownership.py): the brokers are the live brokers registered in ZooKeeper, the
  controller is the lowest live id, and a partition's leader (= its only replica and ISR: BookKeeper does
  the replication) is the owner of its namespace bundle. A partition without an owner triggers acquisition
  and the answer waits up to METADATA_OWNER_WAIT seconds for it; still none: LEADER_NOT_AVAILABLE with
  leader -1 for that partition, as Kafka answers while a leader is being elected.
- Topic names are echoed exactly as the client wrote them (any of KoP's three spellings).
- Topic ids are real (random per topic, kept in the topic record); Kafka 4.4 clients use them in
  Produce v13, Fetch v13+ and OffsetCommit/OffsetFetch v10 (kop/kafka/apis/common.py: topic_by_id).
- Auto-creation follows allowAutoTopicCreation and, from v4, the request's allow_auto_topic_creation.
- Names are the connection's (kop/topics/scope.py): a tenant login (kafkaEnableMultiTenantMetadata, PLAIN
  with a token) has its short names in its own tenant/namespace, every other login in the default one.
- A request for all topics from a default-namespace login lists every topic, those outside the default
  namespace as tenant/namespace/topic (what it always did: that login is the cluster-wide view). From a
  tenant login it lists only the topics of its namespace, under their short names: what `kafka-topics
  --list` of a tenant's client should show (KoP listed only `kopAllowedNamespaces`, by default the
  tenant's own), and other tenants' topic names are not its business. The internal topics are listed
  to every login, as Kafka lists them. It can still name any topic
  explicitly as tenant/namespace/topic (subject to the ACLs), as the default login can.
- Authorized operations (v8+, when asked): kop/kafka/authorize.py (every operation of the resource type
  without an authorizer, as Kafka answers); cluster operations only v8-v10, as Kafka.
- With ACLs (authorizationEnabled): a request for all topics silently leaves out the topics the principal
  may not DESCRIBE; a named one it may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED with a zero topic id
  whether or not it exists; auto-creation needs CREATE on the cluster or the topic, else
  TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis.handleTopicMetadataRequest).
- Leader epoch is the constant LEADER_EPOCH (see kop.kafka.apis.common). v13 (what Kafka 4.4 clients
  send) only adds a top-level error code (KIP-1102), for REBOOTSTRAP_REQUIRED; this broker never needs
  its clients to bootstrap again (it answers its whole cluster's brokers), so it is always 0, as Kafka's.
- Each answered topic goes out pre-encoded from TopicEntryCache (issue 5): building and encoding 10 000
  partition structs was ~90% of a 10 000-partition answer's time (py-spy). The cache key holds everything
  an entry's bytes depend on (version, the name as answered, topic id, internal flag, partition count and
  each partition's leader), so a create/delete/alter of partitions or an ownership move changes the key
  and can never serve a stale entry; the entries are dropped wholesale when TopicManager.generation moves
  (deleted topics) and when they exceed a bound (leaders churning in cluster mode). The bytes are made by
  the generic generated encoder (kop.protocol.encode_struct), the same code as the uncached path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from kop.kafka import authorize
from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.authorize import NOT_REQUESTED, Op
from kop.kafka.context import RequestContext
from kop.protocol import ZERO_UUID, Encoded, encode_struct
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import MetadataRequest, MetadataResponse
from kop.topics.manager import Topic, TopicError

if TYPE_CHECKING:
    from kop.kafka.handler import Node
    from kop.topics.names import TopicName

_ResponseTopic = MetadataResponse.MetadataResponseTopic

API_KEY = 3
VERSIONS = (0, 13)
METADATA_OWNER_WAIT = 2.0  # seconds a Metadata answer waits for unowned partitions to get an owner


class TopicEntryCache:
    """Encoded MetadataResponseTopic entries (module docstring). One per protocol handler."""

    #: Bounds; past either the cache starts over (not an LRU: the key set only grows when leaders move or
    #: clients use other versions/spellings, and a refill costs one uncached answer). 10 000 partitions
    #: are ~0.26 MB of entries per version.
    MAX_ENTRIES = 50_000
    MAX_BYTES = 64 << 20

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], Encoded] = {}
        self._bytes = 0
        self._generation = -1
        self.hits = 0
        self.misses = 0

    def entry(self, generation: int, version: int, name: str, topic: Topic, leaders: Node | tuple[Node | None, ...],
              R: type[MetadataResponse], leader_of: Callable[[int], Node | None], ops: int = NOT_REQUESTED) -> Encoded:
        """The entry of `topic` answered as `name`; `leaders` (a Node, or one Node-or-None per partition)
        is the key's view of what `leader_of(partition)` gives."""
        if generation != self._generation:
            self.clear()
            self._generation = generation
        key = (version, name, topic.topic_id, topic.internal, topic.partitions, leaders, ops)
        found = self._entries.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        found = encode_struct(_topic(R, name, topic, leader_of, ops), version)
        if len(self._entries) >= self.MAX_ENTRIES or self._bytes + len(found) > self.MAX_BYTES:
            self.clear()
        self._entries[key] = found
        self._bytes += len(found)
        return found

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)


async def handle(ctx: RequestContext, req: MetadataRequest) -> MetadataResponse:
    h = ctx.handler
    R = MetadataResponse
    node = h.node_for(ctx.listener_name)
    topics_mgr = h.service.topics
    version = ctx.version
    want_topic_ops = version >= 8 and req.include_topic_authorized_operations
    cluster_ops = authorize.cluster_operations(ctx, 8 <= version <= 10 and req.include_cluster_authorized_operations)

    def ops(name: str | None) -> int:
        return authorize.requested_operations(ctx, want_topic_ops, authorize.TOPIC, name or "")

    out = await _resolve_topics(ctx, req, R, ops)
    found = [x for x in out if isinstance(x, tuple)]
    own = h.service.ownership
    cache = h.metadata_cache
    generation = topics_mgr.generation
    if not own.clustered:
        def only(p: int) -> Node | None:
            return node

        return R(
            throttle_time_ms=0,
            brokers=[R.MetadataResponseBroker(node_id=node.node_id, host=node.host, port=node.port, rack=None)],
            cluster_id=h.service.cluster_id,
            controller_id=node.node_id,
            topics=_entries([cache.entry(generation, version, x[0], x[1], node, R, only, ops(x[0]))
                             if isinstance(x, tuple) else x for x in out]),
            cluster_authorized_operations=cluster_ops,
            error_code=0,
        )
    listener = ctx.listener_name
    keys = [(topic.name, p) for _, topic in found for p in range(topic.partitions)]
    if any(h.leader_node(tn, p, listener) is None for tn, p in keys):
        await own.wait_owned(keys, METADATA_OWNER_WAIT)
    brokers = {n.node_id: n for n in h.broker_nodes(listener)}
    leaders: dict[tuple[TopicName, int], Node | None] = {}
    for tn, p in keys:
        leader = leaders[(tn, p)] = h.leader_node(tn, p, listener)
        if leader is not None:
            brokers.setdefault(leader.node_id, leader)  # an owner whose registration we have not seen yet
    return R(
        throttle_time_ms=0,
        brokers=[R.MetadataResponseBroker(node_id=n.node_id, host=n.host, port=n.port, rack=None)
                 for n in sorted(brokers.values(), key=lambda n: n.node_id)],
        cluster_id=h.service.cluster_id,
        controller_id=own.controller_id,
        topics=_entries([_cached_entry(cache, generation, version, R, x, leaders, ops(x[0]))
                         if isinstance(x, tuple) else x for x in out]),
        cluster_authorized_operations=cluster_ops,
        error_code=0,
    )


def _entries(topics: list[Encoded | _ResponseTopic]) -> list[_ResponseTopic]:
    """The answer's topics: an element already encoded goes out as it is (kop/protocol/codegen.py)."""
    return cast("list[MetadataResponse.MetadataResponseTopic]", topics)


async def _resolve_topics(ctx: RequestContext, req: MetadataRequest, R: type[MetadataResponse],
                          ops: Callable[[str | None], int]) -> list[_ResponseTopic | tuple[str, Topic]]:
    """In request order: error answers, and (name as asked, topic) for topics answered with partitions."""
    h = ctx.handler
    topics_mgr = h.service.topics
    out: list[_ResponseTopic | tuple[str, Topic]] = []
    secured = authorize.authorizer(ctx) is not None
    names = ctx.names
    if req.topics is None or (ctx.version == 0 and not req.topics):
        listed = topics_mgr.all() if names.default else \
            [t for t in topics_mgr.all() if t.internal or names.owns(t.name)]
        for kafka_name, listed_topic in sorted((names.kafka_name(t.name), t) for t in listed):
            if not secured or authorize.topic_allowed(ctx, Op.DESCRIBE, kafka_name):  # others are silently left out
                out.append((kafka_name, listed_topic))
    else:
        allow = req.allow_auto_topic_creation if ctx.version >= 4 else True
        for rt in req.topics:
            name = rt.name
            if name is None and ctx.version < 12:
                # Kafka refuses a null name before v12 (lookup by id came with v12) with INVALID_REQUEST; the
                # answer's name is not nullable before v12, so it carries "".
                out.append(R.MetadataResponseTopic(
                    error_code=ErrorCode.INVALID_REQUEST, name="", topic_id=ZERO_UUID, is_internal=False,
                    partitions=[], topic_authorized_operations=ops(None),
                ))
                continue
            if name is None:  # v12+ lookup by id
                topic = topics_mgr.get_by_id(rt.topic_id)
                if topic is None:
                    out.append(R.MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=rt.topic_id,
                        is_internal=False, partitions=[], topic_authorized_operations=ops(None),
                    ))
                    continue
                kafka_name = names.kafka_name(topic.name)
                if secured and not authorize.topic_allowed(ctx, Op.DESCRIBE, kafka_name):
                    out.append(_denied(R, None, rt.topic_id))
                    continue
                out.append((kafka_name, topic))
                continue
            if secured and not authorize.topic_allowed(ctx, Op.DESCRIBE, name):
                out.append(_denied(R, name, ZERO_UUID))  # existence is not revealed
                continue
            try:
                topic = await ctx.lookup_topic(name, auto_create=allow)
            except TopicError as e:
                out.append(R.MetadataResponseTopic(
                    error_code=ErrorCode[e.error], name=name, topic_id=ZERO_UUID, is_internal=False, partitions=[],
                    topic_authorized_operations=ops(name),
                ))
                continue
            if topic is None and secured and allow and h.config.allowAutoTopicCreation \
                    and not authorize.may_auto_create(ctx, name):
                out.append(_denied(R, name, ZERO_UUID))  # auto-creation refused
                continue
            if topic is None:
                out.append(R.MetadataResponseTopic(
                    error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID,
                    is_internal=False, partitions=[], topic_authorized_operations=ops(name),
                ))
                continue
            out.append((name, topic))
    return out


def _denied(R: type[MetadataResponse], name: str | None, topic_id: bytes) -> _ResponseTopic:
    """A topic the principal may not describe (or auto-create): Kafka answers no authorized operations."""
    return R.MetadataResponseTopic(
        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, topic_id=topic_id, is_internal=False,
        partitions=[], topic_authorized_operations=NOT_REQUESTED,
    )


def _cached_entry(cache: TopicEntryCache, generation: int, version: int, R: type[MetadataResponse],
                  x: tuple[str, Topic], leaders: dict[tuple[TopicName, int], Node | None], ops: int) -> Encoded:
    name, topic = x
    per_partition = tuple(leaders[(topic.name, p)] for p in range(topic.partitions))
    return cache.entry(generation, version, name, topic, per_partition, R, per_partition.__getitem__, ops)


def _topic(R: type[MetadataResponse], name: str, topic: Topic, leader_of: Callable[[int], Node | None],
           ops: int = NOT_REQUESTED) -> _ResponseTopic:
    parts = []
    for i in range(topic.partitions):
        leader = leader_of(i)
        if leader is None:
            parts.append(R.MetadataResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i, leader_id=-1, leader_epoch=-1,
                replica_nodes=[], isr_nodes=[], offline_replicas=[]))
            continue
        replicas = [leader.node_id]
        parts.append(R.MetadataResponsePartition(
            error_code=0, partition_index=i, leader_id=leader.node_id, leader_epoch=LEADER_EPOCH,
            replica_nodes=replicas, isr_nodes=replicas, offline_replicas=[]))
    return R.MetadataResponseTopic(
        error_code=0,
        name=name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=parts,
        topic_authorized_operations=ops,
    )
