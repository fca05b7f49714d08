"""AddPartitionsToTxn (key 24): v0-v5.

- v0-v3 (what clients send): one transaction's partitions are added to it; the answer carries one error
  per partition. Partitions of topics that do not exist (or indexes out of range) get
  UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, and nothing is added, as Kafka does.
  Coordinator errors (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED - INVALID_PRODUCER_EPOCH below v2 -,
  CONCURRENT_TRANSACTIONS while the previous transaction's markers are written, NOT_COORDINATOR,
  COORDINATOR_LOAD_IN_PROGRESS) are put on every partition.
- v4+ (Kafka's inter-broker form, KIP-890 part 1): several transactions per request, each with its own
  result; `verify_only` asks whether the partitions are in the open transaction without adding them (NONE
  or, when one is not, INVALID_TXN_STATE - TRANSACTION_ABORTABLE from v5). A request that is not verify_only
  is the implicit add of a transaction.version 2 producer's Produce at another broker (KIP-890 part 2, cluster
  mode): the partitions join the transaction, opening the next one after a completed transaction, as this
  broker's own produce path adds them. A top-level error is reserved for the whole request.
- Topic names are stored under their Kafka name, whichever of KoP's spellings the client used.
- Authorization (Kafka's): v0-v3 need WRITE on the transactional id (else every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic (TOPIC_AUTHORIZATION_FAILED, checked before
  existence; the other partitions OPERATION_NOT_ATTEMPTED). Internal topics are refused that way even
  without ACLs, as Kafka does. v4+ comes from brokers: CLUSTER_ACTION on the cluster, else the top-level
  CLUSTER_AUTHORIZATION_FAILED and no results; topics are not checked then.
"""

from __future__ import annotations

from kop.kafka.apis.txn_common import fenced_for, transactions
from kop.kafka.authorize import TRANSACTIONAL_ID, Op, allowed, cluster_allowed, txn_topics_refused
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

API_KEY = 24
VERSIONS = (0, 5)
E = ErrorCode


async def _resolve(ctx: RequestContext, topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic]) -> tuple[list[tuple[str, int]], dict[tuple[str, int], int]]:
    """([(topic key, partition)] to add, {(name as asked, partition): UNKNOWN_TOPIC_OR_PARTITION})."""
    good: list[tuple[str, int]] = []
    bad: dict[tuple[str, int], int] = {}
    for t in topics:
        topic = await ctx.find_topic(t.name)
        for p in t.partitions:
            if topic is None or not 0 <= p < topic.partitions:
                bad[(t.name, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                good.append((ctx.topics.kafka_name(topic.name), p))
    return good, bad


async def _one(ctx: RequestContext, tid: str, pid: int, epoch: int, topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic], verify_only: bool
               ) -> dict[tuple[str, int], int]:
    """{(topic name as asked, partition): error} for one transaction."""
    txns = transactions(ctx)
    asked = [(t.name, p) for t in topics for p in t.partitions]
    if ctx.version <= 3:
        if not allowed(ctx, Op.WRITE, TRANSACTIONAL_ID, tid):
            return dict.fromkeys(asked, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        refused = txn_topics_refused(ctx, (t.name for t in topics))
        if refused:
            topics = [t for t in topics if t.name not in refused]
            _, bad = await _resolve(ctx, topics)
            bad.update({(n, p): E.TOPIC_AUTHORIZATION_FAILED for n, p in asked if n in refused})
            return {k: bad.get(k, E.OPERATION_NOT_ATTEMPTED) for k in asked}
    if txns is None:
        return dict.fromkeys(asked, E.COORDINATOR_NOT_AVAILABLE)
    good, bad = await _resolve(ctx, topics)
    if bad:
        return {k: bad.get(k, E.OPERATION_NOT_ATTEMPTED) for k in asked}
    key_of = dict(zip(asked, good, strict=True))
    tid = ctx.names.global_id(tid)  # the coordinator's id (kop/topics/scope.py)
    if verify_only:
        err, per = txns.verify(tid, pid, epoch, good)
        if err:
            return dict.fromkeys(asked, err)
        missing = E.TRANSACTION_ABORTABLE if ctx.version >= 5 else E.INVALID_TXN_STATE
        return {k: (missing if per.get(key_of[k]) else 0) for k in asked}
    # v4+ adds (not verify_only) come from a partition's broker for a TV2 producer's Produce (KIP-890 part 2)
    err = await (txns.add_implicitly(tid, pid, epoch, good) if ctx.version >= 4 else
                 txns.add_partitions(tid, pid, epoch, good))
    return dict.fromkeys(asked, fenced_for(err, ctx.version, 2))


def _topic_results(R: type[AddPartitionsToTxnResponse], results: dict[tuple[str, int], int]
                   ) -> list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for (name, p), err in results.items():
        by_topic.setdefault(name, []).append(R.AddPartitionsToTxnPartitionResult(
            partition_index=p, partition_error_code=err))
    return [R.AddPartitionsToTxnTopicResult(name=name, results_by_partition=parts) for name, parts in by_topic.items()]


async def handle(ctx: RequestContext, req: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    R = AddPartitionsToTxnResponse
    if ctx.version <= 3:
        results = await _one(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                             req.v3_and_below_producer_epoch, req.v3_and_below_topics, False)
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(R, results))
    if not cluster_allowed(ctx, Op.CLUSTER_ACTION):
        return R(throttle_time_ms=0, error_code=E.CLUSTER_AUTHORIZATION_FAILED, results_by_transaction=[])
    out = []
    for txn in req.transactions:
        results = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                             txn.verify_only)
        out.append(R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                              topic_results=_topic_results(R, results)))
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=out)
