"""Idempotent-producer sequence checks and de-duplication, per partition: now part of the partition's
producer state (kop/offset/producer_state.py), which also tracks transactions; re-exported here for the
Kafka handler and its tests."""

from kop.offset.producer_state import (
    MAX_BATCHES_PER_PRODUCER,
    BatchRecord,
    ProducerEntry,
    ProducerStateTable,
    SequenceError,
)

__all__ = ["MAX_BATCHES_PER_PRODUCER", "BatchRecord", "ProducerEntry", "ProducerStateTable", "SequenceError"]
