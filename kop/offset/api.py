"""What the Kafka handlers see of a partition: a log of record batches with continuous offsets.

This is the contract between the protocol side (kop/kafka/) and the offset layer (kop/offset/), which
implements it over one managed ledger per partition. Offsets live only here: every entry carries broker
entry metadata whose `index` is the offset of the entry's *last* record, so
base offset = index - (last_offset_delta of the batch), and nothing above this layer computes offsets from
positions.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Container
from dataclasses import dataclass
from typing import TypedDict

# One position type for the whole stack: the managed ledger's (ledger id, entry id), ordered like the log.
from kop.managed_ledger import FailureHook, ManagedLedger, ManagedLedgerConfig, Position
from kop.offset.compaction import DEFAULT_DELETE_RETENTION_MS, CleaningState, CompactionResult
from kop.offset.producer_state import AbortedTxn, ProducerStateTable
from kop.storage.api import FileSpan

Buffer = bytes | bytearray | memoryview


@dataclass(slots=True)
class FetchedBatch:
    """One stored record batch as read back. `batch` holds the whole Kafka v2 batch as produced
    (its first 8 bytes are not meaningful: the caller sends `base_offset` in their place)."""

    base_offset: int
    last_offset: int
    batch: memoryview
    position: Position
    entry: Buffer | None = None  # the whole stored entry, headers included (entry_format.producer_name_of)
    # A zero-copy read (PartitionLog.read(zero_copy=True)): `batch` holds only the batch's first bytes (its
    # header at least) and the rest stays in the ledger's file, sent from there; None: `batch` is all of it.
    rest: FileSpan | None = None


@dataclass(slots=True)
class ReadResult:
    batches: list[FetchedBatch]
    next_offset: int  # offset after the last returned batch (the cursor-cache key for the next read)
    next_position: Position | None  # position of the entry after the last returned one


class OffsetOutOfRange(Exception):
    """The requested offset is below the log start offset or above the high watermark."""


class NoSuchEntry(LookupError):
    """No retained entry at the position asked for (never written, trimmed by retention, or compacted away)."""


@dataclass(frozen=True, slots=True)
class EntryOffsets:
    """The offsets one stored entry holds, as its broker entry metadata says."""

    base_offset: int  # offset of the entry's first record
    last_offset: int  # the entry's index: offset of its last record
    append_time: int  # broker entry timestamp (ms), -1 when the entry has none


class DamageReport(TypedDict):
    """One damaged range of a partition's storage, as a read met it (kop/offset/damage.py): the ledger's
    entries and bytes, why, and the Kafka offsets they held. Admin internal stats show it as is."""

    ledgerId: int
    firstEntry: int
    lastEntry: int
    byteStart: int
    byteEnd: int
    reason: str
    firstOffset: int
    lastOffset: int


class PartitionLog(abc.ABC):
    """One Kafka partition = one managed ledger."""

    name: str  # managed-ledger name
    # The managed ledger beneath, for what is about storage and not offsets: its ledger list and sizes
    # (admin internal stats, backlog sizes), its config (segment.bytes / segment.ms apply to an open log).
    # Offsets are never computed from its positions outside kop/offset/ (use the offset <-> position
    # methods below).
    ml: ManagedLedger

    @property
    def fenced(self) -> bool:
        """Whether the managed ledger beneath fenced itself: this log takes no write any more (TopicManager
        opens the partition again while this broker owns it)."""
        return self.ml.fenced

    @property
    @abc.abstractmethod
    def log_start_offset(self) -> int:
        """First readable offset: max(base offset of the first stored entry, offset set by
        delete_records). Equals high_watermark when the log is empty."""

    @property
    @abc.abstractmethod
    def high_watermark(self) -> int:
        """Last durable offset + 1 (0 for an empty log). Only acknowledged entries count."""

    @property
    @abc.abstractmethod
    def size_bytes(self) -> int:
        """Stored bytes of the entries that are still retained."""

    @abc.abstractmethod
    async def append(self, batch: Buffer, last_offset_delta: int, max_timestamp: int) -> int:
        """Append one validated Kafka record batch as one entry; return its base offset once the entry is
        durable. The index advances by last_offset_delta + 1. Appends complete in issue order."""

    @abc.abstractmethod
    def append_nowait(self, batch: Buffer, last_offset_delta: int, max_timestamp: int,
                      on_failed: FailureHook | None = None) -> asyncio.Future[int]:
        """append() without a coroutine: issued now, the future gives the base offset once durable.
        `on_failed`: called at once when the append, once taken, fails (ManagedLedger.add_entry_nowait says
        why a future's callback is too late for producer state)."""

    @abc.abstractmethod
    def append_entry_nowait(self, batch: Buffer, last_offset_delta: int, max_timestamp: int,
                            producer_name: str = "", sequence_id: int = 0,
                            on_failed: FailureHook | None = None) -> asyncio.Future[tuple[Position, int]]:
        """Issue the append now; the future gives (entry position, base offset) once durable. The Pulsar
        handler needs the position: its SEND_RECEIPT names the entry (ledger, entry). `producer_name` and
        `sequence_id` (a Pulsar producer's) are kept in the entry's metadata, where FetchedBatch.entry gives them
        back."""

    # ---- offset <-> position: the only place either is computed from the other (ARCHITECTURE.md)

    @abc.abstractmethod
    async def position_of(self, offset: int) -> Position:
        """Position of the entry holding `offset` (the next entry when compaction left a gap there; the
        position the next entry will take when the gap is at the end). Raises OffsetOutOfRange for an offset
        not durable yet."""

    @abc.abstractmethod
    async def entry_offsets(self, position: Position) -> EntryOffsets:
        """The offsets of the entry at `position`; raises NoSuchEntry when no retained entry is there."""

    @abc.abstractmethod
    async def offset_of(self, position: Position) -> int:
        """First offset of the entry at `position`, clamped to the log: a position before the first retained
        entry gives the log start offset, one after the last entry the high watermark (Pulsar's earliest
        and latest message ids land there)."""

    @abc.abstractmethod
    async def offset_after(self, position: Position) -> int:
        """The offset after the entry at `position` (its last offset + 1); the log start offset when that
        entry is gone (retention)."""

    @abc.abstractmethod
    async def offset_appended_since(self, timestamp_ms: int) -> int:
        """First offset of the first entry whose broker append time is >= `timestamp_ms`; the high
        watermark when there is none."""

    @abc.abstractmethod
    async def entries_from(self, offset: int) -> int:
        """How many entries there are from the one holding `offset` to the end of the log."""

    @abc.abstractmethod
    async def nth_position_from(self, offset: int, n: int, skip: Container[Position]) -> Position | None:
        """Position of the n-th (1-based) entry from the one holding `offset` that is not in `skip`; None
        when fewer entries remain."""

    @abc.abstractmethod
    async def read(
        self, offset: int, max_bytes: int, hint: Position | None = None, min_one: bool = True,
        zero_copy: bool = False,
    ) -> ReadResult:
        """Batches from the one *containing* `offset` onwards, until their total size would exceed
        max_bytes (the first batch is returned even when larger, if min_one). `hint`, when given, is the
        position of the entry containing `offset` (from a cursor cache) and saves the search.
        Raises OffsetOutOfRange when offset < log_start_offset or offset > high_watermark.
        offset == high_watermark returns no batches. zero_copy: where the storage allows it (the local store,
        large entries), batches come back with only their headers kept (each entry's CRC checked first when
        the store verifies reads) and the rest as a span of the ledger's file (FetchedBatch.rest), for a send straight from the page cache
        (a plain-TCP Kafka connection: kop/kafka/connection.py)."""

    @abc.abstractmethod
    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= `timestamp`, or None when there
        is none (Kafka's rule, whatever the order of timestamps along the log)."""

    @abc.abstractmethod
    async def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (the first such record), or None
        for an empty log (KIP-734)."""

    @abc.abstractmethod
    async def delete_records(self, before_offset: int) -> int:
        """Advance the log start offset to `before_offset` (DeleteRecords) and release whole ledgers
        that fall entirely below it; returns the new log start offset."""

    @abc.abstractmethod
    async def apply_retention(self, retention_ms: int, retention_bytes: int, keep_offset: int | None = None) -> int:
        """Delete whole closed ledgers by age (-1 = unlimited) and by total size (-1 = unlimited), never
        the current ledger nor the one holding `keep_offset` or any later one (what a Pulsar subscription has
        not acknowledged); returns how many ledgers were deleted. Advances log_start_offset."""

    @property
    @abc.abstractmethod
    def delete_offset(self) -> int:
        """The log start offset DeleteRecords set (0 when never used); records below it are gone."""

    @property
    @abc.abstractmethod
    def retained_start(self) -> int | None:
        """Where the retained data starts: min(base offset of the first entry, the log start a compaction
        kept); None for a log without entries. (log_start_offset is this, raised to delete_offset.)"""

    @abc.abstractmethod
    async def compact(self, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS, *, roll_current: bool = False,
                      now_ms: int | None = None) -> CompactionResult:
        """One Kafka log compaction pass over the closed ledgers (kop/offset/compaction.py): the latest
        record of each key is kept, tombstones until delete.retention.ms after the pass that first kept
        them; offsets never change. roll_current: roll the current ledger first, so that everything
        written so far is cleaned. One pass at a time per log."""

    @abc.abstractmethod
    async def cleaning_state(self) -> CleaningState:
        """What the log cleaner decides from: dirty and clean bytes, the pending tombstone horizon, the age
        of the current ledger."""

    @property
    @abc.abstractmethod
    def rollovers(self) -> int:
        """Ledger rollovers of this log since it was opened (a metric)."""

    @abc.abstractmethod
    def reconfigure(self, config: ManagedLedgerConfig) -> None:
        """Apply new managed-ledger settings (a topic's segment.bytes / segment.ms changed) to the open log."""

    @property
    @abc.abstractmethod
    def damaged_ranges(self) -> dict[tuple[int, int], DamageReport]:
        """Damaged ranges reads met, by (ledger id, first entry); each reported once."""

    @property
    @abc.abstractmethod
    def damaged_reads(self) -> int:
        """Reads answered with a storage error (KAFKA_STORAGE_ERROR) since the log was opened."""

    @abc.abstractmethod
    async def tail_batches(self, max_entries: int) -> list[FetchedBatch]:
        """Up to the last `max_entries` batches, oldest first (to rebuild idempotent-producer state)."""

    # ---- transactions (kop/offset/producer_state.py holds the state; these are its I/O side)

    @abc.abstractmethod
    async def producer_state(self) -> ProducerStateTable:
        """The partition's producer state (idempotence, open transactions, aborted index), loaded on first
        use from its snapshot plus the log after it."""

    @abc.abstractmethod
    async def load_transactions(self) -> None:
        """Make last_stable_offset, aborted_transactions and is_aborted_batch exact: loads the producer
        state if the partition ever saw a transaction (cheap otherwise). Readers call it."""

    @abc.abstractmethod
    async def ensure_snapshot(self) -> ProducerStateTable:
        """producer_state(), with a snapshot stored first if none was ever stored: call before the first
        transactional append, so that a restart rebuilds transactions from a snapshot."""

    @property
    @abc.abstractmethod
    def last_stable_offset(self) -> int:
        """min(first offset of an open transaction, high watermark) - read_committed reads stop here. The
        high watermark while the producer state is not loaded (load it first)."""

    @abc.abstractmethod
    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions with last offset >= fetch_offset and first offset < upper, by first offset."""

    @abc.abstractmethod
    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        """A control batch, or a batch of an aborted transaction (needs the producer state loaded)."""

    @abc.abstractmethod
    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT (commit=True) or ABORT control batch ending the producer's transaction here;
        returns the marker's offset once durable (a marker takes one offset, as in Kafka). Raises
        kop.offset.producer_state.SequenceError with TRANSACTION_COORDINATOR_FENCED (older coordinator
        epoch than the partition saw) or INVALID_PRODUCER_EPOCH (older producer epoch)."""

    @abc.abstractmethod
    def wait_for_append(self) -> asyncio.Future[None]:
        """A future completed at the next durable append (long-poll fetches wait on it)."""

    @abc.abstractmethod
    def add_append_waiter(self, fut: asyncio.Future[None]) -> None:
        """Complete `fut` at the next durable append (or at close); one future may wait on many logs. Whoever
        registers it removes it with discard_append_waiter when done waiting."""

    @abc.abstractmethod
    def discard_append_waiter(self, fut: asyncio.Future[None]) -> None: ...

    @property
    @abc.abstractmethod
    def append_waiters(self) -> int:
        """Futures registered now (a gauge: a leak shows here)."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    def abandon(self) -> None:
        """Let go without writing anything (the broker lost its ZooKeeper session: another broker may
        already own the partition); waiters are released as by close()."""

    @abc.abstractmethod
    async def delete(self) -> None:
        """Remove the partition's data and metadata (topic deletion)."""

