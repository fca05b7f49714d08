"""OffsetDelete (key 47): v0 (KIP-496; KoP never had it).

- Deletes committed offsets of a group with tombstones, answered once durable. Partitions of a topic the
  group's members subscribe to get GROUP_SUBSCRIBED_TO_TOPIC; a non-empty group that does not use the
  consumer protocol gets NON_EMPTY_GROUP; a missing group GROUP_ID_NOT_FOUND. A KIP-848 consumer group's
  subscribed topics are its members' topic names and what their regexes resolved to.
- Partitions of topics that do not exist get UNKNOWN_TOPIC_OR_PARTITION, checked before the group as
  Kafka does. Partitions of an existing topic without a committed offset are left out of the answer,
  exactly as Kafka leaves them out.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import OffsetDeleteRequest, OffsetDeleteResponse

API_KEY = 47
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
    R = OffsetDeleteResponse
    coordinator = ctx.coordinator
    topics_mgr = ctx.topics
    if not authorize.group_allowed(ctx, authorize.Op.DELETE, req.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    denied = authorize.denied_topics(ctx, authorize.Op.READ, (t.name for t in req.topics))
    unknown: dict[str, list[int]] = {}  # partitions answered with an error; its code per topic below
    wanted: list[tuple[str, str, list[int]]] = []  # (name as asked, Kafka name, partitions)
    for t in req.topics:
        if t.name in denied:
            unknown.setdefault(t.name, []).extend(p.partition_index for p in t.partitions)
            continue
        topic = await ctx.find_topic(t.name)
        good = []
        for p in t.partitions:
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                unknown.setdefault(t.name, []).append(p.partition_index)
            else:
                good.append(p.partition_index)
        if good:
            assert topic is not None
            wanted.append((t.name, topics_mgr.kafka_name(topic.name), good))
    # The group is checked even when no partition is left (a missing group is GROUP_ID_NOT_FOUND).
    error, results = await coordinator.delete_offsets(ctx.names.global_id(req.group_id), [(key, parts) for _, key, parts in wanted])
    if error:
        return R(error_code=error, throttle_time_ms=0, topics=[])
    topics: dict[str, list[OffsetDeleteResponse.OffsetDeleteResponsePartition]] = {}
    for name, key, parts in wanted:
        for index in parts:
            if (key, index) in results:
                topics.setdefault(name, []).append(
                    R.OffsetDeleteResponsePartition(partition_index=index, error_code=results[(key, index)]))
    for name, parts in unknown.items():
        code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if name in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        topics.setdefault(name, []).extend(R.OffsetDeleteResponsePartition(partition_index=p, error_code=code)
                                           for p in parts)
    return R(error_code=0, throttle_time_ms=0,
             topics=[R.OffsetDeleteResponseTopic(name=n, partitions=ps) for n, ps in topics.items()])
