"""DeleteGroups (key 42): v0-v2.

A group can be deleted when it is Empty (no members; possibly only committed offsets): its offsets and
its group metadata get tombstones in __consumer_offsets, and the answer comes once they are durable.
NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when it does not exist, INVALID_GROUP_ID for an
empty id; each group of the request is answered separately. A KIP-848 consumer group without members is
deleted the same way, all its records tombstoned in Kafka's order (the group epoch last). A share group
(KIP-932, `kafka-share-groups --delete`) without members is forgotten with its share-partition states and
group configs (kop/coordinator/share/coordinator.py), NON_EMPTY_GROUP while it has members.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteGroupsRequest, DeleteGroupsResponse

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
    R = DeleteGroupsResponse
    coordinator = ctx.coordinator
    denied = {g for g in req.groups_names if not authorize.group_allowed(ctx, authorize.Op.DELETE, g)}
    names = ctx.names  # the coordinator knows groups by their global ids; answered as asked
    share = ctx.handler.share  # share groups (KIP-932) are deleted by the share coordinator, when Empty
    shared = {g: share.delete_group(names.global_id(g)) for g in req.groups_names
              if g not in denied and share.knows(names.global_id(g))}
    if shared:
        await share.flush()  # the deleted share-partition states' tombstones
    found = await coordinator.delete_groups([names.global_id(g) for g in req.groups_names
                                             if g not in denied and g not in shared])
    results = {g: found.get(names.global_id(g), 0) for g in req.groups_names if g not in denied}
    results.update(shared)
    results.update(dict.fromkeys(denied, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    return R(
        throttle_time_ms=0,
        results=[R.DeletableGroupResult(group_id=gid, error_code=results.get(gid, 0)) for gid in req.groups_names],
    )
