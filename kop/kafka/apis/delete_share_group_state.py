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

from kop.kafka.apis.share_state_common import now_ms, refused, share_store
from kop.kafka.context import RequestContext
from kop.protocol.messages import DeleteShareGroupStateRequest, DeleteShareGroupStateResponse

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    R = DeleteShareGroupStateResponse
    store, allowed = await share_store(ctx)
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            key = (req.group_id, t.topic_id, p.partition)
            got = refused(ctx, store, allowed, key)
            if got is None and store is not None:
                got = await store.delete(key, now_ms())
            parts.append(R.PartitionResult(partition=p.partition, error_code=got.error if got else 0,
                                           error_message=got.message if got else None))
        results.append(R.DeleteStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
