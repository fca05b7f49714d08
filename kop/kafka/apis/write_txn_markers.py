"""WriteTxnMarkers (key 27): v1.

The transaction coordinator's request to a partition leader: write the COMMIT or ABORT marker (a control
batch) of a producer's transaction into each listed partition (kop/offset/partition_log.py
`write_txn_marker`, through the partition seam kop/topics/partition.py). In one process the coordinator calls the partition log directly; this API serves
what arrives over the wire: a coordinator on another broker (cluster mode) and
`kafka-transactions.sh abort` (KIP-664), which sends it straight to the partition leader.

- v0 is gone since Kafka 4.0; v2 (KIP-1228, TransactionVersion for transaction.version 2) is not
  advertised, like transaction.version 2 itself.
- Per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER (cluster mode, not ours),
  TRANSACTION_COORDINATOR_FENCED (a coordinator epoch older than the partition saw for the producer),
  INVALID_PRODUCER_EPOCH (an older producer epoch), KAFKA_STORAGE_ERROR when the append fails. A marker
  for a producer the partition never saw is written (Kafka writes it even when the transaction put no
  data there); it takes one offset.
- Markers into `__consumer_offsets` also reach the group coordinator (its `complete_transaction`, when it
  has one) so pending transactional offsets become visible or are dropped, as in Kafka.
- Authorization (Kafka's): ALTER or CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED on
  every partition of the request.
"""

from __future__ import annotations

import asyncio
import logging

from kop.kafka.authorize import txn_marker_writer_allowed
from kop.kafka.context import PartitionError, RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from kop.topics.manager import Topic
from kop.topics.names import OFFSETS_TOPIC
from kop.topics.write_rules import AppendRefused

log = logging.getLogger(__name__)

API_KEY = 27
VERSIONS = (1, 1)


async def handle(ctx: RequestContext, req: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
    R = WriteTxnMarkersResponse
    results = []
    may_write = txn_marker_writer_allowed(ctx)
    for m in req.markers:
        topics = []
        for t in m.topics:
            if not may_write:
                topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                    R.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(
                        partition_index=i, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                    for i in t.partition_indexes]))
                continue
            topic = await ctx.find_topic(t.name)
            codes = await asyncio.gather(*(
                _write(ctx, topic, t.name, i, m.producer_id, m.producer_epoch, m.transaction_result,
                       m.coordinator_epoch) for i in t.partition_indexes))
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=[
                R.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult(partition_index=i, error_code=c)
                for i, c in zip(t.partition_indexes, codes, strict=True)]))
        results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return R(markers=results)


async def _write(ctx: RequestContext, topic: Topic | None, name: str, partition: int, producer_id: int, epoch: int,
                 commit: bool, coordinator_epoch: int) -> int:
    try:
        if topic is None or not 0 <= partition < topic.partitions:
            raise PartitionError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        seam = await ctx.partition(topic, partition)
        await seam.write_txn_marker(producer_id, epoch, commit, coordinator_epoch)
    except PartitionError as e:
        return int(e.code)
    except AppendRefused as e:
        return int(ErrorCode[e.error])
    except Exception as e:  # noqa: BLE001 - the append failed: the coordinator retries the marker
        log.warning("%s marker for producer %d into %s-%d failed: %r", "COMMIT" if commit else "ABORT",
                    producer_id, name, partition, e)
        return int(ErrorCode.KAFKA_STORAGE_ERROR)
    if topic is not None and topic.internal and topic.name.local == OFFSETS_TOPIC:
        complete = getattr(ctx.coordinator, "complete_transaction", None)
        if complete is not None:
            complete(partition, producer_id, commit)
    return 0
