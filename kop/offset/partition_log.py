"""PartitionLog over one managed ledger: Kafka offsets from broker entry metadata.

Each entry = broker entry metadata + kafka-format headers + one record batch (entry_format.py). The
IndexInterceptor (interceptor.py) stamps ``index`` = offset of the batch's last record when the add is
issued (in ledger order) and restores the counter when adds fail, so offsets never have gaps. Everything
else is derived, by parts that each own one concern:

* bounds.py - LogBounds: high watermark = last *durable* index + 1 (never counts adds still in flight:
  KoP's kop#1512); log start offset = max(base offset of the first retained entry, DeleteRecords offset);
  reads below it or above the high watermark raise OffsetOutOfRange (KoP skipped the low check);
* offset_index.py - OffsetIndex: offset -> entry, entry -> offsets, time -> offset, max timestamp, with
  the entry-header LRU and the per-ledger caches;
* transactions.py - ProducerStateStore: the producer state's load, replay and snapshots, the last stable
  offset, aborted transactions, transaction markers;
* retention.py - Retention: DeleteRecords, retention by age and size, compaction (compaction.py) and
  what the log start becomes after each;
* damage.py - DamageLog: damaged entries met by reads, reported once per range with their offsets.

This class composes them and keeps the hot paths itself: append_nowait / append_entry_nowait (issue the
add, answer from the interceptor's context once durable), the durable-append callback that updates the
parts' caches and wakes long polls, and read (fetch: a cursor-cache hint saves the search). The parts'
own methods are forwarded without a coroutine frame of their own (each forwarder returns the part's
coroutine), so going through this class costs no extra await.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Container, Coroutine
from typing import TYPE_CHECKING, TypeVar

from kop.managed_ledger import FailureHook, InvalidPositionError, ManagedLedger, ManagedLedgerConfig
from kop.offset.api import (
    DamageReport,
    EntryOffsets,
    FetchedBatch,
    OffsetOutOfRange,
    PartitionLog,
    Position,
    ReadResult,
)
from kop.offset.bounds import LogBounds
from kop.offset.compaction import DEFAULT_DELETE_RETENTION_MS, CleaningState, CompactionResult
from kop.offset.damage import DamageLog
from kop.offset.entry_format import (
    BATCH_TAIL,
    LAST_OFFSET_DELTA,
    EntryFormatError,
    EntryMeta,
    NamedEntry,
    entry_meta,
    index_and_start,
    parse_entry,
)
from kop.offset.interceptor import INDEX_PROPERTY, TXN_BITS, AddContext, IndexInterceptor
from kop.offset.offset_index import OffsetIndex, Trimmed
from kop.offset.producer_state import AbortedTxn, ProducerStateTable
from kop.offset.retention import LOG_START_PROPERTY, Retention
from kop.offset.transactions import PRODUCER_STATE_PROPERTY, ProducerStateStore, read_tail
from kop.storage.api import Buffer, FileEntry, LedgerDamagedError, NoSuchLedgerError, StorageError
from kop.storage.protobuf import encode_varint

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedgerFactory

# Re-exported: tools and tests name these through this module.
__all__ = [
    "ENTRY_OVERHEAD_MAX",
    "INDEX_PROPERTY",
    "LOG_START_PROPERTY",
    "PRODUCER_STATE_PROPERTY",
    "EntryMeta",
    "IndexInterceptor",
    "ManagedPartitionLog",
    "entry_meta",
]

_T = TypeVar("_T")
Co = Coroutine[object, object, _T]  # what a forwarder returns: the part's coroutine, awaited by the caller

_READ_MAX_ENTRIES = 1 << 20
# Upper bound of the bytes before the batch in one of our entries: 0x0e02 + size (6), BrokerEntryMetadata
# with two 10-byte varints (22), metadataSize (4), MessageMetadata (2+2+11+23+6 = 44). Reads count this
# much of each entry as free, so the ledger reads at least every batch that fits in max_bytes (and at most
# a few bytes more); the exact cut by batch size is made here. A Pulsar producer's entry also holds its name
# (entry_format.NamedEntry), counted as batch bytes here: a read may end one such entry early (read next time).
ENTRY_OVERHEAD_MAX = 6 + 22 + 4 + 44
# A zero-copy read (read(zero_copy=True)) reads this much of each entry: its headers (ENTRY_OVERHEAD_MAX, a
# Pulsar producer's name) and the batch's 61-byte header, in which the base offset is replaced. The rest of the
# batch goes from the ledger's file to the socket (FetchedBatch.rest). An entry whose headers are longer is
# read whole (read() retries the range without zero copy).
SPAN_HEAD = 512
BATCH_HEADER_SIZE = 61


def _head(data: Buffer | FileEntry) -> Buffer:
    """What was read of an entry: all of it, or a zero-copy read's head."""
    return data.head if isinstance(data, FileEntry) else data


class ManagedPartitionLog(LogBounds, PartitionLog):
    """The PartitionLog of kop/offset/api.py over one managed ledger. Open with `open()`.

    The log is its own LogBounds (the state its parts share): log_start_offset, high_watermark,
    delete_offset and retained_start are LogBounds' own, read without a hop through another object on
    every fetch, and the parts are handed the log as their `bounds`."""

    def __init__(self, name: str, ml: ManagedLedger, interceptor: IndexInterceptor,
                 on_close: Callable[[ManagedPartitionLog], None] | None = None) -> None:
        LogBounds.__init__(self, interceptor)
        self.name = name
        self.ml = ml
        self.interceptor = interceptor
        interceptor.on_durable = self._on_durable
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self.index = OffsetIndex(name, ml, self)
        self.damage = DamageLog(name, ml, self.index, self)
        self.txn = ProducerStateStore(name, ml, self, self.index, interceptor)
        self.retention = Retention(name, ml, self, self.index, self.txn)
        self._note_durable = self.index.note_durable  # bound once: called on every durable append
        self._waiters: set[asyncio.Future[None]] = set()  # woken by the next durable append (or close)
        self._closed = False

    @classmethod
    async def open(cls, factory: ManagedLedgerFactory, name: str, config: ManagedLedgerConfig | None = None,
                   on_close: Callable[[ManagedPartitionLog], None] | None = None) -> ManagedPartitionLog:
        interceptor = IndexInterceptor()
        ml = await factory.open(name, config, interceptor)
        if ml.interceptor is not interceptor:
            raise RuntimeError(f"managed ledger {name} is already open without this partition log")
        log = cls(name, ml, interceptor, on_close)
        log.retention.load_delete_offset()
        await log.index.refresh_bounds()
        return log

    # ------------------------------------------------------------------------------------ offsets

    def __repr__(self) -> str:
        return f"ManagedPartitionLog({self.name!r}, {LogBounds.__repr__(self)})"

    @property
    def size_bytes(self) -> int:
        return self.ml.total_size

    @property
    def rollovers(self) -> int:
        return self.ml.rollovers

    def reconfigure(self, config: ManagedLedgerConfig) -> None:
        if self.ml.config != config:
            self.ml.reconfigure(config)

    def _on_durable(self, position: Position, context: AddContext) -> None:
        """Once per durable append (the produce hot path): the producer state when it has markers to
        complete or snapshots to keep (a partition that never saw a transaction has neither), the offset
        index's per-ledger caches, then the long polls waiting for data."""
        table = self.txn.table
        if table is not None and (table.completing or table.snapshot_offset is not None):
            self.txn.on_durable(context[1])
        self._note_durable(position, context)
        waiters = self._waiters
        if waiters:
            self._waiters = set()
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    # ------------------------------------------------------------------------------------ the offset index

    def probe(self, ledger_id: int, entry_id: int) -> Co[EntryMeta]:
        """The headers of one entry (OffsetIndex.probe)."""
        return self.index.probe(ledger_id, entry_id)

    def last_index_of(self, ledger_id: int, entries: int) -> Co[int]:
        return self.index.last_index_of(ledger_id, entries)

    def find_position(self, offset: int) -> Co[Position]:
        """Position of the first entry whose index >= offset (OffsetIndex.find_position)."""
        return self.index.find_position(offset)

    def position_of(self, offset: int) -> Co[Position]:
        return self.index.find_position(offset)

    def entry_offsets(self, position: Position) -> Co[EntryOffsets]:
        return self.index.entry_offsets(position)

    def offset_of(self, position: Position) -> Co[int]:
        return self.index.offset_of(position)

    def offset_after(self, position: Position) -> Co[int]:
        return self.index.offset_after(position)

    def offset_appended_since(self, timestamp_ms: int) -> Co[int]:
        return self.index.offset_appended_since(timestamp_ms)

    def entries_from(self, offset: int) -> Co[int]:
        return self.index.entries_from(offset)

    def nth_position_from(self, offset: int, n: int, skip: Container[Position]) -> Co[Position | None]:
        return self.index.nth_position_from(offset, n, skip)

    def offset_for_timestamp(self, timestamp: int) -> Co[tuple[int, int] | None]:
        return self.index.offset_for_timestamp(timestamp)

    def max_timestamp(self) -> Co[tuple[int, int] | None]:
        return self.index.max_timestamp()

    # ------------------------------------------------------------------------------------ append

    async def append(self, batch: Buffer, last_offset_delta: int, max_timestamp: int) -> int:
        """`max_timestamp` is informational: the stored batch header (or, for LogAppendTime, the broker
        timestamp) is what searches use, so the two can never disagree. A transactional batch (e.g. the
        group coordinator's TxnOffsetCommit records) first gets the producer state loaded and snapshotted,
        so its transaction is tracked from its first offset (append_nowait callers do that themselves)."""
        if len(batch) > 22 and BATCH_TAIL.unpack_from(batch, 21)[0] & TXN_BITS:
            table = self.txn.table
            if table is None or table.snapshot_offset is None:
                await self.txn.ensure_snapshot()
        return await self.append_nowait(batch, last_offset_delta, max_timestamp)

    def append_nowait(self, batch: Buffer, last_offset_delta: int, max_timestamp: int,
                      on_failed: FailureHook | None = None) -> asyncio.Future[int]:
        """append() without a coroutine: the add is issued now, and the future gives the base offset once
        it is durable. The produce hot path uses this: a Task per append cost a task creation and two more
        event-loop hops per batch (py-spy: ensure_future ~11% of the broker's busy time under
        kafka-e2e-latency)."""
        out: asyncio.Future[int] = self._loop.create_future()

        def done(f: asyncio.Future[tuple[Position, AddContext]]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
            elif (exc := f.exception()) is not None:
                out.set_exception(exc)
            else:
                out.set_result(f.result()[1][0] + 1)

        try:
            self.ml.add_entry_nowait(batch, last_offset_delta + 1, on_failed).add_done_callback(done)
        except Exception as e:  # noqa: BLE001 - handed to the awaiting producer like any failed append
            out.set_exception(e)
        return out

    def append_entry_nowait(self, batch: Buffer, last_offset_delta: int, max_timestamp: int,
                            producer_name: str = "", sequence_id: int = 0,
                            on_failed: FailureHook | None = None) -> asyncio.Future[tuple[Position, int]]:
        """append_nowait() that also gives the entry's position: the Pulsar handler's SEND_RECEIPT carries
        the message id (ledger, entry), which the base offset alone does not name. `producer_name` and
        `sequence_id`: the Pulsar producer's, kept in the entry's metadata (entry_format.NamedEntry)."""
        out: asyncio.Future[tuple[Position, int]] = self._loop.create_future()

        def done(f: asyncio.Future[tuple[Position, AddContext]]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
            elif (exc := f.exception()) is not None:
                out.set_exception(exc)
            else:
                position, context = f.result()
                out.set_result((position, context[0] + 1))

        try:
            data = NamedEntry(batch, producer_name.encode("utf-8"), encode_varint(max(sequence_id, 0))) \
                if producer_name else batch
            self.ml.add_entry_nowait(data, last_offset_delta + 1, on_failed).add_done_callback(done)
        except Exception as e:  # noqa: BLE001 - handed to the awaiting producer like any failed append
            out.set_exception(e)
        return out

    def wait_for_append(self) -> asyncio.Future[None]:
        """A future done at the next durable append (or at close); cancelling it unregisters it."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self.add_append_waiter(fut)
        if not fut.done():
            fut.add_done_callback(self.discard_append_waiter)
        return fut

    def add_append_waiter(self, fut: asyncio.Future[None]) -> None:
        """Complete `fut` at the next durable append (or at close). One future may wait on many logs (a
        long-polling Fetch of many partitions); whoever registered it removes it with discard_append_waiter
        when done waiting - a registration left behind on a partition that sees no append would be kept
        until one comes (one per long poll: a consumer of idle partitions would grow the set forever)."""
        if self._closed:
            if not fut.done():
                fut.set_result(None)
        else:
            self._waiters.add(fut)

    def discard_append_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)

    @property
    def append_waiters(self) -> int:
        return len(self._waiters)

    # ------------------------------------------------------------------------------------ read

    def _check_range(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.high_watermark:
            raise OffsetOutOfRange(
                f"{self.name}: offset {offset} outside [{self.log_start_offset}, {self.high_watermark}]"
            )

    async def read(self, offset: int, max_bytes: int, hint: Position | None = None,
                   min_one: bool = True, zero_copy: bool = False) -> ReadResult:
        for _ in range(3):
            self._check_range(offset)
            if offset == self.interceptor.durable_index + 1:
                return ReadResult([], offset, hint if hint is not None else self.index.end_position())
            try:
                return await self._read(offset, max_bytes, hint, min_one, zero_copy)
            except EntryFormatError:
                if not zero_copy:
                    raise
                zero_copy = False  # an entry whose headers outgrow SPAN_HEAD: read this range whole
            except LedgerDamagedError as e:
                await self.damage.report(e)
                raise
            except (Trimmed, InvalidPositionError, NoSuchLedgerError):
                # The ledger list changed under us (retention, DeleteRecords): re-check and retry.
                hint = None
                await self.index.refresh_bounds()
            except StorageError as e:  # an I/O error reading: Fetch answers KAFKA_STORAGE_ERROR; said once
                self.damage.read_failed(offset, e)
                raise
        self._check_range(offset)
        raise OffsetOutOfRange(f"{self.name}: offset {offset} could not be read")

    async def _read(self, offset: int, max_bytes: int, hint: Position | None, min_one: bool,
                    zero_copy: bool) -> ReadResult:
        ml = self.ml
        budget = max(max_bytes, 0)
        entries = None
        gap = False  # the first entry starts after `offset`: compaction removed the batches holding it
        head_bytes = SPAN_HEAD if zero_copy else 0
        if hint is not None:
            with contextlib.suppress(InvalidPositionError):
                entries = await ml.read_entry_spans(hint, _READ_MAX_ENTRIES, budget, ENTRY_OVERHEAD_MAX, head_bytes)
            if entries:
                first = _head(entries[0].data)
                _, index, start = parse_entry(first)
                base = index - LAST_OFFSET_DELTA.unpack_from(first, start + 23)[0]
                if offset < base and await self.index.gap_before(entries[0].ledger_id, entries[0].entry_id, offset):
                    gap = True
                elif not base <= offset <= index:
                    entries = None  # a stale hint
        if not entries:
            position = await self.index.find_position(offset)
            entries = await ml.read_entry_spans(position, _READ_MAX_ENTRIES, budget, ENTRY_OVERHEAD_MAX, head_bytes)
            if not entries:  # offset is in a gap at the end of a compacted log
                return ReadResult([], offset, position)
            first = _head(entries[0].data)
            _, index, start = parse_entry(first)
            if index - LAST_OFFSET_DELTA.unpack_from(first, start + 23)[0] > offset:
                # The entry after a gap (compaction) - unless the offset was trimmed meanwhile.
                await self.index.refresh_bounds()
                if offset < self.log_start_offset:
                    raise Trimmed
                gap = True
        batches: list[FetchedBatch] = []
        total = 0
        # Per batch (hundreds per fetch of small batches): the index read inline (index_and_start), the
        # tuple and struct helpers bound once; no other work.
        append = batches.append
        last_delta = LAST_OFFSET_DELTA.unpack_from
        new_position = tuple.__new__  # Position(lid, eid) without the namedtuple's Python-level __new__
        for lid, eid, data in entries:
            if isinstance(data, FileEntry):  # a zero-copy read: the head holds the headers and the batch header
                rest = data.rest
                data = data.head
                index, start = index_and_start(data)
                view = memoryview(data)[start:]
                if len(view) < BATCH_HEADER_SIZE and rest is not None:
                    raise EntryFormatError("the batch header is not in the entry's head")
                size = len(view) + rest.length if rest is not None else len(view)
            else:
                rest = None
                index, start = index_and_start(data)
                view = data[start:] if type(data) is memoryview else memoryview(data)[start:]
                size = len(view)
            base = index - last_delta(view, 23)[0]
            if batches:
                if total + size > max_bytes:
                    break
            elif (base > offset and not gap) or index < offset:  # the log changed under us
                raise Trimmed
            elif not min_one and size > max_bytes:
                return ReadResult([], offset, Position(lid, eid))
            total += size
            append(FetchedBatch(base, index, view, new_position(Position, (lid, eid)), data, rest))
        if not batches:
            return ReadResult([], offset, hint)
        last = batches[-1]
        next_position: Position | None = None
        with contextlib.suppress(InvalidPositionError):
            p = ml.next_position(last.position)
            next_position = p
        return ReadResult(batches, last.last_offset + 1, next_position)

    async def tail_batches(self, max_entries: int) -> list[FetchedBatch]:
        return await self.index.stable(lambda: read_tail(self.ml, max_entries))

    # ------------------------------------------------------------------------------------ retention, compaction

    def delete_records(self, before_offset: int) -> Co[int]:
        return self.retention.delete_records(before_offset)

    def apply_retention(self, retention_ms: int, retention_bytes: int, keep_offset: int | None = None) -> Co[int]:
        return self.retention.apply_retention(retention_ms, retention_bytes, keep_offset)

    def compact(self, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS, *, roll_current: bool = False,
                now_ms: int | None = None) -> Co[CompactionResult]:
        """Kafka log compaction of the closed ledgers (Retention.compact)."""
        return self.retention.compact(delete_retention_ms, roll_current=roll_current, now_ms=now_ms)

    def cleaning_state(self) -> Co[CleaningState]:
        return self.retention.cleaning_state()

    # ------------------------------------------------------------------------------------ damage

    @property
    def damaged_ranges(self) -> dict[tuple[int, int], DamageReport]:
        return self.damage.ranges

    @property
    def damaged_reads(self) -> int:
        return self.damage.reads

    # ------------------------------------------------------------------------------------ transactions

    def producer_state(self) -> Co[ProducerStateTable]:
        return self.txn.load()

    def load_transactions(self) -> Co[None]:
        return self.txn.load_transactions()

    def ensure_snapshot(self) -> Co[ProducerStateTable]:
        return self.txn.ensure_snapshot()

    @property
    def last_stable_offset(self) -> int:
        return self.txn.last_stable_offset

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        return self.txn.aborted_transactions(fetch_offset, upper)

    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        return self.txn.is_aborted_batch(batch, base_offset)

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT/ABORT control batch for `producer_id`; returns its offset once durable. Raises
        producer_state.SequenceError (TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH)."""
        batch = await self.txn.marker_batch(producer_id, producer_epoch, commit, coordinator_epoch)
        return await self.append(batch, 0, -1)

    # ------------------------------------------------------------------------------------ lifecycle

    def _release_waiters(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for f in waiters:
            if not f.done():
                f.set_result(None)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.txn.close()
        self._release_waiters()
        try:
            await self.ml.close()
        finally:
            if self._on_close is not None:
                self._on_close(self)

    def abandon(self) -> None:
        """Let go without writing anything: the broker lost its ZooKeeper session, so another broker may
        already own this partition - neither the ledger nor the managed-ledger info may be touched."""
        if self._closed:
            return
        self._closed = True
        self.txn.closed = True
        self._release_waiters()
        try:
            self.ml.abandon()
        finally:
            if self._on_close is not None:
                self._on_close(self)

    async def delete(self) -> None:
        await self.close()
        await self.ml.delete()
