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

from kop.coordinator.share.shard import Refused
from kop.kafka.apis.share_state_common import now_ms, refused, share_store
from kop.kafka.context import RequestContext
from kop.protocol.messages import InitializeShareGroupStateRequest, InitializeShareGroupStateResponse

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    R = InitializeShareGroupStateResponse
    store, allowed = await share_store(ctx)
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            got = refused(ctx, store, allowed, key)
            if got is None and store is not None:
                done = await store.initialize(key, p.state_epoch, p.start_offset, now_ms())
                got = done if isinstance(done, Refused) else None
            parts.append(R.PartitionResult(partition=p.partition, error_code=got.error if got else 0,
                                           error_message=got.message if got else None))
        results.append(R.InitializeStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
