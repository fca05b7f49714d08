"""ListTransactions (key 66): v0-v2.

Lists the transactional ids this broker coordinates (the admin client asks every broker and merges the
answers), with Kafka's filters: state names (unknown names are echoed in `unknown_state_filters` and match
nothing), producer ids, v1's duration filter (transactions running longer than that many ms; -1: all),
v2's transactional id pattern (KIP-1152: a regular expression the whole id must match; Kafka uses RE2 -
Python's `re` agrees on the patterns tools send; an invalid one gets INVALID_REQUEST). While a partition
of __transaction_state loads, the answer is COORDINATOR_LOAD_IN_PROGRESS. Only the ids the principal may
DESCRIBE are listed; the others are left out silently (Kafka's rule, never an error). A tenant login
(kop/topics/scope.py) lists only its own ids, under the ids it uses, and its pattern matches those.
"""

from __future__ import annotations

import re

from kop.kafka.apis.txn_common import transactions
from kop.kafka.authorize import TRANSACTIONAL_ID, Op, allowed
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import ListTransactionsRequest, ListTransactionsResponse

API_KEY = 66
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, req: ListTransactionsRequest) -> ListTransactionsResponse:
    R = ListTransactionsResponse
    txns = transactions(ctx)
    if txns is None:
        return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, unknown_state_filters=[],
                 transaction_states=[])
    pattern = req.transactional_id_pattern if ctx.version >= 2 else None
    duration = req.duration_filter if ctx.version >= 1 else -1
    names = ctx.names  # a tenant login lists only its own ids, spelled (and matched) as it spells them
    try:
        err, unknown, found = txns.list(list(req.state_filters), list(req.producer_id_filters), duration,
                                        (pattern or None) if names.default else None)
        if names.default:
            listed = [(t.transactional_id, t) for t in found]
        else:
            listed = [(names.client_id(t.transactional_id), t) for t in found if names.owns_id(t.transactional_id)]
            if pattern:
                matcher = re.compile(pattern)
                listed = [(tid, t) for tid, t in listed if matcher.fullmatch(tid)]
    except re.error:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, unknown_state_filters=[],
                 transaction_states=[])
    return R(throttle_time_ms=0, error_code=err, unknown_state_filters=unknown, transaction_states=[
        R.TransactionState(transactional_id=tid, producer_id=t.producer_id, transaction_state=t.state)
        for tid, t in listed if allowed(ctx, Op.DESCRIBE, TRANSACTIONAL_ID, tid)])
