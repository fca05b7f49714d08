"""LeaveGroup (key 13): v0-v5.

- v3+ removes a batch of members, each by member id or, with an empty member id, by group instance id
  (administrative removal of a static member, KIP-345), and answers per member: UNKNOWN_MEMBER_ID or
  FENCED_INSTANCE_ID for that member only, the others still leave. KoP answered one error for the whole
  request.
- v0-v2 name one member; the answer is that member's error (Kafka's rule for the old single-error shape).
- To a consumer group (KIP-848), the named members are fenced whatever protocol they use; when only
  classic members are left the group becomes classic again (online migration).
- The group rebalances at once (the remaining members learn it from their next heartbeat); a leaving
  member parked in JoinGroup gets UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import LeaveGroupRequest, LeaveGroupResponse

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: LeaveGroupRequest) -> LeaveGroupResponse:
    R = LeaveGroupResponse
    v = ctx.version
    coordinator = ctx.coordinator
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    members: list[tuple[str, str | None, str | None]]
    if v < 3:
        members = [(req.member_id, None, None)]
    else:
        members = [(m.member_id, m.group_instance_id, m.reason if v >= 5 else None) for m in req.members]
    error, results = coordinator.leave_group(ctx.names.global_id(req.group_id), members)
    if v < 3:
        if not error:
            error = next((e for _, _, e in results if e), 0)
        return R(throttle_time_ms=0, error_code=error)
    return R(
        throttle_time_ms=0,
        error_code=error,
        members=[R.MemberResponse(member_id=mid, group_instance_id=iid, error_code=e) for mid, iid, e in results],
    )
