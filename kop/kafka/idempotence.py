"""Idempotent-producer sequence checks and de-duplication, per partition.

Java producers are idempotent by default (KIP-679): each batch carries (producer id, epoch, base sequence)
and a retried batch must not be written twice. Like Kafka, we remember the last five batches of each
producer per partition; a batch matching one of them is a duplicate and is answered with the original
offsets instead of being appended again. KoP delegated this to Pulsar's dedup and broke default Java
producers until a flag was set; here it is always on.

State is checked and updated when the append is *issued* (appends to a partition complete in issue order),
so pipelined batches of one producer (max.in.flight up to 5) are validated against each other. After a
restart the state is rebuilt from the headers of the log's last batches, so a retry that straddles a
broker restart is still recognised.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field

MAX_BATCHES_PER_PRODUCER = 5
INT32_MAX = 2**31 - 1


class SequenceError(Exception):
    def __init__(self, error: str, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class BatchRecord:
    first_seq: int
    last_seq: int
    base_offset: asyncio.Future[int] | int  # a future while the append is in flight


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER))
    last_seen_ms: int = 0

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1


def _next_seq(seq: int, count: int) -> int:
    """Sequences wrap at Int32.MAX like Kafka's."""
    n = seq + count
    return n - INT32_MAX - 1 if n > INT32_MAX else n


class ProducerStateTable:
    """Producer states of one partition."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, producer_id: int, epoch: int, first_seq: int, count: int) -> BatchRecord | None:
        """Validate a batch about to be appended. Returns the earlier BatchRecord when the batch is a
        duplicate, None when it must be appended. Raises SequenceError with Kafka's error otherwise."""
        if producer_id < 0:
            return None
        last_seq = _next_seq(first_seq, count - 1)
        entry = self.producers.get(producer_id)
        if entry is None:
            if first_seq != 0:
                # No state for this producer (never seen, or expired): Kafka answers UNKNOWN_PRODUCER_ID so
                # the client resets its sequence (KIP-360) instead of failing fatally.
                raise SequenceError(
                    "UNKNOWN_PRODUCER_ID", f"No state for producer {producer_id}; expected sequence 0, got {first_seq}"
                )
            return None
        if epoch < entry.epoch:
            raise SequenceError(
                "INVALID_PRODUCER_EPOCH", f"Epoch {epoch} of producer {producer_id} is older than {entry.epoch}"
            )
        if epoch > entry.epoch:
            if first_seq != 0:
                raise SequenceError(
                    "OUT_OF_ORDER_SEQUENCE_NUMBER",
                    f"A new epoch {epoch} of producer {producer_id} must start at sequence 0, got {first_seq}",
                )
            return None
        for b in entry.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        expected = _next_seq(entry.last_seq, 1)
        if first_seq != expected:
            raise SequenceError(
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                f"Out of order sequence number for producer {producer_id}: expected {expected}, got {first_seq}",
            )
        return None

    def record(
        self, producer_id: int, epoch: int, first_seq: int, count: int, base_offset: asyncio.Future[int] | int
    ) -> BatchRecord | None:
        if producer_id < 0:
            return None
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            entry = ProducerEntry(epoch)
            self.producers[producer_id] = entry
        rec = BatchRecord(first_seq, _next_seq(first_seq, count - 1), base_offset)
        entry.batches.append(rec)
        entry.last_seen_ms = int(time.time() * 1000)
        return rec

    def forget(self, producer_id: int, rec: BatchRecord) -> None:
        """Drop a batch whose append failed, so the client's retry is not mistaken for a duplicate."""
        entry = self.producers.get(producer_id)
        if entry is not None:
            try:
                entry.batches.remove(rec)
            except ValueError:
                pass

    def expire(self, older_than_ms: int) -> None:
        for pid in [pid for pid, e in self.producers.items() if e.last_seen_ms < older_than_ms]:
            del self.producers[pid]
