"""WriteShareGroupState (key 85): v0, KIP-932's inter-broker write of share-partition states to their share
coordinator, the broker owning the state's __share_group_state partition (kop/coordinator/share/store.py). In
cluster mode a share-partition leader sends it after each change of a share-partition it leads
(kop/coordinator/share/persister.py); alone, the broker writes its own store and nobody sends it.

- Each partition's state is written as a ShareSnapshot record (the next snapshot epoch of the key), durable
  before the answer. NOT_COORDINATOR when another broker owns the state partition (or it moved during the
  write), COORDINATOR_LOAD_IN_PROGRESS while it loads here; the leader retries.
- How it differs from Kafka 4.4: v0 only (Kafka 4.4 serves v0-1; v1 adds DeliveryCompleteCount, which our
  leaders do not send). The request carries the share-partition's whole state (our leaders send it
  so), written as it is; Kafka's share coordinator merges the batches of a write into the state it has
  (a ShareUpdate record). A StartOffset of -1 ("not written") keeps the stored one.
- A state Kafka's records could not hold, or that this broker would have to walk offset by offset when a
  leader takes it up (kop/coordinator/share/partition.py keeps the window per offset), is INVALID_REQUEST:
  StartOffset below -1, a batch with FirstOffset > LastOffset or below the start offset, a delivery state
  other than 0/2/4 (AVAILABLE / ACKNOWLEDGED / ARCHIVED), a negative delivery count, or batches reaching more
  than MAX_STATE_SPAN offsets past the start (a leader's window holds at most 2000 in-flight records; the rest
  would be a hostile request). Kafka's share coordinator keeps batches as ranges and has no such bound.
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
MAX_STATE_SPAN = 1 << 16
_STATES = (0, 2, 4)


def _invalid(start: int, p: WriteShareGroupStateRequest.PartitionData) -> str | None:
    """Why the state cannot be taken (module docstring), or None."""
    if p.start_offset < -1:
        return f"Invalid start offset {p.start_offset}."
    for b in p.state_batches:
        if not start <= b.first_offset <= b.last_offset or b.last_offset - start >= MAX_STATE_SPAN:
            return f"Invalid state batch {b.first_offset}-{b.last_offset} for start offset {start}."
        if b.delivery_state not in _STATES or b.delivery_count < 0:
            return f"Invalid delivery state {b.delivery_state} / count {b.delivery_count}."
    return None


async def _write(store: ShareStateStore, key: tuple[str, bytes, int],
                 p: WriteShareGroupStateRequest.PartitionData) -> tuple[int, str | None]:
    error = store.runtime.error(store.partition_of(key))
    if error:
        return error, None
    old = store.states.get(key)
    start = p.start_offset if p.start_offset >= 0 else (old.start_offset if old is not None else 0)
    invalid = _invalid(start, p)
    if invalid is not None:
        return ErrorCode.INVALID_REQUEST, invalid
    batches = tuple((b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches)
    state = ShareState(start, batches, old.snapshot_epoch + 1 if old is not None else 0)
    try:
        await store.write(key, state, int(time.time() * 1000))
    except CoordinatorError as e:
        return e.error, None
    except Exception as e:  # noqa: BLE001 - storage failed: Kafka's mapping, the leader retries
        return append_error(e), None
    return 0, None


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
            error: tuple[int, str | None] = (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
            if allowed:
                error = ((ErrorCode.COORDINATOR_NOT_AVAILABLE, None) if store is None
                         else await _write(store, (req.group_id, t.topic_id, p.partition), p))
            parts.append(R.WriteStateResult.PartitionResult(partition=p.partition, error_code=error[0],
                                                            error_message=error[1]))
        results.append(R.WriteStateResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)
