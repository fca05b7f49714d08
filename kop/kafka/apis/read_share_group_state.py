"""ReadShareGroupState (key 84): v0 as Apache Kafka 4.4, KIP-932's inter-broker read of share-partition states at
their share coordinator, the broker owning the state's __share_group_state partition
(kop/coordinator/share/store.py). A share-partition leader sends it when it first serves a share-partition
(kop/coordinator/share/persister.py `take_up`; alone, the broker reads its own store by the same rules).

- Per partition (kop/coordinator/share/shard.py, Kafka's ShareCoordinatorShard): INVALID_REQUEST for a
  negative partition or leader epoch, or a share-partition never initialized ("Read operation on
  uninitialized share partition not allowed."); FENCED_LEADER_EPOCH when the recorded leader epoch is higher
  than the request's; else the state (StateEpoch, StartOffset - -1 when initialized without one - and the
  batches), the request's leader epoch recorded first when it is higher (durable before the answer).
- Authorization, coordinator and topic errors: share_state_common.py.
"""

from __future__ import annotations

from kop.coordinator.share.shard import Refused
from kop.kafka.apis.share_state_common import now_ms, refused, share_store
from kop.kafka.context import RequestContext
from kop.protocol.messages import ReadShareGroupStateRequest, ReadShareGroupStateResponse

API_KEY = 84
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    P = R.PartitionResult
    store, allowed = await share_store(ctx)
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            got = refused(ctx, store, allowed, key)
            state = None
            if got is None and store is not None:
                read = await store.read(key, p.leader_epoch, now_ms())
                got, state = (read, None) if isinstance(read, Refused) else (None, read)
            parts.append(P(
                partition=p.partition, error_code=got.error if got else 0, error_message=got.message if got else None,
                state_epoch=state.state_epoch if state is not None else 0,
                start_offset=state.start_offset if state is not None else -1,
                state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                               for f, la, s, c in (state.batches if state is not None else ())]))
        results.append(R.ReadStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
