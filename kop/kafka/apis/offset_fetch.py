"""OffsetFetch (key 9): v1-v10, including v8+'s several groups per request.

- A partition without a committed offset answers -1 (offset), -1 (leader epoch) and "" (metadata), as
  Kafka; asking for no topic list (v2+) returns every committed partition of the group.
- require_stable (v7+): a partition with a transactional offset still pending (TxnOffsetCommit whose
  transaction has not ended) gets UNSTABLE_OFFSET_COMMIT (retriable), as in Kafka; without it the last
  committed offset is answered.
- v10 (KIP-848; what Kafka 4.4 consumers send) names topics by id, in the request and the answer: each id
  is resolved to its topic, whose offsets are read under its Kafka name as below v10; an unknown id answers
  UNKNOWN_TOPIC_ID on each asked partition. Asking for all topics answers each committed topic with its
  id; a topic that no longer exists has none and is left out (a v10 client could not name it). A committed
  offset that carries another topic id than the one asked (Kafka 4.4's OffsetCommitValue tag 0: the topic was
  deleted and created again under its name, and the old offsets outlived it) is not the new topic's: it answers
  -1, as Kafka's isMismatchedTopicId (offsets committed without an id, below v10, are answered as they are).
- Topic names are answered as the client wrote them; offsets are looked up under the topic's Kafka name
  (see offset_commit), so all of KoP's spellings of a topic see the same offsets.
- Group-level errors (COORDINATOR_LOAD_IN_PROGRESS while the group's partition loads, INVALID_GROUP_ID
  for an empty id): v8+ per group, v2-v7 in the top-level error, v1 on every requested partition.
- v9's member id and epoch are for KIP-848 consumer groups: a member's fetch needs its current epoch
  (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID), an admin's (no member id, epoch -1) is always served; classic
  groups ignore them (as Kafka).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kop.kafka import authorize
from kop.kafka.apis.common import topic_by_id
from kop.kafka.context import RequestContext
from kop.protocol import ZERO_UUID
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import OffsetFetchRequest, OffsetFetchResponse

if TYPE_CHECKING:
    from kop.coordinator import GroupCoordinator
    from kop.coordinator.offsets import OffsetAndMetadata

API_KEY = 9
VERSIONS = (1, 10)

#: the topics asked (v0-v7 at the top, v8+ per group), None for all
_Topics = list[OffsetFetchRequest.OffsetFetchRequestTopic] | list[OffsetFetchRequest.OffsetFetchRequestTopics] | None
#: (topic name as asked, [(partition, offset, leader epoch, metadata, error)])
_Rows = list[tuple[str, list[tuple[int, int, int, str, int]]]]


def _fetch(ctx: RequestContext, group_id: str, topics: _Topics, member_id: str | None = None, member_epoch: int = -1,
           require_stable: bool = False) -> tuple[int, _Rows]:
    """(group error, [(topic name as asked, [(partition, offset, epoch, metadata, error)])]). With ACLs:
    DESCRIBE on the group, else GROUP_AUTHORIZATION_FAILED; a named topic without DESCRIBE answers its
    partitions TOPIC_AUTHORIZATION_FAILED, and "all topics" leaves such topics out (Kafka). require_stable:
    a partition with a transactional commit still pending answers UNSTABLE_OFFSET_COMMIT."""
    coordinator = ctx.coordinator
    if not authorize.group_allowed(ctx, authorize.Op.DESCRIBE, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    group_id = ctx.names.global_id(group_id)  # the coordinator's id of the group (kop/topics/scope.py)
    err, out = _fetch_all(ctx, coordinator, group_id, topics, member_id, member_epoch)
    if require_stable and not err and coordinator.pending_txn_offsets:
        unstable = ErrorCode.UNSTABLE_OFFSET_COMMIT
        out = [(name, [(p, -1, -1, "", unstable) if coordinator.has_pending_offset(
            group_id, ctx.names.global_name(name), p) else (p, off, epoch, meta, e)
            for p, off, epoch, meta, e in parts]) for name, parts in out]
    return err, out


def _fetch_all(ctx: RequestContext, coordinator: GroupCoordinator, group_id: str, topics: _Topics,
               member_id: str | None, member_epoch: int) -> tuple[int, _Rows]:
    if topics is None:
        err, rows = coordinator.fetch_offsets(group_id, None, member_id, member_epoch)
        by_topic: dict[str, list[tuple[int, int, int, str, int]]] = {}
        names = ctx.names  # the coordinator's topics are broker-global names: spelled for this connection
        if not names.default:
            rows = [(names.client_name(r[0]), *r[1:]) for r in rows]
        hidden = authorize.denied_topics(ctx, authorize.Op.DESCRIBE, (row[0] for row in rows))
        for tname, p, off, epoch, meta, e in rows:
            if tname not in hidden:
                by_topic.setdefault(tname, []).append((p, off, epoch, meta, e))
        return err, list(by_topic.items())
    out: _Rows = []
    denied = authorize.denied_topics(ctx, authorize.Op.DESCRIBE, (t.name for t in topics))
    for t in topics:
        if t.name in denied:
            out.append((t.name, [(p, -1, -1, "", ErrorCode.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes]))
            continue
        key = ctx.names.global_name(t.name)
        err, rows = coordinator.fetch_offsets(group_id, [(key, list(t.partition_indexes))], member_id, member_epoch)
        if err:
            return err, []
        out.append((t.name, [(p, off, epoch, meta, e) for _, p, off, epoch, meta, e in rows]))
    return 0, out


async def handle(ctx: RequestContext, req: OffsetFetchRequest) -> OffsetFetchResponse:
    R = OffsetFetchResponse
    v = ctx.version
    if v >= 8:
        groups = []
        for g in req.groups:
            ids: dict[str, bytes] = {}
            asked = g.topics
            if v >= 10 and g.topics is not None:
                asked = []
                for t in g.topics:
                    found = topic_by_id(ctx.handler, t.topic_id, ctx.names)
                    if found is not None:
                        t.name = found[0]  # the name its offsets are read under, as below v10
                        ids[t.name] = t.topic_id
                        asked.append(t)
            err, topics = _fetch(ctx, g.group_id, asked, *((g.member_id, g.member_epoch) if v >= 9 else (None, -1)),
                                 require_stable=req.require_stable)
            answered: list[tuple[str, bytes, list[tuple[int, int, int, str, int]]]]
            answered = [(name, ZERO_UUID, parts) for name, parts in topics]
            if v >= 10:
                answered = await _by_id(ctx, g.topics, err, topics, ids, ctx.names.global_id(g.group_id))
            groups.append(R.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=err,
                topics=[R.OffsetFetchResponseTopics(name=name, topic_id=topic_id, partitions=[
                    R.OffsetFetchResponsePartitions(partition_index=p, committed_offset=off,
                                                    committed_leader_epoch=epoch, metadata=meta, error_code=e)
                    for p, off, epoch, meta, e in parts]) for name, topic_id, parts in answered],
            ))
        return R(throttle_time_ms=0, groups=groups)
    err, topics = _fetch(ctx, req.group_id, req.topics, require_stable=v >= 7 and req.require_stable)
    if err and v < 2:
        # No top-level error field yet: every requested partition carries the group's error.
        topics = [(t.name, [(p, -1, -1, "", err) for p in t.partition_indexes]) for t in (req.topics or [])]
        err = 0
    return R(
        throttle_time_ms=0,
        error_code=err,
        topics=[R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=off, committed_leader_epoch=epoch,
                                           metadata=meta, error_code=e)
            for p, off, epoch, meta, e in parts]) for name, parts in topics],
    )


def _mismatched(om: OffsetAndMetadata | None, topic_id: bytes) -> bool:
    """Kafka's isMismatchedTopicId: both ids known and different."""
    return om is not None and om.topic_id != ZERO_UUID and topic_id != ZERO_UUID and om.topic_id != topic_id


async def _by_id(ctx: RequestContext, asked: list[OffsetFetchRequest.OffsetFetchRequestTopics] | None, err: int,
                 rows: _Rows, ids: dict[str, bytes], group_id: str
                 ) -> list[tuple[str, bytes, list[tuple[int, int, int, str, int]]]]:
    """v10's topics of one group: each with its id, in request order, those asked by an unknown id with
    UNKNOWN_TOPIC_ID on every partition, offsets committed under another id of the name as none; for all
    topics (`asked` None), the topics that still exist."""
    if asked is None:
        out = []
        for name, parts in rows:
            topic = await ctx.find_topic(name)
            if topic is not None:
                out.append((name, topic.topic_id, parts))
        return out
    if err:
        return []
    known = iter(rows)
    answered = []
    committed = ctx.coordinator.offset_manager.committed(group_id) if rows else {}
    for t in asked:
        if t.name in ids and ids[t.name] == t.topic_id:
            name, parts = next(known)
            key = ctx.names.global_name(name)
            answered.append((name, t.topic_id, [(p, -1, -1, "", e) if _mismatched(committed.get((key, p)), t.topic_id)
                                                else (p, off, epoch, meta, e) for p, off, epoch, meta, e in parts]))
        else:
            answered.append(("", t.topic_id, [(p, -1, -1, "", ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partition_indexes]))
    return answered
