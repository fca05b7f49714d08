"""WriteShareGroupState (key 85): v0, KIP-932's inter-broker write of share-partition states to their share
coordinator, the broker owning the state's __share_group_state partition (kop/coordinator/share/store.py). In
cluster mode a share-partition leader sends it after each change of a share-partition it leads
(kop/coordinator/share/persister.py); alone, the broker writes its own store and nobody sends it.

- Each partition's state is written as a ShareSnapshot record (the next snapshot epoch of the key), durable
  before the answer. NOT_COORDINATOR when another broker owns the state partition (or it moved during the
  write), COORDINATOR_LOAD_IN_PROGRESS while it loads here; the leader retries.
- How it differs from Kafka 4.4: the request carries the share-partition's whole state (our leaders send it
  so), written as it is; Kafka's share coordinator merges the batches of a write into the state it has
  (a ShareUpdate record). A StartOffset of -1 ("not written") keeps the stored one.
- Authorization (Kafka's): CLUSTER_ACTION on the cluster, else CLUSTER_AUTHORIZATION_FAILED per partition.
"""

from __future__ import annotations

import time

from kop.coordinator.runtime import CoordinatorError, append_error
from kop.coordinator.share.records import ShareState
from kop.coordinator.share.store import ShareStateStore
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import WriteShareGroupStateRequest, WriteShareGroupStateResponse

API_KEY = 85
VERSIONS = (0, 0)


async def _write(store: ShareStateStore, key: tuple[str, bytes, int],
                 p: WriteShareGroupStateRequest.PartitionData) -> int:
    error = store.runtime.error(store.partition_of(key))
    if error:
        return error
    old = store.states.get(key)
    start = p.start_offset if p.start_offset >= 0 else (old.start_offset if old is not None else 0)
    batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)
    state = ShareState(start, batches, old.snapshot_epoch + 1 if old is not None else 0)
    try:
        await store.write(key, state, int(time.time() * 1000))
    except CoordinatorError as e:
        return e.error
    except Exception as e:  # noqa: BLE001 - storage failed: Kafka's mapping, the leader retries
        return append_error(e)
    return 0


async def handle(ctx: RequestContext, req: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    R = WriteShareGroupStateResponse
    store = ctx.handler.share.store
    allowed = authorize.cluster_allowed(ctx, authorize.Op.CLUSTER_ACTION)
    if store is not None and allowed:
        await store.ready()
    results = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if not allowed:
                error: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            elif store is None:
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
            else:
                error = await _write(store, (req.group_id, t.topic_id, p.partition), p)
            parts.append(R.WriteStateResult.PartitionResult(partition=p.partition, error_code=error,
                                                            error_message=None))
        results.append(R.WriteStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
