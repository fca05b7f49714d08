"""SyncGroup (key 14): v0-v5.

- The leader's assignment is answered to every member once the group metadata record holding it is
  durable in __consumer_offsets; members missing from it get an empty assignment (as in Kafka).
- v5+ must name the protocol type and name (INCONSISTENT_GROUP_PROTOCOL otherwise, as Kafka's request
  check); any version that names them must match the group's.
- Unknown member or group: UNKNOWN_MEMBER_ID; another generation: ILLEGAL_GENERATION; during a rebalance:
  REBALANCE_IN_PROGRESS; while the group's partition loads: REBALANCE_IN_PROGRESS (the rebalance state is
  gone, the member must rejoin; Kafka answers the same).
- A classic member of a consumer group (KIP-848 online migration) gets the partitions the server-side
  assignor gave it, at its subscription's version; a generation other than its member epoch is
  ILLEGAL_GENERATION, a consumer-protocol member UNKNOWN_MEMBER_ID, and REBALANCE_IN_PROGRESS when the
  group epoch moved past its own (it rejoins), as Kafka 4.x.
- A group metadata record larger than __consumer_offsets' max.message.bytes (huge member metadata or
  assignments) fails the write: every member gets UNKNOWN_SERVER_ERROR and the group rebalances, as Kafka
  maps RECORD_TOO_LARGE.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import SyncGroupRequest, SyncGroupResponse

API_KEY = 14
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: SyncGroupRequest) -> SyncGroupResponse:
    R = SyncGroupResponse
    v = ctx.version
    coordinator = ctx.coordinator
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, assignment=b"")
    if v >= 5 and (req.protocol_type is None or req.protocol_name is None):
        return R(throttle_time_ms=0, error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, assignment=b"")
    result = await coordinator.sync_group(
        ctx.names.global_id(req.group_id), req.generation_id, req.member_id, req.group_instance_id if v >= 3 else None,
        req.protocol_type if v >= 5 else None, req.protocol_name if v >= 5 else None,
        [(a.member_id, bytes(a.assignment)) for a in req.assignments],
    )
    return R(throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
             protocol_name=result.protocol_name, assignment=result.assignment)
