"""FindCoordinator (key 10): v0-v6; v4+ carries a batch of keys and answers each one.

- GROUP keys: this broker, at the endpoint of the listener the request came in on. It owns every
  partition of __consumer_offsets, so it coordinates every group. As in Kafka, the answer does not wait
  for the group's partition to be loaded: JoinGroup and the other group APIs say
  COORDINATOR_LOAD_IN_PROGRESS until it is. Kafka creates __consumer_offsets on the first FindCoordinator
  and answers COORDINATOR_NOT_AVAILABLE meanwhile; here the topic exists from start-up, so clients never
  see that first failure.
- TRANSACTION keys (type 1) and SHARE keys (type 2, v6): INVALID_REQUEST, because there is no
  transaction or share-group coordinator. Kafka would answer with a coordinator; a retriable
  COORDINATOR_NOT_AVAILABLE would make a transactional producer retry until max.block.ms, while this
  non-retriable error fails it at once (InitProducerId refuses transactional ids for the same reason).
- An unknown key type fails the whole request with INVALID_REQUEST, as Kafka does.
- error_message is "NONE" on success, like Kafka's Errors.NONE.message().
"""

from __future__ import annotations

from typing import Any

from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 10
VERSIONS = (0, 6)

GROUP, TRANSACTION, SHARE = 0, 1, 2


async def handle(conn: Any, header: Any, req: Any) -> Any:
    R = api_info(API_KEY).response_class
    h = conn.handler
    node = h.node_for(conn.listener_name)
    coordinator = h.service.coordinator
    key_type = req.key_type if header.api_version >= 1 else GROUP

    def answer(key: str) -> tuple[int, str]:
        if key_type == GROUP:
            if coordinator is None or not coordinator.available:
                return ErrorCode.COORDINATOR_NOT_AVAILABLE, "The group coordinator is not available."
            return 0, "NONE"
        if key_type == TRANSACTION:
            return ErrorCode.INVALID_REQUEST, "Transactions are not supported by this broker."
        if key_type == SHARE and header.api_version >= 6:
            return ErrorCode.INVALID_REQUEST, "Share groups are not supported by this broker."
        return ErrorCode.INVALID_REQUEST, f"Unknown coordinator type {key_type}."

    if header.api_version >= 4:
        coordinators = []
        for key in req.coordinator_keys:
            err, msg = answer(key)
            coordinators.append(R.Coordinator(
                key=key, node_id=node.node_id if not err else -1, host=node.host if not err else "",
                port=node.port if not err else -1, error_code=err, error_message=msg))
        return R(throttle_time_ms=0, coordinators=coordinators)
    err, msg = answer(req.key)
    return R(
        throttle_time_ms=0, error_code=err, error_message=msg,
        node_id=node.node_id if not err else -1, host=node.host if not err else "", port=node.port if not err else -1,
    )
