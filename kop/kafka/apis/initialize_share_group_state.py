"""InitializeShareGroupState (key 83): v0 as Apache Kafka 4.4, KIP-932's inter-broker RPC that gives a
share-partition a fresh state at its share coordinator (the broker owning the key's __share_group_state
partition, kop/coordinator/share/store.py): sent when a share-partition is first served
(kop/coordinator/share/persister.py `take_up`, StartOffset -1) and by AlterShareGroupOffsets (the new start
offset, a higher StateEpoch).

- Each partition: a ShareSnapshot with StartOffset and StateEpoch, no batches, the next snapshot epoch,
  durable before the answer. FENCED_STATE_EPOCH when the stored state epoch is higher than the request's;
  INVALID_REQUEST for a negative partition or state epoch (kop/coordinator/share/shard.py).
- Authorization, coordinator and topic errors: share_state_common.py.
- How it differs from Kafka 4.4: Kafka's group coordinator sends it when it assigns a share-partition
  (StateEpoch: the group epoch); here the share-partition leader sends it when it first serves one.
"""

from __future__ import annotations

from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka.apis.share_state_common import each_partition, error_fields, now_ms
from kop.kafka.context import RequestContext
from kop.protocol.messages import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse

    async def initialize(store: ShareStateStore, key: Key, p: InitializeShareGroupStateRequest.PartitionData) -> object:
        return await store.initialize(key, p.state_epoch, p.start_offset, now_ms())

    return R(results=[R.InitializeStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=a.part.partition, **error_fields(a.got)) for a in parts])
        for tid, parts in await each_partition(ctx, req, initialize)])
