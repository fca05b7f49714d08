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

from kop.coordinator.share.records import ShareState
from kop.coordinator.share.shard import Refused
from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka.apis.share_state_common import Answered, each_partition, error_fields, now_ms
from kop.kafka.context import RequestContext
from kop.protocol.messages import ReadShareGroupStateRequest, ReadShareGroupStateResponse

API_KEY = 84
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    R = ReadShareGroupStateResponse
    P = R.PartitionResult

    async def read(store: ShareStateStore, key: Key, p: ReadShareGroupStateRequest.PartitionData
                   ) -> Refused | ShareState:
        return await store.read(key, p.leader_epoch, now_ms())

    def result(a: Answered[ReadShareGroupStateRequest.PartitionData, Refused | ShareState]
               ) -> ReadShareGroupStateResponse.PartitionResult:
        state = a.got if isinstance(a.got, ShareState) else None
        return P(partition=a.part.partition, **error_fields(a.got),
                 state_epoch=state.state_epoch if state is not None else 0,
                 start_offset=state.start_offset if state is not None else -1,
                 state_batches=[P.StateBatch(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                                for f, la, s, c in (state.batches if state is not None else ())])

    return R(results=[R.ReadStateResult(topic_id=tid, partitions=[result(a) for a in parts])
                      for tid, parts in await each_partition(ctx, req, read)])
