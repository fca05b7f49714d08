"""DescribeProducers (key 61): v0 (KIP-664; `kafka-transactions.sh describe-producers` and `find-hanging`).

The active producers of each listed partition, from its producer state (kop/offset/producer_state.py):
producer id, epoch (int32 on this wire, int16 everywhere else), last sequence, last timestamp,
coordinator epoch, and the first offset of the producer's open transaction (-1 without one).

- Per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (cluster mode, not ours), else NONE.
- Producers forgotten by producerIdExpirationMs are not listed (Kafka's behaviour too); one with an open
  transaction is never forgotten.
- Authorization (Kafka's): READ on the topic, else TOPIC_AUTHORIZATION_FAILED on each of its partitions,
  before the existence check.
"""

from __future__ import annotations

from kop.kafka.authorize import MESSAGES, Op, denied_topics
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeProducersRequest, DescribeProducersResponse
from kop.topics.manager import Topic

API_KEY = 61
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DescribeProducersRequest) -> DescribeProducersResponse:
    R = DescribeProducersResponse
    topics = []
    denied = denied_topics(ctx, Op.READ, (t.name for t in req.topics))
    for t in req.topics:
        if t.name in denied:
            P = R.TopicResponse.PartitionResponse
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            topics.append(R.TopicResponse(name=t.name, partitions=[P(
                partition_index=i, error_code=code, error_message=MESSAGES[code], active_producers=[])
                for i in t.partition_indexes]))
            continue
        topic = await ctx.find_topic(t.name)
        parts = [await _partition(ctx, R, topic, i) for i in t.partition_indexes]
        topics.append(R.TopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)


async def _partition(ctx: RequestContext, R: type[DescribeProducersResponse], topic: Topic | None, index: int
                     ) -> DescribeProducersResponse.PartitionResponse:
    P = R.TopicResponse.PartitionResponse
    try:
        plog = await ctx.partition_log(topic, index)
    except PartitionError as e:
        return P(partition_index=index, error_code=e.code, error_message=e.message, active_producers=[])
    table = await plog.producer_state()
    ongoing = table.ongoing
    completing = {pid: first for pid, first in table.completing.values()}
    active = []
    for pid, entry in sorted(table.producers.items()):
        first = ongoing.get(pid, completing.get(pid, -1))
        active.append(P.ProducerState(
            producer_id=pid, producer_epoch=entry.epoch, last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=first))
    return P(partition_index=index, error_code=0, error_message=None, active_producers=active)
