"""AddOffsetsToTxn (key 25): v0-v4.

Adds the group's __consumer_offsets partition (abs(hashCode(group)) % its partition count, Kafka's formula)
to the transaction, so that the TxnOffsetCommit that follows is part of it and its offsets become visible
with the commit marker. Errors as AddPartitionsToTxn's (PRODUCER_FENCED answered as INVALID_PRODUCER_EPOCH
below v2). Unlike KoP (kop#885), the answer is an AddOffsetsToTxn response. Authorization as Kafka's:
WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
(GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from kop.kafka.apis.txn_common import fenced_for, transactions
from kop.kafka.authorize import txn_group_refused
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

API_KEY = 25
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, req: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    R = AddOffsetsToTxnResponse
    refused = txn_group_refused(ctx, req.transactional_id, req.group_id)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=refused)
    txns = transactions(ctx)
    if txns is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    names = ctx.names  # the coordinators' ids (kop/topics/scope.py)
    err = await txns.add_offsets(names.global_id(req.transactional_id), req.producer_id, req.producer_epoch,
                                 names.global_id(req.group_id))
    return R(throttle_time_ms=0, error_code=fenced_for(err, ctx.version, 2))
