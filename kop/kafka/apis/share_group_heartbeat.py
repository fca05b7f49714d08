"""ShareGroupHeartbeat (key 76): v1, KIP-932's share group membership (kop/coordinator/share/groups.py).

Kafka 4.4's KafkaShareConsumer joins (member epoch 0, with its own member id and its subscription), heartbeats
and leaves (-1) with this request; the answer carries the member epoch and, when it changed, the assignment:
every partition of the subscribed topics (share-partitions are read by all their members at once).
v0 was Kafka 4.0's early access and is not served (Kafka 4.1+ does not either).

The membership is durable: the share-group records that changed (Kafka's, in __consumer_offsets:
kop/coordinator/share/group_records.py) are written before the answer, so a restarted broker knows the members
and their epochs and they go on heartbeating.

With share.version finalized at 0 (UpdateFeatures), share groups are off and the share-group APIs answer
UNSUPPORTED_VERSION, as Kafka's (share_acknowledge.share_disabled).

Cluster mode: the group is served by the owner of its __consumer_offsets partition (FindCoordinator's answer);
elsewhere NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while it loads. A coordinator that took the partition
over restores the group from its records at the first heartbeat, so members keep their ids and epochs.

How it differs from Kafka 4.4: a group id used by a classic or consumer
group is answered GROUP_ID_NOT_FOUND as Kafka does ("Group ... is not a share group."). No ACLs (GROUP READ /
TOPIC DESCRIBE) are checked beyond the group's.
"""

from __future__ import annotations

from kop.coordinator.share.groups import ShareHeartbeat
from kop.kafka import authorize
from kop.kafka.apis.join_group import client_host
from kop.kafka.apis.share_acknowledge import UNSUPPORTED, share_disabled
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

API_KEY = 76
VERSIONS = (1, 1)
#: Kafka's messages of the coordinator errors (Errors.X.message())
_COORDINATOR_MESSAGES: dict[int, str] = {
    ErrorCode.NOT_COORDINATOR: "This is not the correct coordinator.",
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: "The coordinator is loading and hence can't process requests.",
}


def other_group(ctx: RequestContext, group_id: str) -> bool:
    """Whether a classic or consumer group holds this id (group ids are one namespace, as in Kafka)."""
    coordinator = ctx.coordinator
    classic = coordinator.groups.get(group_id)
    return group_id in coordinator.consumer_groups or (classic is not None and bool(classic.members))


async def handle(ctx: RequestContext, req: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    R = ShareGroupHeartbeatResponse
    share = ctx.handler.share
    gid = ctx.names.global_id(req.group_id)

    def refuse(code: int, message: str) -> ShareGroupHeartbeatResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, member_id=None, member_epoch=0,
                 heartbeat_interval_ms=0, assignment=None)

    if share_disabled(ctx):
        return refuse(*UNSUPPORTED)
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return refuse(ErrorCode.GROUP_AUTHORIZATION_FAILED, "The group is not authorized.")
    if other_group(ctx, gid):
        return refuse(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a share group.")
    await share.groups_ready()  # the groups restored from __consumer_offsets
    error = ctx.coordinator.partition_error(gid)
    if error:  # cluster mode: another broker coordinates the group, or its partition is loading here
        return refuse(error, _COORDINATOR_MESSAGES.get(error, "The coordinator is not available."))
    share.restore_group(gid, ctx.coordinator.share_records)
    names = req.subscribed_topic_names
    result = share.heartbeat(ShareHeartbeat(
        group_id=gid, member_id=req.member_id, member_epoch=req.member_epoch, rack_id=req.rack_id,
        subscribed_topic_names=None if names is None else [ctx.names.global_name(n) for n in names],
        client_id=ctx.header.client_id or "", client_host=client_host(ctx.conn.peer)))
    await share.flush()  # the membership records that changed, durable before the answer
    if result.error:
        return refuse(result.error, result.error_message or "")
    assignment = None
    if result.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.TopicPartitions(topic_id=tid, partitions=sorted(ps)) for tid, ps in sorted(result.assignment.items())])
    return R(throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
             member_epoch=result.member_epoch, heartbeat_interval_ms=share.groups.heartbeat_interval_ms,
             assignment=assignment)
