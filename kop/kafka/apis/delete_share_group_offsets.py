"""DeleteShareGroupOffsets (key 92): v0, `kafka-share-groups --delete-offsets` (Admin.deleteShareGroupOffsets):
the group's share-partition states of the named topics are deleted at their share coordinators
(DeleteShareGroupState, whichever broker that is); the next fetch starts them again at share.auto.offset.reset.
An error there is the topic's.

As Kafka: only a group without members (else NON_EMPTY_GROUP, "The group is not empty."); a share group this
broker does not know is GROUP_ID_NOT_FOUND; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION for it.
"""

from __future__ import annotations

from kop.coordinator.share.persister import PersisterError
from kop.kafka import authorize
from kop.kafka.apis.share_acknowledge import UNSUPPORTED, share_disabled
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse

API_KEY = 92
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    R = DeleteShareGroupOffsetsResponse
    T = R.DeleteShareGroupOffsetsResponseTopic
    share = ctx.handler.share

    def failed(code: int, message: str) -> DeleteShareGroupOffsetsResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])

    if share_disabled(ctx):
        return failed(*UNSUPPORTED)
    if not authorize.group_allowed(ctx, authorize.Op.DELETE, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED, "The group is not authorized.")
    gid = ctx.names.global_id(req.group_id)
    await share.ready()
    if not share.knows(gid):
        return failed(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {req.group_id} not found.")
    if share.has_members(gid):
        return failed(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
    out = []
    for t in req.topics:
        topic = await ctx.find_topic(t.topic_name)
        if topic is None:
            out.append(T(topic_name=t.topic_name, topic_id=bytes(16), error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                         error_message=None))
            continue
        error = 0
        try:
            await share.delete_states(share.state_keys(gid, topic.topic_id, topic.partitions))
        except PersisterError as e:
            error = e.error
        out.append(T(topic_name=t.topic_name, topic_id=topic.topic_id, error_code=error, error_message=None))
    await share.flush()
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
