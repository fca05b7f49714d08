"""What the transaction APIs share: the transaction coordinator of the broker, and the version-dependent
spelling of "fenced" (PRODUCER_FENCED arrived in InitProducerId v4 and AddPartitionsToTxn / AddOffsetsToTxn
/ EndTxn v2; older versions carry INVALID_PRODUCER_EPOCH, as Kafka's KafkaApis answers them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kop.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kop.coordinator.transactions import TransactionCoordinator
    from kop.kafka.context import RequestContext


def transactions(ctx: RequestContext) -> TransactionCoordinator | None:
    return ctx.services.transactions


def fenced_for(error: int, version: int, first_version_with_fenced: int) -> int:
    if error == ErrorCode.PRODUCER_FENCED and version < first_version_with_fenced:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
