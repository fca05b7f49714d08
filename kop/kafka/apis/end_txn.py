"""EndTxn (key 26): v0-v5.

Commits or aborts the producer's transaction: the answer comes once PrepareCommit / PrepareAbort is durable
in __transaction_state, then the markers are written into every partition of the transaction (as Kafka:
the producer's next AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS until they are). Errors are Kafka's:
INVALID_PRODUCER_ID_MAPPING (unknown id or another producer id), PRODUCER_FENCED (INVALID_PRODUCER_EPOCH
below v2), INVALID_TXN_STATE without an open transaction or for the other direction of one being ended,
CONCURRENT_TRANSACTIONS for a retry while markers are written, NONE for a retry after they were.

v5 (KIP-890 part 2, what a Kafka 4.x producer sends with transaction.version 2 finalized): the end bumps
the producer epoch (the markers carry the bumped epoch and so fence the old one) and the answer carries the
producer id and epoch the producer goes on with; a retry of an end that completed answers the same (the
rules are kop/coordinator/transactions/state.py's). Errors answer -1 / -1 there, as Kafka.

Authorization: WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED (Kafka's).
"""

from __future__ import annotations

from kop.kafka.apis.txn_common import fenced_for, transactions
from kop.kafka.authorize import TRANSACTIONAL_ID, Op, allowed
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import EndTxnRequest, EndTxnResponse

API_KEY = 26
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    R = EndTxnResponse
    if not allowed(ctx, Op.WRITE, TRANSACTIONAL_ID, req.transactional_id):
        return R(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    txns = transactions(ctx)
    if txns is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    err, pid, epoch = await txns.end_txn(ctx.names.global_id(req.transactional_id), req.producer_id,
                                         req.producer_epoch, req.committed, tv2=ctx.version >= 5)
    return R(throttle_time_ms=0, error_code=fenced_for(err, ctx.version, 2), producer_id=pid, producer_epoch=epoch)
