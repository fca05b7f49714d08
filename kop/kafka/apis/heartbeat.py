"""Heartbeat (key 12): v0-v4.

Kafka's answers: REBALANCE_IN_PROGRESS while the group rebalances (the member must rejoin),
ILLEGAL_GENERATION for another generation, UNKNOWN_MEMBER_ID for an unknown member or group (and for an
Empty group), FENCED_INSTANCE_ID for a static member's old id. While the group's partition is still
loading the answer is NONE, as Kafka answers blindly then (the member's session is restored from the log).
A classic member of a consumer group (KIP-848 online migration) gets REBALANCE_IN_PROGRESS when the group
epoch moved past its member epoch, when it must revoke partitions, or when partitions it waits for were
released; a consumer-protocol member's id is UNKNOWN_MEMBER_ID here.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import HeartbeatRequest, HeartbeatResponse

API_KEY = 12
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: HeartbeatRequest) -> HeartbeatResponse:
    R = HeartbeatResponse
    coordinator = ctx.coordinator
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    error = coordinator.heartbeat(ctx.names.global_id(req.group_id), req.generation_id, req.member_id,
                                  req.group_instance_id if ctx.version >= 3 else None)
    return R(throttle_time_ms=0, error_code=error)
