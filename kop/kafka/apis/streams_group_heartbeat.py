"""StreamsGroupHeartbeat (key 88): v0-v1, KIP-1071's streams group protocol (kop/coordinator/streams/group.py).

Kafka Streams 4.x with `group.protocol=streams` joins (member epoch 0, with its topology and process id),
heartbeats, reconciles its active tasks and leaves with this one request; the coordinator keeps the topology,
creates the internal (repartition and changelog) topics it lacks and computes the assignment (the sticky task
assignor). v1 answers the acceptable recovery lag as an int64 and carries TopologyDescriptionRequired (always
false here: no topology description is kept).

WarmupTasks is always empty, as Kafka 4.4.0's (whose assignment refiner creates none yet: kop/coordinator/streams/
group.py). How it differs from Kafka 4.4 (details there): TaskOffsets/TaskEndOffsets are read but not kept; no IQ
endpoint information (PartitionsByUserEndpoint is null); no source topic regexes. ACLs: READ on the group and DESCRIBE on the source topics (Kafka also asks
CREATE for the internal topics it creates).
"""

from __future__ import annotations

from kop.coordinator.streams.assignor import Tasks
from kop.coordinator.streams.group import StreamsHeartbeat, StreamsResult
from kop.coordinator.streams.topology import Subtopology, TopicInfo, Topology
from kop.kafka import authorize
from kop.kafka.apis.join_group import client_host
from kop.kafka.context import RequestContext
from kop.protocol.messages import StreamsGroupHeartbeatRequest, StreamsGroupHeartbeatResponse

API_KEY = 88
VERSIONS = (0, 1)
ACCEPTABLE_RECOVERY_LAG = 10000  # Kafka's default (the lag below which a warm-up task counts as caught up)
TASK_OFFSET_INTERVAL_MS = 60000  # Kafka's default interval of the members' task offset reports
R = StreamsGroupHeartbeatResponse


def _tasks(wire: list[StreamsGroupHeartbeatRequest.TaskIds] | None) -> Tasks | None:
    if wire is None:
        return None
    return frozenset((t.subtopology_id, p) for t in wire for p in t.partitions)


def _info(ctx: RequestContext, t: StreamsGroupHeartbeatRequest.TopicInfo) -> TopicInfo:
    return TopicInfo(ctx.names.global_name(t.name), t.partitions, t.replication_factor,
                     tuple((kv.key, kv.value) for kv in t.topic_configs))


def _topology(ctx: RequestContext, t: StreamsGroupHeartbeatRequest.Topology | None) -> Topology | None:
    if t is None:
        return None
    g = ctx.names.global_name
    return Topology(t.epoch, tuple(Subtopology(
        subtopology_id=s.subtopology_id,
        source_topics=tuple(g(n) for n in s.source_topics),
        repartition_sink_topics=tuple(g(n) for n in s.repartition_sink_topics),
        state_changelog_topics=tuple(_info(ctx, c) for c in s.state_changelog_topics),
        repartition_source_topics=tuple(_info(ctx, r) for r in s.repartition_source_topics),
        source_topic_regex=tuple(s.source_topic_regex)) for s in t.subtopologies))


def _wire_tasks(tasks: Tasks | None) -> list[StreamsGroupHeartbeatResponse.TaskIds] | None:
    if tasks is None:
        return None
    by: dict[str, list[int]] = {}
    for sub, p in sorted(tasks):
        by.setdefault(sub, []).append(p)
    return [R.TaskIds(subtopology_id=s, partitions=ps) for s, ps in by.items()]


def _request(ctx: RequestContext, req: StreamsGroupHeartbeatRequest) -> StreamsHeartbeat:
    return StreamsHeartbeat(
        group_id=ctx.names.global_id(req.group_id), member_id=req.member_id, member_epoch=req.member_epoch,
        instance_id=req.instance_id, rack_id=req.rack_id, rebalance_timeout_ms=req.rebalance_timeout_ms,
        topology=_topology(ctx, req.topology), active_tasks=_tasks(req.active_tasks), process_id=req.process_id,
        client_tags=None if req.client_tags is None else {kv.key: kv.value for kv in req.client_tags},
        user_endpoint=None if req.user_endpoint is None else (req.user_endpoint.host, req.user_endpoint.port),
        shutdown_application=bool(req.shutdown_application), client_id=ctx.header.client_id or "",
        client_host=client_host(ctx.conn.peer))


async def handle(ctx: RequestContext, req: StreamsGroupHeartbeatRequest) -> StreamsGroupHeartbeatResponse:
    sources = None if req.topology is None else [n for s in req.topology.subtopologies for n in s.source_topics]
    refused = authorize.consumer_heartbeat_refused(ctx, req.group_id, sources)
    if refused is not None:
        result = StreamsResult(refused[0], refused[1], req.member_id, req.member_epoch)
    else:
        result = await ctx.coordinator.streams_group_heartbeat(_request(ctx, req))
    ok = not result.error
    tasks = result.active_tasks if ok else None
    return R(
        throttle_time_ms=0, error_code=result.error, error_message=result.message, member_id=req.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=ctx.config.groupStreamsHeartbeatIntervalMs if ok else 0,
        acceptable_recovery_lag_legacy=ACCEPTABLE_RECOVERY_LAG, task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
        acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG,
        status=None if not ok or result.statuses is None else [
            R.Status(status_code=c, status_detail=d) for c, d in result.statuses],
        active_tasks=_wire_tasks(tasks),
        standby_tasks=_wire_tasks(result.standby_tasks if tasks is not None else None),
        warmup_tasks=None if tasks is None else [],
        topology_description_required=False, endpoint_information_epoch=0, partitions_by_user_endpoint=None)
