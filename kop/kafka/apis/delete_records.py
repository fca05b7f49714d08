"""DeleteRecords (key 21): v0-v2.

Moves the log start offset to the requested offset (-1 = the high watermark); whole ledgers entirely below
it are released. An offset above the high watermark gets OFFSET_OUT_OF_RANGE; the answer carries the new
low watermark (log start offset). A fetch below it then gets OFFSET_OUT_OF_RANGE, as in Kafka.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteRecordsRequest, DeleteRecordsResponse

API_KEY = 21
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, req: DeleteRecordsRequest) -> DeleteRecordsResponse:
    R = DeleteRecordsResponse
    out = []
    denied = authorize.denied_topics(ctx, authorize.Op.DELETE, (t.name for t in req.topics))
    for t in req.topics:
        topic = await ctx.find_topic(t.name) if t.name not in denied else None
        parts = []
        for p in t.partitions:
            def res(err: int, low: int = -1, p: DeleteRecordsRequest.DeleteRecordsPartition = p
                    ) -> DeleteRecordsResponse.DeleteRecordsPartitionResult:
                return R.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=low, error_code=err)

            if t.name in denied:
                parts.append(res(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue

            try:
                plog = await ctx.partition_log(topic, p.partition_index)
            except PartitionError as e:
                parts.append(res(e.code))
                continue
            offset = plog.high_watermark if p.offset == -1 else p.offset
            if offset < 0 or offset > plog.high_watermark:
                parts.append(res(ErrorCode.OFFSET_OUT_OF_RANGE))
                continue
            low = await plog.delete_records(offset)
            parts.append(res(0, low))
        out.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=out)
