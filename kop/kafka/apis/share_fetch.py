"""ShareFetch (key 78): v1-v2, a share consumer's fetch (KIP-932): acquire records of the share-partitions in its
share session, with the acknowledgements of what it got before piggy-backed.

- Share sessions (kop/coordinator/share/coordinator.py): epoch 0 opens one with the request's partitions (and
  may not carry acknowledgements: INVALID_REQUEST), later epochs add the partitions they name and drop the
  forgotten ones; SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH as Kafka answers; -1 acknowledges,
  fetches nothing and closes the session, releasing what the member still holds. The session also ends
  when the connection that opened it closes (its member's acquired records released then, as Kafka 4.x).
- Each share-partition is read from its next AVAILABLE offset; the stored batches are sent as they are (the
  base offset in front of the rest, as Fetch does) and AcquiredRecords says which of their offsets this member
  now holds, for how many deliveries: the client hands out only those (batch boundaries kept, so MaxRecords
  may be exceeded by the end of the last batch, as in Kafka's batch-optimized mode). Control batches are not
  delivered and move the share-partition start offset over them.
- Nothing acquired: the request waits (MaxWaitMs, capped by fetchMaxWaitCapMs) for an append to one of its
  partitions or for records coming back (released, a lock timed out, a member gone), then looks again.
- AcquisitionLockTimeoutMs is the group's share.record.lock.duration.ms.
- The acknowledgements' new state (and a new share-partition's start) is written to __share_group_state
  before the answer (kop/coordinator/share/store.py); a write that failed gives the partition's
  AcknowledgeErrorCode (it is written again later). Cluster mode: this broker leads the partition (else
  NOT_LEADER_OR_FOLLOWER) and reads a share-partition's state from its share coordinator on first use
  (kop/coordinator/share/persister.py), the partition's error while that fails.

- share.isolation.level read_committed: only records below the last stable offset are acquired, and those
  of aborted transactions are archived undelivered (read_uncommitted, the default, delivers them all).

- v2: ShareAcquireMode record-limit (1, KIP-1206) acquires MaxRecords at most, splitting a batch (the
  batch is sent whole, AcquiredRecords says which of its records); IsRenewAck (KIP-1222) marks a request
  whose RENEW acknowledgements start the records' locks again: it fetches nothing.

How it differs from Kafka 4.4: MinBytes counts as "at least one record".
"""

from __future__ import annotations

import asyncio
import struct

from kop.coordinator.share.coordinator import FINAL_EPOCH, ShareCoordinator, ShareSession
from kop.coordinator.share.partition import Acquired
from kop.kafka import authorize
from kop.kafka.apis.common import topic_by_id
from kop.kafka.apis.share_acknowledge import UNSUPPORTED, acknowledge, session_refused, share_disabled
from kop.kafka.context import PartitionError, RequestContext
from kop.offset.api import OffsetOutOfRange
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ShareFetchRequest, ShareFetchResponse

API_KEY = 78
VERSIONS = (1, 2)

_OFFSET = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")  # at byte 21 of a v2 batch
_CONTROL = 0x20
RECORD_LIMIT = 1  # ShareAcquireMode (v2, KIP-1206): 0 batch-optimized, 1 record-limit
R = ShareFetchResponse
TP = tuple[bytes, int]


def _update_session(session: ShareSession, req: ShareFetchRequest) -> None:
    for t in req.topics:
        for p in t.partitions:
            if (t.topic_id, p.partition_index) not in session.partitions:
                session.partitions.append((t.topic_id, p.partition_index))
    forgotten = {(t.topic_id, p) for t in req.forgotten_topics_data for p in t.partitions}
    if forgotten:
        session.partitions = [tp for tp in session.partitions if tp not in forgotten]


async def _acquire(ctx: RequestContext, share: ShareCoordinator, gid: str, member: str, tp: TP, max_records: int,
                   max_bytes: int, strict: bool) -> tuple[int, list[bytes | memoryview], list[Acquired]]:
    """(error, batches to send, acquired ranges) of one share-partition."""
    found = topic_by_id(ctx.handler, tp[0], ctx.names)
    if found is None:
        return ErrorCode.UNKNOWN_TOPIC_ID, [], []
    if not authorize.topic_allowed(ctx, authorize.Op.READ, found[0]):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED, [], []
    try:
        plog = await ctx.partition_log(found[1], tp[1])
    except PartitionError as e:
        return e.code, [], []
    error = await share.load_state((gid, tp[0], tp[1]))  # taken up at its share coordinator, on first use
    if error:
        return error, [], []
    sp = share.share_partition((gid, tp[0], tp[1]), plog.log_start_offset, plog.high_watermark)
    committed = share.config(gid, "share.isolation.level") == "read_committed"
    if committed:
        await plog.load_transactions()  # the LSO and which batches are aborted
    offset = sp.next_fetch_offset()
    if max_records <= 0 or offset >= (plog.last_stable_offset if committed else plog.high_watermark):
        return 0, [], []
    try:
        res = await plog.read(offset, max_bytes, min_one=True)
    except OffsetOutOfRange:
        return 0, [], []
    out: list[bytes | memoryview] = []
    acquired: list[Acquired] = []
    now = share.now()
    for fb in res.batches:
        if committed and fb.base_offset >= plog.last_stable_offset:
            break  # an open transaction: nothing from here on is stable yet
        if _ATTRIBUTES.unpack_from(fb.batch, 21)[0] & _CONTROL or (
                committed and plog.is_aborted_batch(fb.batch, fb.base_offset)):
            sp.skip(fb.base_offset, fb.last_offset)  # markers, and aborted records for read_committed
            continue
        got = sp.acquire(member, [(fb.base_offset, fb.last_offset)], max_records, now, strict)
        if got:
            max_records -= sum(a.last - a.first + 1 for a in got)
            acquired += got
            out += [_OFFSET.pack(fb.base_offset), fb.batch[8:]]
        if max_records <= 0:
            break
    return 0, out, acquired


async def _fetch_all(ctx: RequestContext, share: ShareCoordinator, gid: str, member: str, session: ShareSession,
                     req: ShareFetchRequest, strict: bool) -> dict[TP, ShareFetchResponse.PartitionData]:
    left = req.max_records if req.max_records > 0 else 500
    budget = req.max_bytes if req.max_bytes > 0 else 2**31 - 1
    out = {}
    for tp in session.partitions:
        error, records, acquired = await _acquire(ctx, share, gid, member, tp, left, budget, strict)
        left -= sum(a.last - a.first + 1 for a in acquired)
        budget -= sum(len(r) for r in records)
        if error or acquired:
            out[tp] = _partition(tp[1], error, records, acquired)
    return out


def _partition(index: int, error: int, records: list[bytes | memoryview], acquired: list[Acquired]
               ) -> ShareFetchResponse.PartitionData:
    return R.PartitionData(
        partition_index=index, error_code=error, error_message=None, acknowledge_error_code=0,
        acknowledge_error_message=None, current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
        records=records if records else b"",
        acquired_records=[R.AcquiredRecords(first_offset=a.first, last_offset=a.last, delivery_count=a.delivery_count)
                          for a in acquired])


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def _wait(ctx: RequestContext, share: ShareCoordinator, session: ShareSession, timeout: float) -> None:
    """Until an append to one of the session's partitions, records coming back, or `timeout` seconds."""
    loop = asyncio.get_running_loop()
    wake: asyncio.Future[None] = loop.create_future()
    logs = []
    for tid, index in session.partitions:
        found = topic_by_id(ctx.handler, tid, ctx.names)
        if found is None:
            continue
        try:
            logs.append(await ctx.partition_log(found[1], index))
        except PartitionError:
            continue
    for plog in logs:
        plog.add_append_waiter(wake)
    share.add_waiter(wake)
    timer = loop.call_later(timeout, _wake, wake)
    try:
        await wake
    finally:
        timer.cancel()
        share.discard_waiter(wake)
        for plog in logs:
            plog.discard_append_waiter(wake)


async def handle(ctx: RequestContext, req: ShareFetchRequest) -> ShareFetchResponse:
    share = ctx.handler.share

    def failed(code: int, message: str | None = None) -> ShareFetchResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message, acquisition_lock_timeout_ms=0,
                 responses=[], node_endpoints=[])

    if share_disabled(ctx):
        return failed(*UNSUPPORTED)
    refused = session_refused(req.group_id, req.member_id)
    if refused is not None:
        return failed(*refused)
    assert req.group_id is not None and req.member_id is not None
    member = req.member_id
    if not authorize.group_allowed(ctx, authorize.Op.READ, req.group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    gid = ctx.names.global_id(req.group_id)
    epoch = req.share_session_epoch
    if epoch == 0 and any(p.acknowledgement_batches for t in req.topics for p in t.partitions):
        return failed(ErrorCode.INVALID_REQUEST, "Acknowledge data present on initial fetch request")
    await share.ready()
    error, session = share.open_session(gid, member, epoch, ctx.conn)
    if error or session is None:
        return failed(error)
    _update_session(session, req)
    renew = ctx.version >= 2 and bool(req.is_renew_ack)
    acks = {(t.topic_id, p.partition_index): acknowledge(ctx, share, gid, member, t.topic_id, p.partition_index,
                                                         p.acknowledgement_batches, renew)
            for t in req.topics for p in t.partitions if p.acknowledgement_batches}
    parts: dict[TP, ShareFetchResponse.PartitionData] = {}
    if epoch == FINAL_EPOCH:
        share.close_session(gid, member)
    elif not renew:  # a request renewing locks fetches nothing (KIP-1222)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max(req.max_wait_ms, 0), ctx.config.fetchMaxWaitCapMs) / 1000
        strict = ctx.version >= 2 and req.share_acquire_mode == RECORD_LIMIT
        while True:
            parts = await _fetch_all(ctx, share, gid, member, session, req, strict)
            remaining = deadline - loop.time()
            if parts or acks or remaining <= 0 or ctx.handler.draining or not session.partitions:
                break
            await _wait(ctx, share, session, remaining)
    unwritten = await share.flush()  # the acknowledgements' state (and that of new share-partitions) durable first
    share.arm()
    for tp, ack_error in acks.items():
        p = parts.get(tp) or _partition(tp[1], 0, [], [])
        p.acknowledge_error_code = ack_error or unwritten.get((gid, *tp), 0)
        parts[tp] = p
    by_topic: dict[bytes, list[ShareFetchResponse.PartitionData]] = {}
    for (tid, _), p in parts.items():
        by_topic.setdefault(tid, []).append(p)
    gid_lock = int(share.config(gid, "share.record.lock.duration.ms"))
    return R(throttle_time_ms=0, error_code=0, error_message=None, acquisition_lock_timeout_ms=gid_lock,
             responses=[R.ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in by_topic.items()],
             node_endpoints=[])
