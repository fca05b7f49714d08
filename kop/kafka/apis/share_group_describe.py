"""ShareGroupDescribe (key 77): v1, what `kafka-share-groups --describe --members` and Admin.describeShareGroups
show: each share group's state, epochs, assignor ("simple") and members with their assignments.

A group id this broker has no share group for is GROUP_ID_NOT_FOUND ("Group g not found.", or "Group g is
not a share group." when a classic or consumer group holds the id), as Kafka 4.4 answers. Cluster mode: a group
coordinated by another broker is NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while its partition loads here),
and one whose partition this broker took over is restored from its records first.
"""

from __future__ import annotations

from kop.coordinator.share.groups import ASSIGNOR
from kop.kafka import authorize
from kop.kafka.apis.share_acknowledge import UNSUPPORTED, share_disabled
from kop.kafka.apis.share_group_heartbeat import other_group
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ShareGroupDescribeRequest, ShareGroupDescribeResponse

API_KEY = 77
VERSIONS = (1, 1)


def _assignment(ctx: RequestContext, parts: dict[bytes, frozenset[int]]) -> ShareGroupDescribeResponse.Assignment:
    R = ShareGroupDescribeResponse
    out = []
    for tid, ps in sorted(parts.items()):
        topic = ctx.topics.get_by_id(tid)
        name = ctx.names.kafka_name(topic.name) if topic is not None else ""
        out.append(R.TopicPartitions(topic_id=tid, topic_name=name, partitions=sorted(ps)))
    return R.Assignment(topic_partitions=out)


async def handle(ctx: RequestContext, req: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    R = ShareGroupDescribeResponse
    share = ctx.handler.share
    await share.groups_ready()  # the groups restored from __consumer_offsets
    out = []
    for gid in req.group_ids:
        def failed(code: int, message: str | None = None, gid: str = gid) -> ShareGroupDescribeResponse.DescribedGroup:
            return R.DescribedGroup(error_code=code, error_message=message, group_id=gid, group_state="",
                                    group_epoch=0, assignment_epoch=0, assignor_name="", members=[])

        if share_disabled(ctx):
            out.append(failed(*UNSUPPORTED))
            continue
        if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, gid):
            out.append(failed(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        global_id = ctx.names.global_id(gid)
        error = ctx.coordinator.partition_error(global_id)
        if error:
            out.append(failed(error))
            continue
        share.restore_group(global_id, ctx.coordinator.share_records)
        group = share.groups.groups.get(global_id)
        if group is None:
            why = "is not a share group" if other_group(ctx, global_id) else "not found"
            out.append(failed(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} {why}."))
            continue
        ops = authorize.requested_operations(ctx, bool(req.include_authorized_operations), authorize.GROUP, gid)
        members = [R.DescribedGroup.Member(
            member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch, client_id=m.client_id,
            client_host=m.client_host, subscribed_topic_names=sorted(ctx.names.client_name(n) for n in m.subscribed),
            assignment=_assignment(ctx, m.assigned)) for m in group.members.values()]
        out.append(R.DescribedGroup(
            error_code=0, group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=ASSIGNOR, members=members,
            authorized_operations=ops))
    return R(throttle_time_ms=0, groups=out)
