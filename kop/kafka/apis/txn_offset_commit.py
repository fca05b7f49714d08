"""TxnOffsetCommit (key 28): v0-v6, served by the group coordinator.

- The offsets are written to the group's __consumer_offsets partition at once, in a transactional batch of
  the producer (as Kafka), and stay pending until the transaction's marker lands there: a COMMIT makes
  them the group's committed offsets, an ABORT drops them. OffsetFetch with require_stable answers
  UNSTABLE_OFFSET_COMMIT for a partition with a pending offset meanwhile.
- KIP-447 (v3+): with a generation, member id or group instance id, the member must be in the group at
  that generation (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION); without them (v0-v2,
  aiokafka, kafka-python) the commit is accepted even by a Stable group, as in Kafka.
- When this broker coordinates the transactional id, the group's offsets partition must have been added
  to the transaction first (AddOffsetsToTxn; KIP-890 part 1's check): else INVALID_TXN_STATE
  (TRANSACTION_ABORTABLE from v4), and INVALID_PRODUCER_EPOCH for a fenced producer.
- Unknown topics get UNKNOWN_TOPIC_OR_PARTITION; the rest of the request is committed.
- v5 (KIP-890 part 2): a client sends it inside a transaction only with transaction.version 2, and the
  commit then adds the group's offsets partition to the transaction itself (the implicit AddOffsetsToTxn; in
  cluster mode at the broker coordinating the transactional id) instead of checking it was added; errors as
  above.
- v6 (KIP-1319, what Kafka 4.4 clients send): topics are named by their ids (Metadata's), and the answer
  echoes them; an id this broker does not know gets UNKNOWN_TOPIC_ID on each of its partitions and the rest
  of the request is committed (OffsetCommit v10's rule). Everything else is v5's. (Kafka 4.4 renamed
  GenerationId to GenerationIdOrMemberEpoch: the same field; the schema is in kop/protocol/extra_schemas.py.)
- Authorization (Kafka's order): WRITE on the transactional id, then READ on the group - a refusal is every
  partition's error (TRANSACTIONAL_ID_ / GROUP_AUTHORIZATION_FAILED) - then READ on each topic
  (TOPIC_AUTHORIZATION_FAILED for its partitions, before existence; the others are committed).
"""

from __future__ import annotations

from kop.kafka.apis.common import names_from_ids
from kop.kafka.apis.txn_common import transactions
from kop.kafka.authorize import Op, denied_topics, txn_group_refused
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

API_KEY = 28
VERSIONS = (0, 6)
E = ErrorCode
_RETRIABLE = (E.COORDINATOR_LOAD_IN_PROGRESS, E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR,
              E.CONCURRENT_TRANSACTIONS)


def _verify(ctx: RequestContext, req: TxnOffsetCommitRequest, transactional_id: str, group_id: str) -> int:
    """0 when the group's offsets partition is in the producer's open transaction (or the id is
    coordinated elsewhere), else the error of every partition. The ids are the coordinators' (global)."""
    txns = transactions(ctx)
    if txns is None:
        return 0
    err, per = txns.verify(transactional_id, req.producer_id, req.producer_epoch,
                           [txns.offsets_partition(group_id)])
    if err == E.NOT_COORDINATOR and ctx.services.ownership.clustered:
        return 0
    if err in _RETRIABLE:
        return E.COORDINATOR_LOAD_IN_PROGRESS
    if err == E.PRODUCER_FENCED:
        return E.INVALID_PRODUCER_EPOCH
    if err:
        return err
    if any(per.values()):
        return E.TRANSACTION_ABORTABLE if ctx.version >= 4 else E.INVALID_TXN_STATE
    return 0


async def _add(ctx: RequestContext, req: TxnOffsetCommitRequest, transactional_id: str, group_id: str) -> int:
    """v5: add the group's offsets partition to the TV2 transaction (0), else the error of every partition."""
    txns = transactions(ctx)
    if txns is None:
        return 0
    topic, partition = txns.offsets_partition(group_id)
    err = await txns.add_partition(transactional_id, req.producer_id, req.producer_epoch, topic, partition)
    return E.COORDINATOR_LOAD_IN_PROGRESS if err in (E.NOT_ENOUGH_REPLICAS, E.CONCURRENT_TRANSACTIONS) else err


async def handle(ctx: RequestContext, req: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    R = TxnOffsetCommitResponse
    v = ctx.version
    refused = txn_group_refused(ctx, req.transactional_id, req.group_id)
    if refused is not None:
        return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id,
                                                                            partitions=[
            R.TxnOffsetCommitResponsePartition(partition_index=p.partition_index, error_code=refused)
            for p in t.partitions]) for t in req.topics])
    unknown_ids = names_from_ids(ctx, req.topics) if v >= 6 else set()  # v6 names topics by id
    denied = denied_topics(ctx, Op.READ, (t.name for i, t in enumerate(req.topics) if i not in unknown_ids))
    plan: list[tuple[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic, list[tuple[int, int | None, str]]]] = []
    valid: list[tuple[str, int, int, int, str | None]] = []
    for i, t in enumerate(req.topics):
        if i in unknown_ids or t.name in denied:
            error = E.UNKNOWN_TOPIC_ID if i in unknown_ids else E.TOPIC_AUTHORIZATION_FAILED
            plan.append((t, [(p.partition_index, error, "") for p in t.partitions]))
            continue
        topic = await ctx.find_topic(t.name)
        parts: list[tuple[int, int | None, str]] = []
        for p in t.partitions:
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                parts.append((p.partition_index, E.UNKNOWN_TOPIC_OR_PARTITION, ""))
                continue
            key = ctx.topics.kafka_name(topic.name)
            parts.append((p.partition_index, None, key))
            valid.append((key, p.partition_index, p.committed_offset,
                          p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata))
        plan.append((t, parts))
    results: dict[tuple[str, int], int] = {}
    if valid:
        names = ctx.names
        group_id = names.global_id(req.group_id)
        tid = names.global_id(req.transactional_id)
        err = ctx.coordinator.partition_error(group_id) or (
            await _add(ctx, req, tid, group_id) if v >= 5 else _verify(ctx, req, tid, group_id))
        if err:
            results = {(key, p): err for key, p, *_ in valid}
        else:
            results = await ctx.coordinator.txn_commit_offsets(
                group_id, req.producer_id, req.producer_epoch,
                req.generation_id if v >= 3 else -1, req.member_id if v >= 3 else "",
                req.group_instance_id if v >= 3 else None, valid)
    return R(throttle_time_ms=0, topics=[
        R.TxnOffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id, partitions=[
            R.TxnOffsetCommitResponsePartition(
                partition_index=index, error_code=err if err is not None else results[(key, index)])
            for index, err, key in parts])
        for t, parts in plan])
