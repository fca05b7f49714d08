"""What the share coordinator's five RPCs (InitializeShareGroupState 83, ReadShareGroupState 84,
WriteShareGroupState 85, DeleteShareGroupState 86, ReadShareGroupStateSummary 87) check before the share
coordinator's rules (kop/coordinator/share/shard.py) apply, as Kafka 4.4 does:

- Authorization: CLUSTER_ACTION on the cluster (they are inter-broker RPCs), else CLUSTER_AUTHORIZATION_FAILED
  per partition.
- NOT_COORDINATOR when another broker owns the key's __share_group_state partition,
  COORDINATOR_LOAD_IN_PROGRESS while it loads here (the sender retries).
- UNKNOWN_TOPIC_OR_PARTITION for a topic id this broker does not know or a partition beyond its count (Kafka's
  share coordinator checks its metadata image after its own rules; the order only matters to a request that
  is wrong twice).
"""

from __future__ import annotations

import time

from kop.coordinator.share.shard import Refused
from kop.coordinator.share.store import ShareStateStore
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode


async def share_store(ctx: RequestContext) -> tuple[ShareStateStore | None, bool]:
    """The share coordinator's store, loaded, and whether the sender may call it."""
    store = ctx.handler.share.store
    allowed = authorize.cluster_allowed(ctx, authorize.Op.CLUSTER_ACTION)
    if store is not None and allowed:
        await store.ready()
    return store, allowed


def refused(ctx: RequestContext, store: ShareStateStore | None, allowed: bool, key: tuple[str, bytes, int]
            ) -> Refused | None:
    """Why this share-partition's request is answered with an error before the rules apply, or None."""
    if not allowed:
        return Refused(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if store is None:
        return Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    error = store.runtime.error(store.partition_of(key))
    if error:
        return Refused(error, None)
    topic = ctx.topics.get_by_id(key[1])
    if topic is None or key[2] >= topic.partitions:
        return Refused(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
    return None


def now_ms() -> int:
    return int(time.time() * 1000)
