"""FindCoordinator (key 10): v0-v6; v4+ carries a batch of keys and answers each one.

- GROUP keys: the owner of the group's __consumer_offsets partition, at the endpoint of the listener the
  request came in on. Alone, that is this broker (it owns every partition); in cluster mode it is the
  owner of the partition's namespace bundle (kop/cluster/ownership.py) - acquisition is triggered and
  awaited briefly when the partition has no owner, and the key gets COORDINATOR_NOT_AVAILABLE (retriable:
  clients ask again) if it still has none. As in Kafka, the answer does not wait
  for the group's partition to be loaded: JoinGroup and the other group APIs say
  COORDINATOR_LOAD_IN_PROGRESS until it is. Kafka creates __consumer_offsets on the first FindCoordinator
  and answers COORDINATOR_NOT_AVAILABLE meanwhile; here the topic exists from start-up, so clients never
  see that first failure.
- TRANSACTION keys (type 1): the owner of the transactional id's __transaction_state partition
  (kop/coordinator/transactions/), found the same way; COORDINATOR_NOT_AVAILABLE while the transaction
  coordinator is not running.
- SHARE keys (type 2, v6): the share coordinator of a share-partition (keys "group:topicId:partition", what
  Kafka's brokers ask for __share_group_state). Alone, this broker keeps every share-partition's state
  (kop/coordinator/share), so it is the answer; in cluster mode it is the owner of the key's
  __share_group_state partition (the topic created on first use), found as for the other key types - the
  broker our share-partition leaders read and write the state at (kop/coordinator/share/persister.py).
  Share consumers find their group's coordinator with GROUP keys.
- An unknown key type fails the whole request with INVALID_REQUEST, as Kafka does.
- error_message is "NONE" on success, like Kafka's Errors.NONE.message().
- A tenant login's keys are hashed as their global ids (kop/topics/scope.py: its group `g` is `A/ns/g`),
  the ids every other group and transaction API gives the coordinators; keys are echoed as asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from kop.kafka import authorize
from kop.kafka.apis.metadata import METADATA_OWNER_WAIT
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import FindCoordinatorRequest, FindCoordinatorResponse

if TYPE_CHECKING:
    from kop.kafka.handler import Node
    from kop.topics.manager import Topic

API_KEY = 10
VERSIONS = (0, 6)

GROUP, TRANSACTION, SHARE = 0, 1, 2


class _Coordinator(Protocol):
    """What this API asks of the group and the transaction coordinator."""

    @property
    def topic(self) -> Topic | None:
        """Its internal topic, once loaded."""

    @property
    def available(self) -> bool: ...

    def partition_of(self, key: str) -> int: ...


async def handle(ctx: RequestContext, req: FindCoordinatorRequest) -> FindCoordinatorResponse:
    R = FindCoordinatorResponse
    h = ctx.handler
    node = h.node_for(ctx.listener_name)
    key_type = req.key_type if ctx.version >= 1 else GROUP
    own = ctx.services.ownership
    coordinator: _Coordinator | None = ctx.coordinator if key_type == GROUP else ctx.services.transactions
    clustered_share = key_type == SHARE and ctx.version >= 6 and own.clustered  # else answered by this broker
    if key_type == SHARE:
        coordinator = None
        if clustered_share and h.share.store is not None:
            await h.share.store.ready()  # the share coordinator's topic, created on first use
            coordinator = h.share.store.runtime
    keys = list(req.coordinator_keys) if ctx.version >= 4 else [req.key]
    owners: dict[str, Node | None] = {}  # key -> coordinator node (cluster mode)
    if own.clustered and coordinator is not None and coordinator.topic is not None:
        topic = coordinator.topic

        names = ctx.names  # the partition is the global id's (a tenant's `g` is another group than `g`)

        def locate() -> bool:
            for key in keys:
                owners[key] = h.leader_node(topic.name, coordinator.partition_of(names.global_id(key)),
                                            ctx.listener_name)
            return all(n is not None for n in owners.values())

        if not locate():
            await own.wait_owned([(topic.name, coordinator.partition_of(names.global_id(k))) for k in keys],
                                 METADATA_OWNER_WAIT)
            locate()

    def answer(key: str) -> tuple[int, str, Node | None]:
        """(error, message, coordinator node) for one key."""
        refused = authorize.coordinator_refused(ctx, key_type, key)
        if refused is not None:
            return refused[0], refused[1], None
        if key_type in (GROUP, TRANSACTION) or clustered_share:
            if coordinator is None or not coordinator.available:
                what = {GROUP: "group", TRANSACTION: "transaction"}.get(key_type, "share")
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, f"The {what} coordinator is not available.", None
            if own.clustered:
                found = owners.get(key)
                if found is None:
                    return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", None
                return 0, "NONE", found
            return 0, "NONE", node
        if key_type == SHARE and ctx.version >= 6:
            return 0, "NONE", node
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}.", None

    if ctx.version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            err, msg, n = answer(key)
            coordinators.append(R.Coordinator(
                key=key, node_id=n.node_id if n else -1, host=n.host if n else "",
                port=n.port if n else -1, error_code=err, error_message=msg))
        return R(throttle_time_ms=0, coordinators=coordinators)
    err, msg, n = answer(req.key)
    return R(
        throttle_time_ms=0, error_code=err, error_message=msg,
        node_id=n.node_id if n else -1, host=n.host if n else "", port=n.port if n else -1,
    )
