"""ReadShareGroupState (key 84): v0, KIP-932's inter-broker read of share-partition states from their share
coordinator, the broker owning the state's __share_group_state partition (kop/coordinator/share/store.py). In
cluster mode a share-partition leader sends it when it first serves a share-partition
(kop/coordinator/share/persister.py); alone, the broker reads its own store and nobody sends it.

- Per partition: NOT_COORDINATOR when another broker owns the key's state partition,
  COORDINATOR_LOAD_IN_PROGRESS while it loads here (Kafka's answers; the leader retries), else the state:
  StartOffset -1 and no batches for a share-partition never written (Kafka's "not initialized").
- StateEpoch and LeaderEpoch: 0 (no state resets or leader epochs here).
- Authorization (Kafka's): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED per partition.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ReadShareGroupStateRequest, ReadShareGroupStateResponse

API_KEY = 84
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    P = R.ReadStateResult.PartitionResult
    store = ctx.handler.share.store
    allowed = authorize.cluster_allowed(ctx, authorize.Op.CLUSTER_ACTION)
    if store is not None and allowed:
        await store.ready()
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            error = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED if not allowed else ErrorCode.COORDINATOR_NOT_AVAILABLE
                     if store is None else store.runtime.error(store.partition_of(key)))
            state = store.states.get(key) if store is not None and not error else None
            parts.append(P(
                partition=p.partition, error_code=error, error_message=None, state_epoch=0,
                start_offset=state.start_offset if state is not None else -1,
                state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                               for f, la, s, c in (state.batches if state is not None else ())]))
        results.append(R.ReadStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
