"""ConsumerGroupDescribe (key 69): v0-v1, KIP-848 consumer groups as kafka-consumer-groups --describe and
the admin client's describeConsumerGroups read them.

A missing id ("Group g not found.") or a classic group ("Group g is not a consumer group.") is answered
GROUP_ID_NOT_FOUND, as Kafka 4.x: the admin client then describes a classic group with DescribeGroups. Each member's Assignment is what it owns now,
its TargetAssignment what the assignor wants it to own; topic names are the topics' Kafka names. v1's
MemberType is 0 for a classic-protocol member inside the consumer group (KIP-848 online migration: it
joined with JoinGroup, or was in the classic group the consumer group was converted from), 1 for a
consumer-protocol member, as Kafka 4.x (KIP-1099). include_authorized_operations: from kop/kafka/authorize.py,
as DescribeGroups. With ACLs a group the principal may not DESCRIBE is GROUP_AUTHORIZATION_FAILED without a
message (Kafka).
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse

API_KEY = 69
VERSIONS = (0, 1)


def _assignment(R: type[ConsumerGroupDescribeResponse], ctx: RequestContext, parts: dict[bytes, frozenset[int]]
                ) -> ConsumerGroupDescribeResponse.Assignment:
    out = []
    for tid, ps in sorted(parts.items()):
        topic = ctx.topics.get_by_id(tid)
        name = ctx.names.kafka_name(topic.name) if topic is not None else ""
        out.append(R.TopicPartitions(topic_id=tid, topic_name=name, partitions=sorted(ps)))
    return R.Assignment(topic_partitions=out)


async def handle(ctx: RequestContext, req: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    R = ConsumerGroupDescribeResponse
    coordinator = ctx.coordinator
    out = []
    for gid in req.group_ids:
        if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, gid):
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                        group_id=gid, group_state="", group_epoch=0, assignment_epoch=0,
                                        assignor_name="", members=[]))
            continue
        ops = authorize.requested_operations(ctx, bool(req.include_authorized_operations), authorize.GROUP, gid)
        error, group, message = coordinator.consumer_group(ctx.names.global_id(gid))
        if group is None:
            out.append(R.DescribedGroup(error_code=error, error_message=message, group_id=gid, group_state="",
                                        group_epoch=0, assignment_epoch=0, assignor_name="", members=[]))
            continue
        members = [R.DescribedGroup.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=[ctx.names.client_name(n) for n in m.subscribed_topic_names],
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_assignment(R, ctx, m.assigned),
            target_assignment=_assignment(R, ctx, group.targets.get(m.member_id, {})),
            member_type=0 if m.classic is not None else 1) for m in group.members.values()]
        out.append(R.DescribedGroup(
            error_code=0, group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch, assignor_name=coordinator.consumer.preferred_assignor(group),
            members=members, authorized_operations=ops))
    return R(throttle_time_ms=0, groups=out)
