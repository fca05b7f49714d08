"""InitProducerId (key 22): v0-v5, idempotent and transactional producers.

- A null transactional id gets a fresh producer id (from blocks reserved in the metadata store, never
  reused across restarts) with epoch 0. v3+ requests that carry their current (id, epoch) to bump the epoch
  after an error (KIP-360) get the same id with epoch + 1; at the epoch limit a new id is issued.
- A transactional id goes to the transaction coordinator (kop/coordinator/transactions/), with Kafka's
  rules: an epoch bump per session (fencing the previous one), a still-open transaction aborted first
  (CONCURRENT_TRANSACTIONS until then; the client retries), KIP-360 recovery with the current (id, epoch),
  a new producer id once the epoch is exhausted, INVALID_TRANSACTION_TIMEOUT for a timeout not in
  1..transactionMaxTimeoutMs, INVALID_REQUEST for an empty id, NOT_COORDINATOR when another broker
  coordinates the id. PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH below v4, as Kafka does.
- v6 (KIP-939 two-phase commit, unstable in Kafka 4.x) is not advertised.
"""

from __future__ import annotations

from kop.kafka import authorize
from kop.kafka.apis.txn_common import fenced_for, transactions
from kop.kafka.context import RequestContext
from kop.protocol.errors import ErrorCode
from kop.protocol.messages import InitProducerIdRequest, InitProducerIdResponse

API_KEY = 22
VERSIONS = (0, 5)
MAX_EPOCH = 32767


async def handle(ctx: RequestContext, req: InitProducerIdRequest) -> InitProducerIdResponse:
    R = InitProducerIdResponse
    refused = authorize.init_producer_id_refused(ctx, req.transactional_id)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=refused, producer_id=-1, producer_epoch=-1)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if req.transactional_id is not None:
        txns = transactions(ctx)
        if txns is None:
            return R(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, producer_id=-1,
                     producer_epoch=-1)
        res = await txns.init_producer_id(ctx.names.global_id(req.transactional_id), req.transaction_timeout_ms, pid, epoch)
        if res.error:
            return R(throttle_time_ms=0, error_code=fenced_for(res.error, ctx.version, 4), producer_id=-1,
                     producer_epoch=-1)
        return R(throttle_time_ms=0, error_code=0, producer_id=res.producer_id, producer_epoch=res.producer_epoch)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch + 1)
    new_pid = await ctx.services.producer_ids.next_id()
    return R(throttle_time_ms=0, error_code=0, producer_id=new_pid, producer_epoch=0)
