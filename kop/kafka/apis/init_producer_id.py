"""InitProducerId (key 22): v0-v5, idempotent producers only.

- A null transactional id gets a fresh producer id (from blocks reserved in the metadata store, never
  reused across restarts) with epoch 0. v3+ requests that carry their current (id, epoch) to bump the epoch
  after an error (KIP-360) get the same id with epoch + 1; at the epoch limit a new id is issued.
- Transactions are not implemented. Transactional clients fail earlier (FindCoordinator answers
  INVALID_REQUEST for transaction keys); a request that still carries a transactional id gets INVALID_REQUEST,
  which fails the producer at once instead of letting it retry forever.
"""

from __future__ import annotations

from typing import Any

from kop.kafka import authorize
from kop.kafka.context import RequestContext
from kop.protocol import api_info
from kop.protocol.errors import ErrorCode

API_KEY = 22
VERSIONS = (0, 5)
MAX_EPOCH = 32767


async def handle(ctx: RequestContext, req: Any) -> Any:
    R = api_info(API_KEY).response_class
    refused = authorize.init_producer_id_refused(ctx, req.transactional_id)
    if refused is not None:
        return R(throttle_time_ms=0, error_code=refused, producer_id=-1, producer_epoch=-1)
    if req.transactional_id is not None:
        return R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, producer_id=-1, producer_epoch=-1)
    pid = getattr(req, "producer_id", -1)
    epoch = getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return R(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=epoch + 1)
    new_pid = await ctx.services.producer_ids.next_id()
    return R(throttle_time_ms=0, error_code=0, producer_id=new_pid, producer_epoch=0)
