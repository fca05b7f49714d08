"""DescribeTransactions (key 65): v0.

Each transactional id this broker coordinates is described as Kafka does (state name, timeout, start
time, producer id and epoch, partitions by topic); an unknown or expired id gets TRANSACTIONAL_ID_NOT_FOUND,
an id of a partition another broker coordinates NOT_COORDINATOR, one still loading
COORDINATOR_LOAD_IN_PROGRESS (kafka-transactions.sh describe finds the coordinator first).

Authorization (Kafka's): DESCRIBE on each transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for
it (the rest of that state zero, as Kafka's); the partitions of topics the principal may not DESCRIBE are
left out of the answer.
"""

from __future__ import annotations

from kop.kafka.apis.txn_common import transactions
from kop.kafka.authorize import TRANSACTIONAL_ID, Op, allowed, denied_topics
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import DescribeTransactionsRequest, DescribeTransactionsResponse

API_KEY = 65
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
    R = DescribeTransactionsResponse
    txns = transactions(ctx)
    out = []
    for tid in req.transactional_ids:
        if not allowed(ctx, Op.DESCRIBE, TRANSACTIONAL_ID, tid):  # Kafka's state: every other field zero
            out.append(R.TransactionState(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                          transactional_id=tid, transaction_state="", transaction_timeout_ms=0,
                                          transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[]))
            continue
        err, txn = (ErrorCode.COORDINATOR_NOT_AVAILABLE, None) if txns is None else txns.describe(ctx.names.global_id(tid))
        if txn is None:
            out.append(R.TransactionState(error_code=err, transactional_id=tid, transaction_state="",
                                          transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                          producer_epoch=-1, topics=[]))
            continue
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(txn.partitions):  # broker-global names, spelled for this connection
            by_topic.setdefault(ctx.names.client_name(t), []).append(p)
        for t in denied_topics(ctx, Op.DESCRIBE, list(by_topic)):
            del by_topic[t]
        out.append(R.TransactionState(
            error_code=0, transactional_id=tid, transaction_state=txn.state.state_name,
            transaction_timeout_ms=txn.timeout_ms, transaction_start_time_ms=txn.start_ms,
            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch,
            topics=[R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]))
    return R(throttle_time_ms=0, transaction_states=out)
