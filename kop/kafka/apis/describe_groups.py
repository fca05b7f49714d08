"""DescribeGroups (key 15): v0-v6.

- Members carry their metadata and assignment only while the group is Stable (an assignment in the
  middle of a rebalance means nothing); protocol_data is the selected protocol then, "" otherwise. This is
  what kafka-consumer-groups --describe prints from.
- A missing group is described as state Dead with no error before v6; v6 adds GROUP_ID_NOT_FOUND and a
  message (KIP-1043), as Kafka 4.x.
- include_authorized_operations (v3+): from kop/kafka/authorize.py; without an authorizer every group
  operation (READ, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS), as Kafka reports then.
- With ACLs a group the principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED, empty otherwise (Kafka).
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeGroupsRequest, DescribeGroupsResponse

API_KEY = 15
VERSIONS = (0, 6)

NOT_REQUESTED = -2147483648


async def handle(ctx: RequestContext, req: DescribeGroupsRequest) -> DescribeGroupsResponse:
    R = DescribeGroupsResponse
    v = ctx.version
    coordinator = ctx.coordinator
    asked = v >= 3 and bool(req.include_authorized_operations)
    out = []
    for gid in req.groups:
        if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, gid):
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid,
                                        group_state="", protocol_type="", protocol_data="", members=[],
                                        authorized_operations=NOT_REQUESTED))
            continue
        ops = authorize.requested_operations(ctx, asked, authorize.GROUP, gid)
        d = coordinator.describe_group(ctx.names.global_id(gid))
        error, message = d.error, None
        if not d.found and v >= 6:
            error, message = ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found."
        out.append(R.DescribedGroup(
            error_code=error, error_message=message, group_id=gid, group_state=d.state,
            protocol_type=d.protocol_type, protocol_data=d.protocol_data,
            members=[R.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in d.members],
            authorized_operations=ops if not error else NOT_REQUESTED,
        ))
    return R(throttle_time_ms=0, groups=out)
