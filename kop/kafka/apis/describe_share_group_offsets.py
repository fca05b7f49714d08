"""DescribeShareGroupOffsets (key 90): v0-v1, the start offset (SPSO) and, from v1, the lag of each share-partition
of a share group (Admin.listShareGroupOffsets; `kafka-share-groups --describe`).

Topics null means every share-partition the group has state for. A partition without state (never fetched
by the group) answers start offset -1, as Kafka does for an uninitialized share-partition. The lag (KIP-1226)
is the records from the start offset to the high watermark less those acknowledged or archived in the
in-flight window (kop/coordinator/share/partition.py). A group id with no share group and no state is
answered GROUP_ID_NOT_FOUND. LeaderEpoch is -1 (share-partition state epochs are not kept).
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse

API_KEY = 90
VERSIONS = (0, 1)
R = DescribeShareGroupOffsetsResponse


async def _partition(ctx: RequestContext, gid: str, name: str, index: int
                     ) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponsePartition:
    P = R.DescribeShareGroupOffsetsResponsePartition
    topic = await ctx.find_topic(name)
    sp = ctx.handler.share.partitions.get((gid, topic.topic_id, index)) if topic is not None else None
    start, lag, error = -1, -1, 0
    try:
        plog = await ctx.partition_log(topic, index)
        if sp is not None:
            start, lag = sp.start_offset, sp.lag(plog.high_watermark)
    except PartitionError as e:
        error = e.code
    return P(partition_index=index, start_offset=start, leader_epoch=-1, lag=lag, error_code=error,
             error_message=None)


async def _group(ctx: RequestContext, g: DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
                 ) -> DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup:
    G, T = R.DescribeShareGroupOffsetsResponseGroup, R.DescribeShareGroupOffsetsResponseTopic
    share = ctx.handler.share
    if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, g.group_id):
        return G(group_id=g.group_id, topics=[], error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                 error_message="The group is not authorized.")
    gid = ctx.names.global_id(g.group_id)
    held = share.group_partitions(gid)
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
        topics.append(T(topic_name=name, topic_id=topic.topic_id if topic is not None else bytes(16), partitions=parts))
    return G(group_id=g.group_id, topics=topics, error_code=0, error_message=None)


async def handle(ctx: RequestContext, req: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    await ctx.handler.share.ready()
    return R(throttle_time_ms=0, groups=[await _group(ctx, g) for g in req.groups])
