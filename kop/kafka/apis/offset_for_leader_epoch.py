"""OffsetForLeaderEpoch (key 23): v2-v4, for clients' position validation (KIP-320).

Every partition has had one leader epoch (LEADER_EPOCH) for its whole life, so the end offset of that
epoch is the high watermark; asking for a later epoch gets UNKNOWN_LEADER_EPOCH as a current-epoch check
does in Kafka, and an earlier epoch (none exists) gets epoch -1 / offset -1 (undefined). Follower requests
(replica_id >= 0) are refused: there are no followers.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse

API_KEY = 23
VERSIONS = (2, 4)


async def handle(ctx: RequestContext, req: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    R = OffsetForLeaderEpochResponse
    out = []
    denied = authorize.denied_topics(ctx, authorize.Op.DESCRIBE, (t.topic for t in req.topics))
    for t in req.topics:
        topic = None if t.topic in denied else await ctx.find_topic(t.topic)
        parts = []
        for p in t.partitions:
            def res(err: int, epoch: int = -1, end: int = -1, p: OffsetForLeaderEpochRequest.OffsetForLeaderPartition = p
                    ) -> OffsetForLeaderEpochResponse.EpochEndOffset:
                return R.EpochEndOffset(error_code=err, partition=p.partition, leader_epoch=epoch, end_offset=end)

            if t.topic in denied:
                parts.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue

            if getattr(req, "replica_id", -2) >= 0:
                parts.append(res(ErrorCode.NOT_LEADER_OR_FOLLOWER))
                continue
            try:
                plog = await ctx.partition_log(topic, p.partition, p.current_leader_epoch)
            except PartitionError as e:
                parts.append(res(e.code))
                continue
            if p.leader_epoch > LEADER_EPOCH:
                parts.append(res(0, -1, -1))
            else:
                parts.append(res(0, LEADER_EPOCH, plog.high_watermark))
        out.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=out)
