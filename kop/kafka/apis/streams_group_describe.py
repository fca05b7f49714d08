"""StreamsGroupDescribe (key 89): v0-v1 as Kafka 4.4, KIP-1071 streams groups as kafka-streams-groups --describe and the admin
client's describeStreamsGroups read them (kop/coordinator/streams/group.py).

A missing id ("Group g not found.") or a group of another kind ("Group g is not a streams group.") is answered
GROUP_ID_NOT_FOUND, as Kafka 4.4. The topology is the group's (topic names as the client spells them), each
member's Assignment the active and standby tasks it has now, its TargetAssignment the assignor's; warm-up tasks
are empty (Kafka 4.4.0 assigns none either), task offsets are not kept (empty).

v1 adds IncludeTopologyDescription and, per group, TopologyDescription, TopologyDescriptionStatus and
AssignorName. Kafka 4.4's clients push their topology's description to the group coordinator with
StreamsGroupTopologyDescriptionUpdate, which this broker does not serve (its heartbeats never set
TopologyDescriptionRequired), so there is no description to give: the status is NOT_STORED (1) when one was
asked for, NOT_REQUESTED (0) otherwise, the description null. AssignorName is "sticky", the name of Kafka's
StickyTaskAssignor that kop/coordinator/streams/assignor.py follows.
"""

from __future__ import annotations

from kop.coordinator.streams.assignor import Tasks
from kop.coordinator.streams.group import StreamsGroup
from kop.coordinator.streams.topology import TopicInfo
from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import StreamsGroupDescribeRequest, StreamsGroupDescribeResponse

API_KEY = 89
VERSIONS = (0, 1)
R = StreamsGroupDescribeResponse
ASSIGNOR_NAME = "sticky"
#: Kafka 4.4's StreamsGroupDescribeResponse.TOPOLOGY_DESCRIPTION_STATUS_*
STATUS_NOT_REQUESTED, STATUS_NOT_STORED = 0, 1


def _task_ids(tasks: Tasks) -> list[StreamsGroupDescribeResponse.TaskIds]:
    by: dict[str, list[int]] = {}
    for sub, p in sorted(tasks):
        by.setdefault(sub, []).append(p)
    return [R.TaskIds(subtopology_id=s, partitions=ps) for s, ps in by.items()]


def _assignment(active: Tasks, standby: Tasks) -> StreamsGroupDescribeResponse.Assignment:
    return R.Assignment(active_tasks=_task_ids(active), standby_tasks=_task_ids(standby), warmup_tasks=[])


def _info(ctx: RequestContext, t: TopicInfo) -> StreamsGroupDescribeResponse.TopicInfo:
    return R.TopicInfo(name=ctx.names.client_name(t.name), partitions=t.partitions,
                       replication_factor=t.replication_factor,
                       topic_configs=[R.KeyValue(key=k, value=v) for k, v in t.configs])


def _described(ctx: RequestContext, gid: str, group: StreamsGroup, ops: int, with_description: bool
               ) -> StreamsGroupDescribeResponse.DescribedGroup:
    D = R.DescribedGroup
    topology = None
    if group.topology is not None:
        c = ctx.names.client_name
        topology = R.Topology(epoch=group.topology.epoch, subtopologies=[R.Subtopology(
            subtopology_id=s.subtopology_id, source_topics=[c(n) for n in s.source_topics],
            repartition_sink_topics=[c(n) for n in s.repartition_sink_topics],
            state_changelog_topics=[_info(ctx, t) for t in s.state_changelog_topics],
            repartition_source_topics=[_info(ctx, t) for t in s.repartition_source_topics])
            for s in group.topology.subtopologies])
    members = [R.Member(
        member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id, rack_id=m.rack_id,
        client_id=m.client_id, client_host=m.client_host, topology_epoch=m.topology_epoch, process_id=m.process_id,
        user_endpoint=None if m.user_endpoint is None else R.Endpoint(host=m.user_endpoint[0], port=m.user_endpoint[1]),
        client_tags=[R.KeyValue(key=k, value=v) for k, v in sorted(m.client_tags.items())],
        task_offsets=[], task_end_offsets=[], assignment=_assignment(m.assigned, m.standby),
        target_assignment=_assignment(group.targets.get(m.member_id, frozenset()),
                                      group.standby_targets.get(m.member_id, frozenset())), is_classic=False)
        for m in group.members.values()]
    return D(error_code=0, error_message=None, group_id=gid, group_state=group.state, group_epoch=group.group_epoch,
             assignment_epoch=group.assignment_epoch, topology=topology, members=members, authorized_operations=ops,
             topology_description=None, assignor_name=ASSIGNOR_NAME,
             topology_description_status=STATUS_NOT_STORED if with_description else STATUS_NOT_REQUESTED)


async def handle(ctx: RequestContext, req: StreamsGroupDescribeRequest) -> StreamsGroupDescribeResponse:
    out = []
    for gid in req.group_ids:
        if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, gid):
            out.append(R.DescribedGroup(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, group_id=gid,
                                        group_state="", group_epoch=0, assignment_epoch=0, members=[]))
            continue
        ops = authorize.requested_operations(ctx, bool(req.include_authorized_operations), authorize.GROUP, gid)
        error, group, message = ctx.coordinator.streams_group(ctx.names.global_id(gid))
        if group is None:
            out.append(R.DescribedGroup(error_code=error, error_message=message, group_id=gid, group_state="",
                                        group_epoch=0, assignment_epoch=0, members=[]))
            continue
        out.append(_described(ctx, gid, group, ops, ctx.version >= 1 and bool(req.include_topology_description)))
    return R(throttle_time_ms=0, groups=out)
