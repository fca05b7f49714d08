"""WriteShareGroupState (key 85): v0 as Apache Kafka 4.4 (which also serves v1), KIP-932's inter-broker write of
share-partition states to their share coordinator, the broker owning the state's __share_group_state
partition (kop/coordinator/share/store.py). A share-partition leader sends it after each change of a
share-partition it leads (kop/coordinator/share/persister.py; alone, the broker writes its own store by the
same rules).

- Per partition (kop/coordinator/share/shard.py, Kafka's ShareCoordinatorShard): INVALID_REQUEST for a
  negative partition, leader epoch or state epoch, or a share-partition never initialized ("Write operation
  on uninitialized share partition not allowed."); FENCED_LEADER_EPOCH when the recorded leader epoch is
  higher than the request's (a leader that lost the share-partition), FENCED_STATE_EPOCH when the stored state
  epoch is (its offsets were reset since); else a ShareSnapshot with the request's epochs, durable before the
  answer.
- How it differs from Kafka 4.4: v0 only (v1 adds DeliveryCompleteCount, which the share coordinator here
  counts from the batches). The request carries the share-partition's whole state (our leaders send it so),
  written as it is; Kafka's share coordinator merges the batches of a write into the state it has (a
  ShareUpdate record). A StartOffset of -1 keeps the stored one. A state this broker's leaders could not walk
  (shard.py `_invalid_state`: batches below the start offset, unknown delivery states, more than
  MAX_STATE_SPAN offsets) is INVALID_REQUEST; Kafka keeps batches as ranges and has no such bound.
- Authorization, coordinator and topic errors: share_state_common.py.
"""

from __future__ import annotations

from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka.apis.share_state_common import each_partition, error_fields, now_ms
from kop.kafka.context import RequestContext
from kop.protocol.messages import WriteShareGroupStateRequest, WriteShareGroupStateResponse

API_KEY = 85
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse

    async def write(store: ShareStateStore, key: Key, p: WriteShareGroupStateRequest.PartitionData) -> object:
        batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)
        return await store.write_state(key, p.state_epoch, p.leader_epoch, p.start_offset, batches, now_ms())

    return R(results=[R.WriteStateResult(topic_id=tid, partitions=[
        R.WriteStateResult.PartitionResult(partition=a.part.partition, **error_fields(a.got)) for a in parts])
        for tid, parts in await each_partition(ctx, req, write)])
