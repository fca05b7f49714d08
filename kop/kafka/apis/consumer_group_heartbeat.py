"""ConsumerGroupHeartbeat (key 68): v0-v1, KIP-848's consumer group protocol (kop/coordinator/consumer_group.py).

Java 4.x and librdkafka 2.12+ consumers with `group.protocol=consumer` join, heartbeat, reconcile and leave
with this one request; the coordinator computes the assignment (server-side assignors `uniform` and
`range`, groupConsumerAssignors). v1 adds SubscribedTopicRegex and requires the client to make its member
id (KIP-1082); librdkafka and franz-go use the protocol only when v1 is advertised.

How it differs from Kafka 4.x (details in kop/coordinator/consumer_group.py): regexes are resolved at each
heartbeat rather than by a background task; a heartbeat joining a classic group that has members
upgrades it to a consumer group (KIP-848 online migration, groupConsumerMigrationPolicy), or gets
GROUP_ID_NOT_FOUND with Kafka's reason when it may not; no ACLs, so no TOPIC_/GROUP_AUTHORIZATION_FAILED. Subscribed topic names in any of KoP's
spellings are stored as their Kafka names, so they match the topics the assignment is computed from.
"""

from __future__ import annotations

from kop.coordinator.consumer_group import HeartbeatRequest
from kop.kafka import authorize
from kop.kafka.apis.join_group import client_host
from kop.kafka.context import RequestContext
from kop.protocol.messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse

API_KEY = 68
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    R = ConsumerGroupHeartbeatResponse
    v = ctx.version
    coordinator = ctx.coordinator
    names = req.subscribed_topic_names
    owned = req.topic_partitions
    refused = authorize.consumer_heartbeat_refused(ctx, req.group_id, names)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=refused[0], error_message=refused[1], member_id=None,
                 member_epoch=0, heartbeat_interval_ms=0, assignment=None)
    result = await coordinator.consumer_group_heartbeat(HeartbeatRequest(
        group_id=ctx.names.global_id(req.group_id),
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=None if names is None else [ctx.names.global_name(n) for n in names],
        subscribed_topic_regex=req.subscribed_topic_regex if v >= 1 else None,
        server_assignor=req.server_assignor,
        topic_partitions=None if owned is None else {bytes(t.topic_id): frozenset(t.partitions) for t in owned},
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx.conn.peer),
        api_version=v,
    ))
    assignment = None
    if result.assignment is not None:
        assignment = R.Assignment(topic_partitions=[
            R.Assignment.TopicPartitions(topic_id=tid, partitions=sorted(ps))
            for tid, ps in sorted(result.assignment.items())])
    return R(
        throttle_time_ms=0,
        error_code=result.error,
        error_message=result.error_message,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=result.heartbeat_interval_ms,
        assignment=assignment,
    )
