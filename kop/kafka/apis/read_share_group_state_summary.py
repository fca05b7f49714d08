"""ReadShareGroupStateSummary (key 87): v0-v1 as Apache Kafka 4.4, KIP-932's inter-broker read of a
share-partition state's summary at its share coordinator (kop/coordinator/share/store.py): its StateEpoch,
LeaderEpoch and StartOffset, and from v1 DeliveryCompleteCount (the records of the in-flight window
ACKNOWLEDGED or ARCHIVED). DescribeShareGroupOffsets reads it for the start offset and the lag (high watermark
- start offset - delivery-complete count); AlterShareGroupOffsets for the state epoch to raise; a
share-partition leader for the leader epoch to take the share-partition up above
(kop/coordinator/share/persister.py).

- A share-partition never initialized answers StartOffset -1, epochs 0 and DeliveryCompleteCount -1, as Kafka
  does; INVALID_REQUEST for a negative partition. The request's LeaderEpoch is not checked (as Kafka).
- Authorization, coordinator and topic errors: share_state_common.py.
"""

from __future__ import annotations

from kop.coordinator.share.shard import Refused
from kop.kafka.apis.share_state_common import refused, share_store
from kop.kafka.context import RequestContext
from kop.protocol.messages import ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse

API_KEY = 87
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse
    store, allowed = await share_store(ctx)
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            got = refused(ctx, store, allowed, key) or (store.summary(key) if store is not None else None)
            if isinstance(got, Refused) or got is None:
                parts.append(R.PartitionResult(
                    partition=p.partition, error_code=got.error if got else 0,
                    error_message=got.message if got else None, state_epoch=0, leader_epoch=0, start_offset=-1,
                    delivery_complete_count=-1))
                continue
            parts.append(R.PartitionResult(
                partition=p.partition, error_code=0, error_message=None, state_epoch=got.state_epoch,
                leader_epoch=got.leader_epoch, start_offset=got.start_offset,
                delivery_complete_count=got.delivery_complete_count))
        results.append(R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
