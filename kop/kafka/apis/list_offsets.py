"""ListOffsets (key 2): v1-v8.

- -1 latest = high watermark (durable entries only: KoP answered from an in-memory index before the entry
  was persisted and consumers that reset lost records, kop#1512); -2 earliest = log start offset;
  -3 max timestamp (KIP-734) = the first record with the largest timestamp; -4 earliest-local = earliest
  (everything is local here). A timestamp >= 0 gives the first record whose timestamp is >= it, at record
  (not batch) precision, or offset -1 when there is none.
- isolation_level read_committed (v2+): -1 latest = the last stable offset (first offset of the oldest
  open transaction, or the high watermark); a timestamp lookup, like Kafka's, only finds records below
  it (offset -1 otherwise), and so does -3 max timestamp (Kafka's Partition.fetchOffsetForTimestamp).
- v0 (and its max_num_offsets) is gone since Kafka 4.0 and not served.
- v9-v11 name topics by name as before; what they add is about tiered storage, which this broker does not
  have (every offset is local): v9's -5 latest-tiered (KIP-1005) and v11's -6 earliest-pending-upload
  (KIP-1023) answer offset -1, timestamp -1, leader epoch -1, as Kafka answers them for a topic without
  remote storage; v10's timeout_ms (KIP-1075) bounds remote reads and is not needed. Kafka 4.4 clients ask
  at v11.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.common import LEADER_EPOCH
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ListOffsetsRequest, ListOffsetsResponse
from kop.topics.manager import Topic

API_KEY = 2
VERSIONS = (1, 11)

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -1, -2, -3, -4
LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -5, -6  # v9+, v11+: remote storage only


async def handle(ctx: RequestContext, req: ListOffsetsRequest) -> ListOffsetsResponse:
    R = ListOffsetsResponse
    committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    denied = authorize.denied_topics(ctx, authorize.Op.DESCRIBE, (t.name for t in req.topics))
    for t in req.topics:
        if t.name in denied:
            topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=[R.ListOffsetsPartitionResponse(
                partition_index=p.partition_index, error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, timestamp=-1,
                offset=-1, leader_epoch=-1) for p in t.partitions]))
            continue
        topic = await ctx.find_topic(t.name)
        parts = []
        for p in t.partitions:
            parts.append(await _one(ctx, R, topic, p, committed))
        topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


async def _one(ctx: RequestContext, R: type[ListOffsetsResponse], topic: Topic | None,
               p: ListOffsetsRequest.ListOffsetsPartition, committed: bool) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
    def answer(error: int, offset: int = -1, timestamp: int = -1, epoch: int = -1
               ) -> ListOffsetsResponse.ListOffsetsPartitionResponse:
        return R.ListOffsetsPartitionResponse(
            partition_index=p.partition_index, error_code=error, timestamp=timestamp, offset=offset,
            leader_epoch=epoch,
        )

    try:
        plog = await ctx.partition_log(topic, p.partition_index, p.current_leader_epoch)
    except PartitionError as e:
        return answer(e.code)
    ts = p.timestamp
    if committed:
        await plog.load_transactions()
    if ts == LATEST:
        return answer(0, plog.last_stable_offset if committed else plog.high_watermark, -1, LEADER_EPOCH)
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return answer(0, plog.log_start_offset, -1, LEADER_EPOCH)
    if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD) and ctx.version >= (9 if ts == LATEST_TIERED else 11):
        return answer(0, -1, -1, -1)  # nothing is tiered here (Kafka's answer without remote storage)
    if ts == MAX_TIMESTAMP:
        found = await plog.max_timestamp()
        if found is None or (committed and found[0] >= plog.last_stable_offset):
            return answer(0, -1, -1, -1)
        return answer(0, found[0], found[1], LEADER_EPOCH)
    if ts < 0:
        return answer(ErrorCode.INVALID_REQUEST)
    found = await plog.offset_for_timestamp(ts)
    if found is None or (committed and found[0] >= plog.last_stable_offset):
        return answer(0, -1, -1, -1)
    return answer(0, found[0], found[1], LEADER_EPOCH)
