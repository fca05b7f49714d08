"""ShareAcknowledge (key 79): v1, a share consumer's acknowledgements outside a ShareFetch (commitSync/Async,
close) in its share session (kop/coordinator/share/coordinator.py); ShareFetch piggy-backs the same batches.

Each AcknowledgementBatch is applied to the share-partition as one (kop/coordinator/share/partition.py):
ACCEPT, RELEASE, REJECT or GAP per offset, only by the member holding the records' acquisition locks, else
INVALID_RECORD_STATE for that partition. Session rules as Kafka's: epoch 0 cannot acknowledge
(INVALID_SHARE_SESSION_EPOCH), an unknown session is SHARE_SESSION_NOT_FOUND, a wrong epoch
INVALID_SHARE_SESSION_EPOCH, and -1 acknowledges then closes the session, releasing what the member still
holds. v2 (KIP-1222): with IsRenewAck, RENEW acknowledgements start the records' locks again (the member
keeps them); a RENEW without IsRenewAck (or at v1) is INVALID_REQUEST for its partition; the answer carries
AcquisitionLockTimeoutMs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from kop.coordinator.share.coordinator import FINAL_EPOCH, ShareCoordinator
from kop.coordinator.share.partition import AckType
from kop.kafka import authorize
from kop.kafka.apis.common import topic_by_id
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from kop.topics.features import SHARE_VERSION

API_KEY = 79
VERSIONS = (1, 2)


class _Batch(Protocol):
    first_offset: int
    last_offset: int
    acknowledge_types: list[int]


def acknowledge(ctx: RequestContext, share: ShareCoordinator, group_id: str, member_id: str, topic_id: bytes,
                partition: int, batches: Iterable[_Batch], renew: bool = False) -> int:
    """Apply a partition's acknowledgement batches; answers the partition's error (0 when all applied)."""
    found = topic_by_id(ctx.handler, topic_id, ctx.names)
    if found is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if not authorize.topic_allowed(ctx, authorize.Op.READ, found[0]):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    sp = share.partitions.get((group_id, topic_id, partition))
    if sp is None:
        return ErrorCode.INVALID_RECORD_STATE  # nothing was ever acquired there
    error = 0
    now = share.now()
    for b in batches:
        types = list(b.acknowledge_types)
        if not renew and AckType.RENEW in types:  # v1, or IsRenewAck not set: Kafka refuses it
            error = ErrorCode.INVALID_REQUEST
            continue
        error = sp.acknowledge(member_id, b.first_offset, b.last_offset, types, now) or error
    share.changed([(group_id, topic_id, partition)])
    share.wake()  # released records may be fetched by the others
    return error


#: what the share-group APIs answer while share.version is 0 (Kafka's UNSUPPORTED_VERSION and its message)
UNSUPPORTED = (ErrorCode.UNSUPPORTED_VERSION, "The version of API is not supported.")


def share_disabled(ctx: RequestContext) -> bool:
    """share.version finalized at 0 (UpdateFeatures): share groups are off, as Kafka's
    isShareGroupProtocolEnabled - ShareGroupHeartbeat/Describe, ShareFetch, ShareAcknowledge and
    Alter/DeleteShareGroupOffsets answer UNSUPPORTED_VERSION."""
    return ctx.services.features.level(SHARE_VERSION) < 1


def session_refused(group_id: str | None, member_id: str | None) -> tuple[int, str] | None:
    """Kafka's top-level INVALID_REQUEST for a share request without its group or member id."""
    if not group_id:
        return ErrorCode.INVALID_REQUEST, "GroupId can't be empty."
    if not member_id:
        return ErrorCode.INVALID_REQUEST, "MemberId can't be empty."
    return None


async def handle(ctx: RequestContext, req: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    R = ShareAcknowledgeResponse
    share = ctx.handler.share

    def failed(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[], node_endpoints=[],
                 acquisition_lock_timeout_ms=0)

    if share_disabled(ctx):
        return failed(*UNSUPPORTED)
    refused = session_refused(req.group_id, req.member_id)
    if refused is not None:
        return failed(*refused)
    assert req.group_id is not None and req.member_id is not None
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gid = ctx.names.global_id(req.group_id)
    if req.share_session_epoch == 0:
        return failed(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "Acknowledge request epoch cannot be 0.")
    await share.ready()
    error, _ = share.open_session(gid, req.member_id, req.share_session_epoch)
    if error:
        return failed(error)
    responses = []
    for t in req.topics:
        parts = [R.PartitionData(
            partition_index=p.partition_index, error_code=acknowledge(
                ctx, share, gid, req.member_id, t.topic_id, p.partition_index, p.acknowledgement_batches,
                ctx.version >= 2 and bool(req.is_renew_ack)),
            error_message=None, current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1))
            for p in t.partitions]
        responses.append(R.ShareAcknowledgeTopicResponse(topic_id=t.topic_id, partitions=parts))
    if req.share_session_epoch == FINAL_EPOCH:
        share.close_session(gid, req.member_id)
    unwritten = await share.flush()  # answered once the new state is durable, as Kafka
    for done in responses:
        for part in done.partitions:
            part.error_code = part.error_code or unwritten.get((gid, done.topic_id, part.partition_index), 0)
    share.arm()
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=responses, node_endpoints=[],
             acquisition_lock_timeout_ms=int(share.config(gid, "share.record.lock.duration.ms")))
