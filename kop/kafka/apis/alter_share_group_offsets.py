"""AlterShareGroupOffsets (key 91): v0, `kafka-share-groups --reset-offsets --execute` (Admin.alterShareGroupOffsets):
each named share-partition of the group starts again at the given offset, nothing in flight.

As Kafka: only a group without members may be altered (else NON_EMPTY_GROUP for the whole request, "The group
is not empty."); an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION for it; the group need not
exist yet (the state is created). An offset outside [log start, high watermark] is clamped into it (in
cluster mode the partition's leader tells them when it is another broker than this group coordinator).
Each share-partition is initialized at its share coordinator (InitializeShareGroupState, a raised state
epoch: kop/coordinator/share/coordinator.py `alter_start`), whichever broker that is; an error there is the
partition's.
"""

from __future__ import annotations

from kop.coordinator.share.persister import PersisterError
from kop.kafka import authorize
from kop.kafka.apis.describe_share_group_offsets import partition_offsets
from kop.kafka.apis.share_acknowledge import UNSUPPORTED, share_disabled
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse

API_KEY = 91
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    R = AlterShareGroupOffsetsResponse
    T, P = R.AlterShareGroupOffsetsResponseTopic, R.AlterShareGroupOffsetsResponsePartition
    share = ctx.handler.share

    def failed(code: int, message: str) -> AlterShareGroupOffsetsResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])

    if share_disabled(ctx):
        return failed(*UNSUPPORTED)
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, "The group is not authorized.")
    gid = ctx.names.global_id(req.group_id)
    await share.ready()
    if share.has_members(gid):
        return failed(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
    out = []
    for t in req.topics:
        topic = await ctx.find_topic(t.topic_name)
        parts = []
        for p in t.partitions:
            if topic is None:
                parts.append(P(partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               error_message=None))
                continue
            error = 0
            try:
                first, last = await partition_offsets(ctx, topic, p.partition_index, start=True)
                offset = min(max(p.start_offset, first), last)
                await share.alter_start((gid, topic.topic_id, p.partition_index), offset)
                share.altered(gid, t.topic_name)
            except PartitionError as e:
                error = e.code
            except PersisterError as e:
                error = e.error
            parts.append(P(partition_index=p.partition_index, error_code=error, error_message=None))
        out.append(T(topic_name=t.topic_name, topic_id=topic.topic_id if topic is not None else bytes(16),
                     partitions=parts))
    await share.flush()
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
