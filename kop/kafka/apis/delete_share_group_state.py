"""DeleteShareGroupState (key 86): v0 as Apache Kafka 4.4, KIP-932's inter-broker RPC that removes
share-partition states at their share coordinator (kop/coordinator/share/store.py): sent for
DeleteShareGroupOffsets (`kafka-share-groups --delete-offsets`) and DeleteGroups of a share group
(kop/coordinator/share/persister.py).

- Each partition: a tombstone of the key's state, durable before the answer; deleting a state that does not
  exist succeeds and writes nothing (Kafka: "Attempted to delete non-existent share partition").
  INVALID_REQUEST for a negative partition. A leader still serving the share-partition is refused its next
  write (INVALID_REQUEST, "Write operation on uninitialized share partition not allowed.") and forgets it.
- Authorization, coordinator and topic errors: share_state_common.py.
"""

from __future__ import annotations

from kop.coordinator.share.shard import Refused
from kop.coordinator.share.store import Key, ShareStateStore
from kop.kafka.apis.share_state_common import each_partition, error_fields, now_ms
from kop.kafka.context import RequestContext
from kop.protocol.messages import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse

    async def delete(store: ShareStateStore, key: Key, p: DeleteShareGroupStateRequest.PartitionData) -> Refused | None:
        return await store.delete(key, now_ms())

    return R(results=[R.DeleteStateResult(topic_id=tid, partitions=[
        R.PartitionResult(partition=a.part.partition, **error_fields(a.got)) for a in parts])
        for tid, parts in await each_partition(ctx, req, delete)])
