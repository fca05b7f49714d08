"""DescribeTopicPartitions (key 75): v0.

What Kafka 4.x's kafka-topics --describe and kafka-consumer-groups (through the Admin client's
describeTopics) ask instead of Metadata (KIP-966). Answered as Kafka's DescribeTopicPartitionsRequestHandler
does, with the same partition facts as Metadata (kop/kafka/apis/metadata.py):

- The topics are the requested ones, or every topic when the list is empty (Metadata's "all topics": the
  connection's listing, kop/topics/scope.py), sorted by name, from the cursor's topic on; the first topic
  starts at the cursor's partition. A cursor whose topic is not among them, or whose partition is
  negative, is INVALID_REQUEST.
- Paging: at most min(ResponsePartitionLimit, 2000) partitions (Kafka's max.request.partition.size.limit
  default; at least 1). When the limit stops a topic midway, NextCursor names that topic and its next
  partition; when it is used up exactly at a topic's end and topics remain, NextCursor names the next one
  at partition 0; otherwise NextCursor is null.
- A requested topic that does not exist (or has an invalid name) is UNKNOWN_TOPIC_OR_PARTITION with no
  partitions; one the principal may not DESCRIBE is TOPIC_AUTHORIZATION_FAILED with a zero id, listed
  after the others (Kafka adds them last). Listing all topics silently leaves both kinds out.
- Every answered topic carries its authorized operations (Kafka computes them unasked here).
- Alone, this broker leads every partition (replicas = ISR = [self]); in cluster mode a partition's leader is
  its namespace bundle's owner, and one without an owner is LEADER_NOT_AVAILABLE with leader -1 (no wait,
  unlike Metadata: describing is not producing). Leader epoch is LEADER_EPOCH; there are no eligible
  leader replicas (ELR, KIP-966: BookKeeper does the replication), so both ELR fields are empty lists, as
  Kafka answers when ELR is off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kop.kafka import authorize
from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.authorize import Op
from kop.kafka.context import RequestContext
from kop.protocol import ZERO_UUID
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

if TYPE_CHECKING:
    from kop.topics.manager import Topic

API_KEY = 75
VERSIONS = (0, 0)

#: Kafka's max.request.partition.size.limit default: the most partitions one answer carries.
PARTITION_LIMIT = 2000

R = DescribeTopicPartitionsResponse
_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic


async def handle(ctx: RequestContext, req: DescribeTopicPartitionsRequest) -> DescribeTopicPartitionsResponse:
    cursor = req.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not req.topics
    if fetch_all:
        names = ctx.names
        topics_mgr = ctx.topics
        listed = topics_mgr.all() if names.default else \
            [t for t in topics_mgr.all() if t.internal or names.owns(t.name)]
        candidates = sorted({names.kafka_name(t.name) for t in listed})
    else:
        candidates = sorted({t.name for t in req.topics})
    wanted = [n for n in candidates if n >= start_topic]
    if cursor is not None and (cursor.topic_name not in wanted or cursor.partition_index < 0):
        return R(throttle_time_ms=0, topics=[_error(ErrorCode.INVALID_REQUEST, n) for n in candidates],
                 next_cursor=None)
    denied: list[_Topic] = []
    secured = authorize.authorizer(ctx) is not None
    allowed = []
    for name in wanted:
        if secured and not authorize.topic_allowed(ctx, Op.DESCRIBE, name):
            if not fetch_all:
                denied.append(_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
            continue
        allowed.append(name)
    limit = max(min(PARTITION_LIMIT, req.response_partition_limit), 1)
    out: list[_Topic] = []
    next_cursor = None
    for name in allowed:
        if limit <= 0:
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        topic = await ctx.find_topic(name)
        if topic is None:
            if not fetch_all:
                out.append(_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name))
            continue
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(topic.partitions, first + limit)
        out.append(_described(ctx, name, topic, range(first, end)))
        limit -= max(end - first, 0)
        if end < topic.partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=end)
            break
    for t in out:
        t.topic_authorized_operations = authorize.operations(ctx, authorize.TOPIC, t.name or "")
    return R(throttle_time_ms=0, topics=out + denied, next_cursor=next_cursor)


def _error(code: int, name: str) -> _Topic:
    return R.DescribeTopicPartitionsResponseTopic(error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False,
                                                  partitions=[])


def _described(ctx: RequestContext, name: str, topic: Topic, indexes: range) -> _Topic:
    h = ctx.handler
    listener = ctx.listener_name
    clustered = h.service.ownership.clustered
    me = h.node_for(listener)
    parts = []
    for i in indexes:
        leader = h.leader_node(topic.name, i, listener) if clustered else me
        if leader is None:
            parts.append(R.DescribeTopicPartitionsResponsePartition(
                error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=i, leader_id=-1, leader_epoch=-1,
                replica_nodes=[], isr_nodes=[], eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[]))
            continue
        replicas = [leader.node_id]
        parts.append(R.DescribeTopicPartitionsResponsePartition(
            error_code=0, partition_index=i, leader_id=leader.node_id, leader_epoch=LEADER_EPOCH,
            replica_nodes=replicas, isr_nodes=replicas, eligible_leader_replicas=[], last_known_elr=[],
            offline_replicas=[]))
    return R.DescribeTopicPartitionsResponseTopic(error_code=0, name=name, topic_id=topic.topic_id,
                                                  is_internal=topic.internal, partitions=parts)
