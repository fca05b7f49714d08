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

from kop.coordinator.share.shard import Refused, Summary
from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka.apis.share_state_common import Answered, each_partition, error_fields
from kop.kafka.context import RequestContext
from kop.protocol.messages import ReadShareGroupStateSummaryRequest, ReadShareGroupStateSummaryResponse

API_KEY = 87
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    R = ReadShareGroupStateSummaryResponse

    async def summary(store: ShareStateStore, key: Key, p: ReadShareGroupStateSummaryRequest.PartitionData
                      ) -> Refused | Summary:
        return store.summary(key)

    def result(a: Answered[ReadShareGroupStateSummaryRequest.PartitionData, Refused | Summary]
               ) -> ReadShareGroupStateSummaryResponse.PartitionResult:
        got = a.got
        if not isinstance(got, Summary):
            return R.PartitionResult(partition=a.part.partition, **error_fields(got), state_epoch=0, leader_epoch=0,
                                     start_offset=-1, delivery_complete_count=-1)
        return R.PartitionResult(partition=a.part.partition, error_code=0, error_message=None,
                                 state_epoch=got.state_epoch, leader_epoch=got.leader_epoch,
                                 start_offset=got.start_offset, delivery_complete_count=got.delivery_complete_count)

    return R(results=[R.ReadStateSummaryResult(topic_id=tid, partitions=[result(a) for a in parts])
                      for tid, parts in await each_partition(ctx, req, summary)])
