"""DescribeShareGroupOffsets (key 90): v0-v1, the start offset (SPSO) and, from v1, the lag of each share-partition
of a share group (Admin.listShareGroupOffsets; `kafka-share-groups --describe`).

Each partition's start offset, leader epoch and delivery-complete count come from its share coordinator
(ReadShareGroupStateSummary v1, whichever broker that is), as Kafka's group coordinator reads them; the lag
(KIP-1226) is the high watermark - start offset - delivery-complete count (the records acknowledged or
archived in the in-flight window), as Kafka computes it. A partition without state (never fetched by the
group) answers start offset -1 and lag -1, as Kafka does for an uninitialized share-partition.

Topics null means every share-partition the group has state for: here, those this broker knows of (it leads
them, its share coordinator partitions hold them, or the group's members subscribed to their topics, or their
offsets were altered, since this broker serves the group); those of them never initialized are left out. How it
differs from Kafka 4.4: Kafka's group coordinator records the initialized share-partitions of a group in
__consumer_offsets (ShareGroupStatePartitionMetadata); this one keeps the topics in memory, so in cluster mode,
after the group's coordinator moved, an empty group whose states are held by other brokers lists fewer
partitions when no topics are named. A group id with no
share group and no state is answered GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

from kop.coordinator.share.persister import PersisterError
from kop.kafka import authorize
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse
from kop.topics.manager import Topic

API_KEY = 90
VERSIONS = (0, 1)
R = DescribeShareGroupOffsetsResponse


async def partition_offsets(ctx: RequestContext, topic: Topic, index: int, start: bool = False) -> tuple[int, int]:
    """The partition's (log start offset, high watermark): here when this broker leads it, else from its leader
    (cluster mode: the group coordinator need not lead the partitions; the log start offset only when `start`,
    else -1). Raises PartitionError, PersisterError."""
    try:
        plog = await ctx.partition_log(topic, index)
        return plog.log_start_offset, plog.high_watermark
    except PartitionError as e:
        persister = ctx.handler.share.persister
        if e.code != ErrorCode.NOT_LEADER_OR_FOLLOWER or persister is None or not persister.clustered:
            raise
        name = ctx.handler.service.topics.names.kafka_name(topic.name)
        first = await persister.high_watermark(topic.name, name, index, timestamp=-2) if start else -1
        return first, await persister.high_watermark(topic.name, name, index)


async def _partition(ctx: RequestContext, gid: str, name: str, index: int
                     ) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition:
    P = R.DescribeShareGroupOffsetsResponsePartition
    topic = await ctx.find_topic(name)
    persister = ctx.handler.share.persister
    start, lag, leader_epoch, error = -1, -1, -1, 0
    try:
        if topic is None or not 0 <= index < topic.partitions or persister is None:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        summary = await persister.summary((gid, topic.topic_id, index))
        if summary.start_offset >= 0:
            start, leader_epoch = summary.start_offset, summary.leader_epoch
            if summary.delivery_complete_count >= 0:
                lag = max((await partition_offsets(ctx, topic, index))[1] - start - summary.delivery_complete_count, 0)
    except PartitionError as e:
        error = e.code
    except PersisterError as e:
        error = e.error
    return P(partition_index=index, start_offset=start, leader_epoch=leader_epoch, lag=lag, error_code=error,
             error_message=None)


async def _with_state(ctx: RequestContext, gid: str) -> set[tuple[bytes, int]]:
    """The share-partitions of a group this broker knows to have state: those it leads, those its share
    coordinator partitions hold, and every partition of the topics the group's members subscribed to or whose
    offsets were altered here (groups.py `state_topics`)."""
    share = ctx.handler.share
    held = set(share.group_partitions(gid))
    if share.store is not None:
        held.update((tid, p) for (g, tid, p) in share.store.states if g == gid)
    group = share.groups.groups.get(gid) if share.clustered else None  # alone, the store holds every state
    for name in sorted(group.state_topics) if group is not None else ():
        topic = await ctx.find_topic(name)
        if topic is not None:
            held.update((topic.topic_id, p) for p in range(topic.partitions))
    return held


async def _group(ctx: RequestContext, g: DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
                 ) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
    G, T = R.DescribeShareGroupOffsetsResponseGroup, R.DescribeShareGroupOffsetsResponseTopic
    share = ctx.handler.share
    if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, g.group_id):
        return G(group_id=g.group_id, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                 error_message="The group is not authorized.")
    gid = ctx.names.global_id(g.group_id)
    held = await _with_state(ctx, gid)
    if gid not in share.groups.groups and not held:
        return G(group_id=g.group_id, topics=[], error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                 error_message=f"Group {g.group_id} not found.")
    if g.topics is None:  # every share-partition with state, by topic
        asked: dict[str, list[int]] = {}
        for (tid, index) in sorted(held):
            topic = ctx.topics.get_by_id(tid)
            if topic is not None:
                asked.setdefault(ctx.names.kafka_name(topic.name), []).append(index)
    else:
        asked = {t.topic_name: list(t.partitions) for t in g.topics}
    topics = []
    for name, partitions in asked.items():
        topic = await ctx.find_topic(name)
        parts = [await _partition(ctx, gid, name, i) for i in partitions]
        if g.topics is None:  # only the initialized ones (as Kafka's recorded initialized share-partitions)
            parts = [p for p in parts if p.start_offset >= 0 or p.error_code]
            if not parts:
                continue
        topics.append(T(topic_name=name, topic_id=topic.topic_id if topic is not None else bytes(16), partitions=parts))
    return G(group_id=g.group_id, topics=topics, error_code=0, error_message=None)


async def handle(ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    await ctx.handler.share.ready()
    return R(throttle_time_ms=0, groups=[await _group(ctx, g) for g in req.groups])
