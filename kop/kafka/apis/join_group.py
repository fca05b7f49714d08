"""JoinGroup (key 11): v0-v9, Kafka's classic group protocol (kop/coordinator).

- v4+: a first join without a member id is answered MEMBER_ID_REQUIRED with a generated id (KIP-394),
  exactly as Kafka 4.x; v0-v3 joins get their id in the normal answer. KoP never did this.
- v5+: static membership (group.instance.id, KIP-345), honoured: KoP ignored the field.
- Session timeouts outside groupMinSessionTimeoutMs..groupMaxSessionTimeoutMs get INVALID_SESSION_TIMEOUT;
  an empty group id INVALID_GROUP_ID. v0 has no rebalance timeout: the session timeout stands in, as in
  Kafka.
- The member's host is the client's address written as Java's InetAddress.toString() ("/127.0.0.1"),
  which is what kafka-consumer-groups prints in its HOST column against Kafka.
- The answer waits (parked) until the join phase of the rebalance completes.
- A consumer group with members (KIP-848) takes a classic consumer as one of its classic members (online
  migration, kop/coordinator/consumer_group.py): answered at once, once its records are durable, with
  its member epoch as generation, its first protocol, no leader and no member list (the assignment comes
  from the server-side assignor through SyncGroup); another protocol type gets INCONSISTENT_GROUP_PROTOCOL.
"""

from __future__ import annotations

from kop.coordinator.coordinator import JoinRequest
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import JoinGroupRequest, JoinGroupResponse

API_KEY = 11
VERSIONS = (0, 9)


def client_host(peer: str) -> str:
    """"/ip" from the connection's "ip:port" (Kafka's RequestContext.clientAddress().toString())."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host.strip("[]")


async def handle(ctx: RequestContext, req: JoinGroupRequest) -> JoinGroupResponse:
    R = JoinGroupResponse
    v = ctx.version
    coordinator = ctx.coordinator
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, generation_id=-1, protocol_type=None,
                 protocol_name=None if v >= 7 else "", leader="", skip_assignment=False, member_id="", members=[])
    result = await coordinator.join_group(JoinRequest(
        group_id=ctx.names.global_id(req.group_id),
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if v >= 5 else None,
        protocol_type=req.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in req.protocols],
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx.conn.peer),
        api_version=v,
        reason=req.reason if v >= 8 else None,
    ))
    protocol_name = result.protocol_name
    if v < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return R(
        throttle_time_ms=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=protocol_name,
        leader=result.leader,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=[R.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                 for mid, iid, meta in result.members],
    )
