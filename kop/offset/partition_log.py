"""PartitionLog over one managed ledger: Kafka offsets from broker entry metadata.

Each entry = broker entry metadata + kafka-format headers + one record batch (entry_format.py). The
IndexInterceptor stamps ``index`` = offset of the batch's last record when the add is issued (in ledger
order) and restores the counter when adds fail, so offsets never have gaps. Everything else is derived:

* high watermark = last *durable* index + 1 (never counts adds still in flight: KoP's kop#1512);
* log start offset = max(base offset of the first retained entry, DeleteRecords offset kept as the
  managed-ledger property ``kop.logStartOffset``); reads below it or above the high watermark raise
  OffsetOutOfRange (KoP skipped the low check);
* offset -> entry: find the ledger by its last index (cached per ledger, learned by one read), then
  bisect its entries for the first one whose index >= offset; entry headers come from short prefix reads
  cached in an LRU, so repeated searches cost a few dict lookups;
* time -> offset: the first batch whose max timestamp (the broker timestamp for LogAppendTime batches) reaches
  the target, found ledger by ledger through cached per-ledger maxima, then entry by entry,
  then walk the records of the found batch;
* max timestamp: per-ledger (max, first entry with it) summaries, kept up to date on appends and computed
  once for ledgers written before this process started;
* compaction (kop/offset/compaction.py) leaves gaps: offsets are never renumbered, so an offset may fall
  between two entries (the search then gives the next entry, whose batch a fetch returns) or after the
  last one (a fetch returns nothing). Multi-step searches re-run when the ledger list changed under them
  (ManagedLedger.layout_version).
* damaged entries (kop/storage/local/ledgers.py: a checksum mismatch, a truncated sealed ledger): a read
  serves the intact batches before the damage and raises LedgerDamagedError when it starts at a damaged
  entry, which Fetch answers as KAFKA_STORAGE_ERROR for that range only; the first time each damaged range
  is met it is logged once with the ledger, entries, bytes and Kafka offsets, and kept in `damaged_ranges`
  (admin internal stats). Searches step over a damaged entry: its index is taken as the next intact
  entry's base offset - 1, so the offsets it held still lead to it (and to the error), not past it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Container, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from kop.managed_ledger import (
    InvalidPositionError,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerInterceptor,
)
from kop.offset.api import (
    EntryOffsets,
    FetchedBatch,
    NoSuchEntry,
    OffsetOutOfRange,
    PartitionLog,
    Position,
    ReadResult,
)
from kop.offset.compaction import (
    COMPACTION_START_PROPERTY,
    DEFAULT_DELETE_RETENTION_MS,
    CleaningState,
    CompactionResult,
    cleaning_state,
    compact_log,
    compaction_start,
)
from kop.offset.entry_format import EntryFormatError, EntryHeaderEncoder, parse_entry
from kop.offset.producer_state import ABORT, COMMIT, AbortedTxn, ProducerStateTable
from kop.protocol.records import (
    CONTROL_BIT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    build_batch,
    decode_records,
    parse_batch_header,
)
from kop.storage.api import Buffer, LedgerDamagedError, NoSuchLedgerError, StorageError

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedgerFactory

log = logging.getLogger(__name__)

INDEX_PROPERTY = "index"  # Pulsar's AppendIndexMetadataInterceptor property
LOG_START_PROPERTY = "kop.logStartOffset"
# Producer-state snapshot (JSON): idempotence, open transactions and the aborted-transaction index as of an
# offset; rebuilt at open by replaying the entries from that offset on.
PRODUCER_STATE_PROPERTY = "kop.producerState"
SNAPSHOT_EVERY_OFFSETS = 10_000  # a new snapshot once the durable end moved this far past the last one
PRODUCER_STATE_TAIL_ENTRIES = 1000  # entries replayed for idempotence when no snapshot was ever taken
_REPLAY_CHUNK = 256
_TXN_BITS = TRANSACTIONAL_BIT | CONTROL_BIT

_PREFIX_BYTES = 256  # broker entry metadata + kafka-format headers + the 61-byte batch header, with room
_TAIL = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp at byte 21
_LOD = struct.Struct(">i")  # lastOffsetDelta at byte 23
_PROBE_CACHE = 4096
_DAMAGE_WALK = 10_000  # damaged runs stepped over when looking for the next intact entry
_T = TypeVar("_T")
_READ_MAX_ENTRIES = 1 << 20
_INT64_MAX = (1 << 63) - 1  # Pulsar's MessageId.latest: (Long.MAX_VALUE, Long.MAX_VALUE)
# Upper bound of the bytes before the batch in one of our entries: 0x0e02 + size (6), BrokerEntryMetadata
# with two 10-byte varints (22), metadataSize (4), MessageMetadata (2+2+11+23+6 = 44). Reads count this
# much of each entry as free, so the ledger reads at least every batch that fits in max_bytes (and at most
# a few bytes more); the exact cut by batch size is made here.
ENTRY_OVERHEAD_MAX = 6 + 22 + 4 + 44


class EntryMeta(NamedTuple):
    """What searches need from one entry's headers."""

    index: int  # offset of the last record
    last_offset_delta: int
    timestamp: int  # batch max timestamp; the broker timestamp for LogAppendTime batches
    broker_timestamp: int

    @property
    def base_offset(self) -> int:
        return self.index - self.last_offset_delta


def entry_meta(data: Buffer) -> EntryMeta:
    ts, index, start = parse_entry(data)
    if index < 0:
        raise EntryFormatError("entry has no broker entry metadata index")
    try:
        attributes, lod, _, max_ts = _TAIL.unpack_from(data, start + 21)
    except struct.error:
        raise EntryFormatError("record batch header is truncated") from None
    return EntryMeta(index, lod, ts if attributes & TIMESTAMP_TYPE_BIT else max_ts, ts)


class _Trimmed(Exception):  # noqa: N818 - internal signal
    """The entry found for an offset starts after it: the data was trimmed meanwhile."""


class IndexInterceptor(ManagedLedgerInterceptor):
    """Pulsar's AppendIndexMetadataInterceptor + AppendBrokerTimestampMetadataInterceptor, kafka format.

    `index` counts records issued (offset of the last one, -1 when none); `durable_index` counts the
    acknowledged ones. Recovery: max(property "index", index in the last entry of the log)."""

    def __init__(self, on_durable: Callable[[Position, tuple[int, int, int]], None] | None = None) -> None:
        self.index = -1
        self.durable_index = -1
        self.on_durable = on_durable
        self._encoder = EntryHeaderEncoder()
        # Transactional and control batches are told to the partition's producer state when their add is
        # issued (their offsets are known from then on); undone when the add fails.
        self.on_txn_issue: Callable[[int, int, Any], None] | None = None
        self.on_txn_unissue: Callable[[int, Any], None] | None = None
        self._txn_inflight: deque[tuple[int, int, Any]] = deque()  # (base, index, batch) until durable

    def on_properties_initialize(self, properties: Mapping[str, str]) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.index = max(self.index, int(properties[INDEX_PROPERTY]))
        self.durable_index = self.index

    def on_open(self, last_entry: Buffer | None) -> None:
        if last_entry is not None:
            _, index, _ = parse_entry(last_entry)
            self.index = max(self.index, index)
        self.durable_index = self.index

    def before_add_entry(self, data: Any, num_messages: int) -> tuple[Any, tuple[int, int, int]]:
        prev = self.index
        index = prev + num_messages
        self.index = index
        now = time.time_ns() // 1_000_000
        header = self._encoder.encode(now, index, num_messages)
        try:
            attributes, _, _, max_ts = _TAIL.unpack_from(data, 21)
            ts = now if attributes & TIMESTAMP_TYPE_BIT else max_ts
            if attributes & _TXN_BITS and self.on_txn_issue is not None:
                self.on_txn_issue(prev + 1, index, data)
                self._txn_inflight.append((prev + 1, index, data))
        except (struct.error, TypeError):
            ts = now
        return (header, data), (prev, index, ts)

    def after_add_entry(self, position: Position, context: tuple[int, int, int]) -> None:
        self.durable_index = context[1]
        inflight = self._txn_inflight
        while inflight and inflight[0][1] <= context[1]:
            inflight.popleft()
        if self.on_durable is not None:
            self.on_durable(position, context)

    def on_adds_failed(self, first_context: tuple[int, int, int]) -> None:
        self.index = first_context[0]
        inflight = self._txn_inflight
        while inflight and inflight[-1][0] > first_context[0]:
            base, _, data = inflight.pop()
            if self.on_txn_unissue is not None:
                self.on_txn_unissue(base, data)

    def properties(self) -> Mapping[str, str]:
        return {INDEX_PROPERTY: str(self.durable_index)}


class ManagedPartitionLog(PartitionLog):
    """The PartitionLog of kop/offset/api.py over one managed ledger. Open with `open()`."""

    def __init__(self, name: str, ml: ManagedLedger, interceptor: IndexInterceptor,
                 on_close: Callable[[ManagedPartitionLog], None] | None = None) -> None:
        self.name = name
        self.ml = ml
        self.interceptor = interceptor
        interceptor.on_durable = self._on_durable
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._first_offset: int | None = None  # base offset of the first retained entry
        self._delete_offset = 0
        self._ledger_last_index: dict[int, int] = {}
        self._ledger_max: dict[int, tuple[int, int, int]] = {}  # ledger -> (max ts, entry, entries covered)
        self._probes: OrderedDict[tuple[int, int], EntryMeta] = OrderedDict()
        self._waiters: set[asyncio.Future[None]] = set()  # woken by the next durable append (or close)
        self._closed = False
        self._start_floor: int | None = None  # log start kept by compaction (kop.compactionStart)
        self._compaction_lock = asyncio.Lock()
        self.damaged_ranges: dict[tuple[int, int], dict[str, Any]] = {}  # (ledger, first entry) -> report
        self.damaged_reads = 0  # reads answered with LedgerDamagedError (KAFKA_STORAGE_ERROR)
        self._read_errors: set[str] = set()
        self._producers: ProducerStateTable | None = None  # loaded by producer_state()
        self._producers_loading: asyncio.Future[ProducerStateTable] | None = None
        self._snapshot_task: asyncio.Task[None] | None = None
        self._warned_aborted_cap = False

    @classmethod
    async def open(cls, factory: ManagedLedgerFactory, name: str, config: ManagedLedgerConfig | None = None,
                   on_close: Callable[[ManagedPartitionLog], None] | None = None) -> ManagedPartitionLog:
        interceptor = IndexInterceptor()
        ml = await factory.open(name, config, interceptor)
        if ml.interceptor is not interceptor:
            raise RuntimeError(f"managed ledger {name} is already open without this partition log")
        log = cls(name, ml, interceptor, on_close)
        with contextlib.suppress(KeyError, ValueError):
            log._delete_offset = int(ml.properties[LOG_START_PROPERTY])
        await log._refresh_first_offset()
        return log

    # ------------------------------------------------------------------------------------ offsets

    @property
    def high_watermark(self) -> int:
        return self.interceptor.durable_index + 1

    @property
    def log_start_offset(self) -> int:
        hwm = self.interceptor.durable_index + 1
        first = self._first_offset
        floor = self._start_floor
        if floor is not None and (first is None or floor < first):
            first = floor  # compaction removed the first batches: the log still starts where it did
        if first is None:
            return hwm
        return min(hwm, max(first, self._delete_offset))

    @property
    def size_bytes(self) -> int:
        return self.ml.total_size

    @property
    def rollovers(self) -> int:
        return self.ml.rollovers

    def _on_durable(self, position: Position, context: tuple[int, int, int]) -> None:
        prev, index, ts = context
        producers = self._producers
        if producers is not None:
            if producers.completing:
                producers.durable(index)
            snap = producers.snapshot_offset
            if snap is not None and index - snap >= SNAPSHOT_EVERY_OFFSETS and self._snapshot_task is None:
                self._snapshot_task = self._loop.create_task(self._snapshot())
        lid, eid = position
        self._ledger_last_index[lid] = index
        if self._first_offset is None:
            self._first_offset = prev + 1
        if eid == 0:
            self._ledger_max[lid] = (ts, 0, 1)
        else:
            summary = self._ledger_max.get(lid)
            if summary is not None and summary[2] == eid:
                self._ledger_max[lid] = (ts, eid, eid + 1) if ts > summary[0] else (summary[0], summary[1], eid + 1)
        waiters = self._waiters
        if waiters:
            self._waiters = set()
            for f in waiters:
                if not f.done():
                    f.set_result(None)

    async def _refresh_first_offset(self) -> None:
        self._start_floor = compaction_start(self.ml.properties)
        first = self.ml.first_position()
        if first is None:
            self._first_offset = None
        else:
            self._first_offset = (await self.probe(first.ledger_id, first.entry_id)).base_offset

    # ------------------------------------------------------------------------------------ entry headers

    async def _read_meta(self, ledger_id: int, entry_id: int) -> EntryMeta:
        position = Position(ledger_id, entry_id)
        data = await self.ml.read_entry_prefix(position, _PREFIX_BYTES)
        try:
            return entry_meta(data)
        except EntryFormatError:
            if len(data) < _PREFIX_BYTES:
                raise  # that was the whole entry
        return entry_meta(await self.ml.read_entry(position))

    async def probe(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """The headers of one entry (cached: searches probe the same entries again and again)."""
        key = (ledger_id, entry_id)
        probes = self._probes
        meta = probes.get(key)
        if meta is not None:
            probes.move_to_end(key)
            return meta
        try:
            meta = await self._read_meta(ledger_id, entry_id)
        except LedgerDamagedError as e:
            meta = EntryMeta(await self._index_after_damage(e), 0, -1, -1)
        probes[key] = meta
        if len(probes) > _PROBE_CACHE:
            probes.popitem(last=False)
        return meta

    async def _index_after_damage(self, e: LedgerDamagedError) -> int:
        """The last offset a damaged run of entries held: the next intact entry's base offset - 1 (the
        high watermark - 1 when none follows). Offsets have no gaps (but compaction's, which only
        makes this estimate larger: still within the damaged run's reach)."""
        ml = self.ml
        pos = Position(e.ledger_id, e.last_entry)
        for _ in range(_DAMAGE_WALK):
            try:
                if ml.ordinal_of(pos) + 1 >= ml.number_of_entries:
                    break
                pos = ml.next_position(pos)
                return (await self._read_meta(pos.ledger_id, pos.entry_id)).base_offset - 1
            except LedgerDamagedError as more:
                pos = Position(more.ledger_id, max(more.last_entry, pos.entry_id))
            except InvalidPositionError:
                break
        return self.interceptor.durable_index

    async def _report_damage(self, e: LedgerDamagedError) -> None:
        """Say once per damaged range what a read met, with the Kafka offsets it costs."""
        self.damaged_reads += 1
        key = (e.ledger_id, e.first_entry)
        if key in self.damaged_ranges:
            return
        first = self.log_start_offset
        with contextlib.suppress(LedgerDamagedError, InvalidPositionError, OffsetOutOfRange):
            if e.first_entry > 0:
                first = (await self.probe(e.ledger_id, e.first_entry - 1)).index + 1
            else:
                previous = None
                for lid, n in self.ml.ledger_counts():
                    if lid == e.ledger_id:
                        break
                    if n:
                        previous = (lid, n)
                if previous is not None:
                    first = await self.last_index_of(*previous) + 1
        last = await self._index_after_damage(e)
        report = {"ledgerId": e.ledger_id, "firstEntry": e.first_entry, "lastEntry": e.last_entry,
                  "byteStart": e.byte_start, "byteEnd": e.byte_end, "reason": e.reason,
                  "firstOffset": first, "lastOffset": last}
        self.damaged_ranges[key] = report
        log.error("partition %s: damaged storage: ledger %d entries %d..%d (bytes %d..%d, %s) hold offsets "
                  "%d..%d, which answer KAFKA_STORAGE_ERROR; the offsets before and after them are served",
                  self.name, e.ledger_id, e.first_entry, e.last_entry, e.byte_start, e.byte_end, e.reason,
                  first, last)

    async def last_index_of(self, ledger_id: int, entries: int) -> int:
        """The index of the last entry of a ledger of `entries` entries (cached for closed ledgers)."""
        index = self._ledger_last_index.get(ledger_id)
        if index is None:
            index = (await self.probe(ledger_id, entries - 1)).index
            if ledger_id != self.ml.current_ledger_id:
                self._ledger_last_index[ledger_id] = index
        return index

    async def find_position(self, offset: int) -> Position:
        """Position of the first entry whose index >= offset (the entry containing `offset`, or after a
        compaction the first entry past the gap holding it; the position the next entry will take when
        `offset` lies in a gap at the end).

        Ledger first: bisect on each ledger's last index (known for every ledger written by this
        process, learned with one read otherwise). Then inside the ledger: interpolation on the indexes
        of the range ends (batches of similar record counts make the first guess exact or nearly so),
        falling back to bisection whenever a guess does not at least halve the range, so the worst case
        stays O(log n) reads."""
        ledgers = [(lid, n) for lid, n in self.ml.ledger_counts() if n]
        if offset > self.interceptor.durable_index:
            raise OffsetOutOfRange(f"{self.name}: offset {offset} is not stored yet")
        if not ledgers:  # compaction removed every record
            return self.ml.position_of(self.ml.number_of_entries)
        last_index = await self.last_index_of(*ledgers[-1])
        if offset > last_index:  # in a gap that compaction left at the end: no entry holds it
            return self.ml.position_of(self.ml.number_of_entries)
        lo, hi = 0, len(ledgers) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if await self.last_index_of(*ledgers[mid]) >= offset:
                hi = mid
            else:
                lo = mid + 1
        ledger_id, entries = ledgers[lo]
        # index of the entry before `lo` (< offset) and of entry `hi` (>= offset), when known
        lo_index: int | None = None
        if lo > 0:
            lo_index = self._ledger_last_index.get(ledgers[lo - 1][0])
        elif self._first_offset is not None:
            lo_index = self._first_offset - 1
        hi_index = self._ledger_last_index.get(ledger_id)
        if lo == len(ledgers) - 1:
            hi_index = last_index
        # The bounds only steer the guesses; any mid in [lo, hi) keeps the answer in [lo, hi].
        lo, hi = 0, entries - 1
        interpolate = lo_index is not None and hi_index is not None
        while lo < hi:
            width = hi - lo
            mid = (lo + hi) // 2
            if interpolate:
                assert lo_index is not None and hi_index is not None
                per_entry = (hi_index - lo_index) / (width + 1)
                if per_entry > 0:
                    mid = min(max(lo + int((offset - lo_index - 1) / per_entry), lo), hi - 1)
            index = (await self.probe(ledger_id, mid)).index
            if index >= offset:
                hi, hi_index = mid, index
            else:
                lo, lo_index = mid + 1, index
            interpolate = lo_index is not None and hi_index is not None and (hi - lo) * 2 <= width
        return Position(ledger_id, lo)

    async def position_of(self, offset: int) -> Position:
        return await self.find_position(offset)

    async def entry_offsets(self, position: Position) -> EntryOffsets:
        try:
            meta = await self.probe(position.ledger_id, position.entry_id)
        except (InvalidPositionError, NoSuchLedgerError, StorageError, EntryFormatError, IndexError, KeyError) as e:
            raise NoSuchEntry(f"{self.name}: no entry at {position}: {e}") from None
        return EntryOffsets(meta.base_offset, meta.index, meta.broker_timestamp)

    async def offset_of(self, position: Position) -> int:
        if position.ledger_id < 0:
            return self.log_start_offset
        if position.ledger_id >= _INT64_MAX or position.entry_id >= _INT64_MAX:
            return self.high_watermark
        try:
            got = await self.entry_offsets(Position(position.ledger_id, max(position.entry_id, 0)))
        except NoSuchEntry:  # before the first retained entry, or after the last
            last = self.ml.last_confirmed_position
            if last is None or position > last:
                return self.high_watermark
            return self.log_start_offset
        return max(got.base_offset, self.log_start_offset)

    async def offset_after(self, position: Position) -> int:
        try:
            return (await self.entry_offsets(position)).last_offset + 1
        except NoSuchEntry:
            return self.log_start_offset

    async def offset_appended_since(self, timestamp_ms: int) -> int:
        ml = self.ml
        lo, hi = 0, ml.number_of_entries
        while lo < hi:
            mid = (lo + hi) // 2
            if (await self.entry_offsets(ml.position_of(mid))).append_time >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        if lo >= ml.number_of_entries:
            return self.high_watermark
        return max((await self.entry_offsets(ml.position_of(lo))).base_offset, self.log_start_offset)

    async def entries_from(self, offset: int) -> int:
        if offset >= self.high_watermark:
            return 0
        ml = self.ml
        start = await self.find_position(max(offset, self.log_start_offset))
        return max(0, ml.number_of_entries - ml.ordinal_of(start))

    async def nth_position_from(self, offset: int, n: int, skip: Container[Position]) -> Position | None:
        if offset >= self.high_watermark or n < 1:
            return None
        ml = self.ml
        ordinal = ml.ordinal_of(await self.find_position(max(offset, self.log_start_offset)))
        while ordinal < ml.number_of_entries:
            pos = ml.position_of(ordinal)
            if pos not in skip:
                n -= 1
                if n == 0:
                    return pos
            ordinal += 1
        return None

    # ------------------------------------------------------------------------------------ append

    async def append(self, batch: Buffer, last_offset_delta: int, max_timestamp: int) -> int:
        """`max_timestamp` is informational: the stored batch header (or, for LogAppendTime, the broker
        timestamp) is what searches use, so the two can never disagree. A transactional batch (e.g. the
        group coordinator's TxnOffsetCommit records) first gets the producer state loaded and snapshotted,
        so its transaction is tracked from its first offset (append_nowait callers do that themselves)."""
        if len(batch) > 22 and _TAIL.unpack_from(batch, 21)[0] & _TXN_BITS:
            producers = self._producers
            if producers is None or producers.snapshot_offset is None:
                await self.ensure_snapshot()
        return await self.append_nowait(batch, last_offset_delta, max_timestamp)

    def append_nowait(self, batch: Buffer, last_offset_delta: int, max_timestamp: int) -> asyncio.Future[int]:
        """append() without a coroutine: the add is issued now, and the future gives the base offset once
        it is durable. The produce hot path uses this: a Task per append cost a task creation and two more
        event-loop hops per batch (py-spy: ensure_future ~11% of the broker's busy time under
        kafka-e2e-latency)."""
        out: asyncio.Future[int] = self._loop.create_future()

        def done(f: asyncio.Future[tuple[Position, Any]]) -> None:
            if out.done():
                return
            if f.cancelled():
                out.cancel()
            elif (exc := f.exception()) is not None:
                out.set_exception(exc)
            else:
                out.set_result(f.result()[1][0] + 1)

        try:
            self.ml.add_entry_nowait(batch, last_offset_delta + 1).add_done_callback(done)
        except Exception as e:  # noqa: BLE001 - handed to the awaiting producer like any failed append
            out.set_exception(e)
        return out

    def append_entry_nowait(self, batch: Buffer, last_offset_delta: int,
                            max_timestamp: int) -> asyncio.Future[tuple[Position, int]]:
        """append_nowait() that also gives the entry's position: the Pulsar handler's SEND_RECEIPT carries
        the message id (ledger, entry), which the base offset alone does not name."""
        out: asyncio.Future[tuple[Position, int]] = self._loop.create_future()

        def done(f: asyncio.Future[tuple[Position, Any]]) -> None:
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
            self.ml.add_entry_nowait(batch, last_offset_delta + 1).add_done_callback(done)
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

    def _end_position(self) -> Position | None:
        with contextlib.suppress(InvalidPositionError):
            return self.ml.position_of(self.ml.number_of_entries)
        return None

    async def read(self, offset: int, max_bytes: int, hint: Position | None = None,
                   min_one: bool = True) -> ReadResult:
        for _ in range(3):
            self._check_range(offset)
            if offset == self.high_watermark:
                return ReadResult([], offset, hint if hint is not None else self._end_position())
            try:
                return await self._read(offset, max_bytes, hint, min_one)
            except LedgerDamagedError as e:
                await self._report_damage(e)
                raise
            except (_Trimmed, InvalidPositionError, NoSuchLedgerError):
                # The ledger list changed under us (retention, DeleteRecords): re-check and retry.
                hint = None
                await self._refresh_first_offset()
            except StorageError as e:  # an I/O error reading: Fetch answers KAFKA_STORAGE_ERROR; said once
                self.damaged_reads += 1
                if str(e) not in self._read_errors:
                    self._read_errors.add(str(e))
                    log.error("partition %s: reading offset %d failed: %r", self.name, offset, e)
                raise
        self._check_range(offset)
        raise OffsetOutOfRange(f"{self.name}: offset {offset} could not be read")

    async def _read(self, offset: int, max_bytes: int, hint: Position | None, min_one: bool) -> ReadResult:
        ml = self.ml
        budget = max(max_bytes, 0)
        entries = None
        gap = False  # the first entry starts after `offset`: compaction removed the batches holding it
        if hint is not None:
            with contextlib.suppress(InvalidPositionError):
                entries = await ml.read_entries(hint, _READ_MAX_ENTRIES,
                                                budget, ENTRY_OVERHEAD_MAX)
            if entries:
                _, index, start = parse_entry(entries[0].data)
                base = index - _LOD.unpack_from(entries[0].data, start + 23)[0]
                if offset < base and await self._gap_before(entries[0].ledger_id, entries[0].entry_id, offset):
                    gap = True
                elif not base <= offset <= index:
                    entries = None  # a stale hint
        if not entries:
            position = await self.find_position(offset)
            entries = await ml.read_entries(position, _READ_MAX_ENTRIES, budget, ENTRY_OVERHEAD_MAX)
            if not entries:  # offset is in a gap at the end of a compacted log
                return ReadResult([], offset, position)
            _, index, start = parse_entry(entries[0].data)
            if index - _LOD.unpack_from(entries[0].data, start + 23)[0] > offset:
                # The entry after a gap (compaction) - unless the offset was trimmed meanwhile.
                await self._refresh_first_offset()
                if offset < self.log_start_offset:
                    raise _Trimmed
                gap = True
        batches: list[FetchedBatch] = []
        total = 0
        for lid, eid, data in entries:
            _, index, start = parse_entry(data)
            view = data[start:] if type(data) is memoryview else memoryview(data)[start:]
            base = index - _LOD.unpack_from(view, 23)[0]
            size = len(view)
            if batches:
                if total + size > max_bytes:
                    break
            elif (base > offset and not gap) or index < offset:  # the log changed under us
                raise _Trimmed
            elif not min_one and size > max_bytes:
                return ReadResult([], offset, Position(lid, eid))
            total += size
            batches.append(FetchedBatch(base, index, view, Position(lid, eid)))
        if not batches:
            return ReadResult([], offset, hint)
        last = batches[-1]
        next_position: Position | None = None
        with contextlib.suppress(InvalidPositionError):
            p = ml.next_position(last.position)
            next_position = p
        return ReadResult(batches, last.last_offset + 1, next_position)

    async def _gap_before(self, ledger_id: int, entry_id: int, offset: int) -> bool:
        """Whether the entry before (ledger_id, entry_id) ends before `offset`, i.e. that entry is the
        first whose index >= offset although its batch starts after it (a gap left by compaction)."""
        if entry_id > 0:
            return (await self.probe(ledger_id, entry_id - 1)).index < offset
        previous = None
        for lid, n in self.ml.ledger_counts():
            if lid == ledger_id:
                break
            if n:
                previous = (lid, n)
        else:
            return False  # the ledger is gone
        if previous is None:
            return offset >= self.log_start_offset
        return await self.last_index_of(*previous) < offset

    async def _stable(self, search: Callable[[], Awaitable[_T]]) -> _T:
        """Run a multi-step search again when the ledger list changed under it (trim, compaction):
        ordinals and positions it computed may then name other entries."""
        for _ in range(4):
            version = self.ml.layout_version
            try:
                found = await search()
            except (InvalidPositionError, NoSuchLedgerError, _Trimmed):
                await self._refresh_first_offset()
                continue
            if version == self.ml.layout_version:
                return found
            await self._refresh_first_offset()
        return await search()

    async def tail_batches(self, max_entries: int) -> list[FetchedBatch]:
        return await self._stable(lambda: self._tail_batches(max_entries))

    async def _tail_batches(self, max_entries: int) -> list[FetchedBatch]:
        total = self.ml.number_of_entries
        if total == 0 or max_entries <= 0:
            return []
        start = self.ml.position_of(max(0, total - max_entries))
        out = []
        for lid, eid, data in await self.ml.read_entries(start, max_entries):
            _, index, start_at = parse_entry(data)
            view = memoryview(data)[start_at:]
            out.append(FetchedBatch(index - _LOD.unpack_from(view, 23)[0], index, view, Position(lid, eid)))
        return out

    # ------------------------------------------------------------------------------------ timestamps

    async def _first_record_from(self, position: Position, timestamp: int | None, min_offset: int,
                                 exact: bool = False) -> tuple[int, int] | None:
        """(offset, ts) of the first record of the entry at `position` with offset >= min_offset and
        ts >= timestamp (ts == timestamp when exact); timestamp None = the largest such record."""
        data = await self.ml.read_entry(position)
        broker_ts, index, start = parse_entry(data)
        batch = memoryview(data)[start:]
        header = parse_batch_header(batch)
        base = index - header.last_offset_delta
        if header.attributes & TIMESTAMP_TYPE_BIT:
            offset = max(base, min_offset)
            if timestamp is None or (broker_ts == timestamp if exact else broker_ts >= timestamp):
                return offset, broker_ts
            return None
        best: tuple[int, int] | None = None
        for record in decode_records(batch):
            offset = base + record.offset_delta
            if offset < min_offset:
                continue
            ts = header.base_timestamp + record.timestamp_delta
            if timestamp is None:
                if best is None or ts > best[1]:
                    best = (offset, ts)
            elif ts == timestamp if exact else ts >= timestamp:
                return offset, ts
        return best

    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return await self._stable(lambda: self._offset_for_timestamp(timestamp))

    async def _offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's rule: the smallest offset whose record timestamp is >= `timestamp`, whatever the order of
        timestamps along the log. The answer lies in the first batch whose max timestamp reaches the target
        (every earlier record is below it), so: skip whole ledgers whose max timestamp (cached summaries,
        kept up to date on appends) is below the target, then walk the first ledger that reaches it entry by
        entry (header reads only), and pick the record inside that batch. A bisection on each entry's own
        max timestamp would be wrong as soon as timestamps go backwards (producers set them)."""
        log_start = self.log_start_offset
        if log_start >= self.high_watermark or not self.ml.number_of_entries:
            return None
        start = await self.find_position(log_start)
        if self.ml.ordinal_of(start) >= self.ml.number_of_entries:
            return None
        started = False
        for lid, n in self.ml.ledger_counts():
            if lid == start.ledger_id:
                started, first = True, start.entry_id
            elif started and n:
                first = 0
            else:
                continue
            if first == 0 and (await self._ledger_summary(lid, n))[0] < timestamp:
                continue
            for eid in range(first, n):
                if (await self._ts_meta(lid, eid)).timestamp >= timestamp:
                    try:
                        found = await self._first_record_from(Position(lid, eid), timestamp, log_start)
                    except LedgerDamagedError:
                        continue  # a damaged batch holds no record a consumer could be sent to
                    if found is not None:
                        return found
        return None

    async def _ts_meta(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """Entry headers for timestamp searches, which step over damaged entries (timestamp -1 matches no
        target): ListOffsets then names the first intact batch, and Fetch reports any damage it meets."""
        try:
            return await self._read_meta(ledger_id, entry_id)
        except LedgerDamagedError:
            return EntryMeta(-1, 0, -1, -1)

    async def _scan_max(self, ledger_id: int, first: int, stop: int,
                        best: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """(max timestamp, first entry with it) over entries first..stop-1 of a ledger."""
        for eid in range(first, stop):
            ts = (await self._ts_meta(ledger_id, eid)).timestamp
            if best is None or ts > best[0]:
                best = (ts, eid)
        return best

    async def _ledger_summary(self, ledger_id: int, entries: int) -> tuple[int, int]:
        known = self._ledger_max.get(ledger_id)
        best = None if known is None else (known[0], known[1])
        covered = 0 if known is None else known[2]
        if covered < entries:
            best = await self._scan_max(ledger_id, covered, entries, best)
            assert best is not None
            self._ledger_max[ledger_id] = (best[0], best[1], entries)
        assert best is not None
        return best

    async def max_timestamp(self) -> tuple[int, int] | None:
        return await self._stable(self._max_timestamp)

    async def _max_timestamp(self) -> tuple[int, int] | None:
        log_start = self.log_start_offset
        if log_start >= self.high_watermark or not self.ml.number_of_entries:
            return None
        start = await self.find_position(log_start)
        if self.ml.ordinal_of(start) >= self.ml.number_of_entries:
            return None  # log start in a gap at the end of a compacted log: no record left
        best: tuple[int, int, int] | None = None  # (ts, ledger, entry)
        started = False
        for lid, n in self.ml.ledger_counts():
            if lid == start.ledger_id:
                started = True
                first_meta = await self.probe(lid, start.entry_id)
                if first_meta.base_offset < log_start:  # partly deleted batch: only records >= log start
                    rec = await self._first_record_from(start, None, log_start)
                    if rec is not None:
                        best = (rec[1], lid, start.entry_id)
                    summary = await self._scan_max(lid, start.entry_id + 1, n)
                elif start.entry_id == 0:
                    summary = await self._ledger_summary(lid, n)
                else:
                    summary = await self._scan_max(lid, start.entry_id, n)
            elif started and n:
                summary = await self._ledger_summary(lid, n)
            else:
                continue
            if summary is not None and (best is None or summary[0] > best[0]):
                best = (summary[0], lid, summary[1])
        if best is None:
            return None
        ts, lid, eid = best
        found = await self._first_record_from(Position(lid, eid), ts, log_start, exact=True)
        if found is None:  # header max timestamp disagrees with the records: take the records' max
            found = await self._first_record_from(Position(lid, eid), None, log_start)
        return found

    # ------------------------------------------------------------------------------------ deletion

    async def delete_records(self, before_offset: int) -> int:
        if before_offset > self.high_watermark or before_offset < 0:
            raise OffsetOutOfRange(f"{self.name}: cannot delete before {before_offset}, "
                                   f"high watermark is {self.high_watermark}")
        if before_offset <= self.log_start_offset:
            return self.log_start_offset
        await self.ml.set_properties({LOG_START_PROPERTY: str(before_offset)})
        self._delete_offset = before_offset
        releasable: list[int] = []
        current = self.ml.current_ledger_id
        for lid, n in self.ml.ledger_counts():
            if lid == current:
                break
            if n and await self.last_index_of(lid, n) >= before_offset:
                break
            releasable.append(lid)
        if releasable:
            # by id: a compaction may have replaced these ledgers while we looked at them
            if await self.ml.trim_ledgers(len(releasable), ids=releasable):
                await self._after_trim()
            await self._refresh_first_offset()
        return self.log_start_offset

    async def apply_retention(self, retention_ms: int, retention_bytes: int, keep_offset: int | None = None) -> int:
        keep_ledger = None
        if keep_offset is not None and keep_offset < self.high_watermark:
            try:
                keep_ledger = (await self.find_position(max(keep_offset, self.log_start_offset))).ledger_id
            except OffsetOutOfRange:
                keep_ledger = None
        deleted = await self.ml.trim_by_retention(retention_ms, retention_bytes, keep_ledger)
        if deleted:
            await self._after_trim()
            await self._refresh_first_offset()
        return deleted

    # ------------------------------------------------------------------------------------ compaction

    async def compact(self, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS, *, roll_current: bool = False,
                      now_ms: int | None = None) -> CompactionResult:
        """Kafka log compaction of the closed ledgers (kop/offset/compaction.py): keep the latest record
        of each key, tombstones until delete.retention.ms after the pass that first kept them; offsets
        never change. roll_current: first roll the current ledger so that everything written is cleaned."""
        async with self._compaction_lock:
            result = await compact_log(self, delete_retention_ms, roll_current=roll_current, now_ms=now_ms)
            if result.compacted:
                await self._after_compaction(result.replaced)
            return result

    @property
    def delete_offset(self) -> int:
        return self._delete_offset

    @property
    def retained_start(self) -> int | None:
        starts = [x for x in (self._first_offset, self._start_floor) if x is not None]
        return min(starts) if starts else None

    async def cleaning_state(self) -> CleaningState:
        """Dirty/clean bytes and pending tombstone horizon, for the broker's cleaner."""
        return await cleaning_state(self)

    async def _after_trim(self) -> None:
        """Whole ledgers left the front: the log start compaction kept (if any) no longer holds."""
        if COMPACTION_START_PROPERTY in self.ml.properties:
            await self.ml.set_properties({}, remove=[COMPACTION_START_PROPERTY])

    async def _after_compaction(self, replaced: list[int]) -> None:
        for lid in replaced:
            self._ledger_last_index.pop(lid, None)
            self._ledger_max.pop(lid, None)
        gone = set(replaced)
        for key in [k for k in self._probes if k[0] in gone]:
            del self._probes[key]
        await self._refresh_first_offset()

    # ------------------------------------------------------------------------------------ transactions

    async def producer_state(self) -> ProducerStateTable:
        """The partition's producer state, loaded on first use: the snapshot in the managed ledger's
        properties (if any) plus a replay of the entries after it; without a snapshot (no transaction ever
        touched this partition) the last PRODUCER_STATE_TAIL_ENTRIES entries, for idempotence."""
        if self._producers is not None:
            return self._producers
        if self._producers_loading is None:
            self._producers_loading = self._loop.create_future()
            try:
                table = await self._stable(self._load_producers)
            except BaseException as e:
                fut, self._producers_loading = self._producers_loading, None
                fut.set_exception(e)
                fut.exception()
                raise
            self._producers = table
            self.interceptor.on_txn_issue = table.on_issue
            self.interceptor.on_txn_unissue = table.unissue
            self._producers_loading.set_result(table)
            return table
        return await asyncio.shield(self._producers_loading)

    async def load_transactions(self) -> None:
        """What readers call before last_stable_offset / aborted_transactions / is_aborted_batch: loads the
        producer state only when the partition ever saw a transaction (a snapshot exists). Without one the
        LSO is the high watermark and nothing is aborted, so readers skip the tail replay idempotence needs;
        the first transactional write loads the state (and the hooks) before it is issued."""
        if self._producers is None and PRODUCER_STATE_PROPERTY in self.ml.properties:
            await self.producer_state()

    async def _load_producers(self) -> ProducerStateTable:
        raw = self.ml.properties.get(PRODUCER_STATE_PROPERTY)
        if not raw:
            table = ProducerStateTable()
            for fb in await self._tail_batches(PRODUCER_STATE_TAIL_ENTRIES):
                table.replay(fb.base_offset, fb.batch)
        else:
            table = ProducerStateTable.from_snapshot(json.loads(raw))
            assert table.snapshot_offset is not None
            offset = max(table.snapshot_offset, self.log_start_offset)
            while offset <= self.interceptor.durable_index:
                # Catch up to the durable end, again if appends landed meanwhile: the hooks are installed
                # right after this returns, in the same step, so no entry is missed or seen twice.
                offset = await self._replay_from(table, offset)
        table.durable(self.interceptor.durable_index)
        table.prune(self.log_start_offset)
        return table

    async def _replay_from(self, table: ProducerStateTable, offset: int) -> int:
        """Feed the batches from `offset` to the durable end into `table`; returns the offset after them."""
        position = await self.find_position(offset)
        ml = self.ml
        end = offset
        while ml.ordinal_of(position) < ml.number_of_entries:
            try:
                entries = await ml.read_entries(position, _REPLAY_CHUNK)
            except LedgerDamagedError as e:
                if e.ledger_id == position.ledger_id and e.first_entry > position.entry_id:
                    entries = await ml.read_entries(position, e.first_entry - position.entry_id)  # the intact ones
                else:
                    # Damaged entries (reads of them answer KAFKA_STORAGE_ERROR) cannot be replayed: the
                    # partition must stay writable, so its state is rebuilt without them, and that is said.
                    log.error("partition %s: producer state rebuilt without damaged entries %d..%d of ledger %d "
                              "(a transaction or producer sequence they held is not known)", self.name,
                              e.first_entry, e.last_entry, e.ledger_id)
                    position = ml.next_position(Position(e.ledger_id, e.last_entry))
                    continue
            if not entries:
                break
            for lid, eid, data in entries:
                _, index, start = parse_entry(data)
                view = memoryview(data)[start:]
                base = index - _LOD.unpack_from(view, 23)[0]
                if index >= offset:
                    table.replay(base, view)
                end = index + 1
                position = Position(lid, eid)
            position = ml.next_position(position)
        return max(end, self.interceptor.durable_index + 1)

    @property
    def last_stable_offset(self) -> int:
        """min(first offset of an open transaction, high watermark); the high watermark until the
        producer state is loaded (callers that need it load it first: producer_state())."""
        producers = self._producers
        hwm = self.interceptor.durable_index + 1
        if producers is None or (not producers.ongoing and not producers.completing):
            return hwm
        return producers.last_stable_offset(hwm, self.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        producers = self._producers
        if producers is None or not producers.aborted:
            return []
        return producers.aborted_between(fetch_offset, upper)

    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        """Whether a stored batch is a control batch or data of an aborted transaction (what a Pulsar
        consumer must never get, and the cleaner drops)."""
        attributes = _TAIL.unpack_from(batch, 21)[0]
        if not attributes & _TXN_BITS:
            return False
        if attributes & CONTROL_BIT:
            return True
        producers = self._producers
        pid = struct.unpack_from(">q", batch, 43)[0]
        return producers is not None and producers.is_aborted(pid, base_offset)

    async def ensure_snapshot(self) -> ProducerStateTable:
        """The producer state, with a snapshot stored before the partition's first transactional write
        (from then on a restart replays from a snapshot, not a bounded tail, so no transaction is missed)."""
        table = await self.producer_state()
        if table.snapshot_offset is None:
            await self._write_snapshot(table)
        return table

    async def write_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                               coordinator_epoch: int) -> int:
        """Append a COMMIT/ABORT control batch for `producer_id`; returns its offset once durable. Raises
        producer_state.SequenceError (TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH)."""
        table = await self.ensure_snapshot()
        table.begin_marker(producer_id, producer_epoch, coordinator_epoch)
        key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
        value = struct.pack(">hi", 0, coordinator_epoch)
        batch = bytearray(build_batch([(key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                                      base_sequence=-1, is_transactional=True, is_control=True))
        return await self.append(batch, 0, -1)

    async def _snapshot(self) -> None:
        """Snapshots until one is recent enough (appends that were durable while one was written had
        no task to start)."""
        try:
            table = self._producers
            while table is not None and not self._closed:
                await self._write_snapshot(table)
                snap = table.snapshot_offset
                if snap is None or self.interceptor.durable_index - snap < SNAPSHOT_EVERY_OFFSETS:
                    break
        except Exception as e:  # noqa: BLE001 - tried again later; replay covers the gap meanwhile
            log.warning("partition %s: producer-state snapshot failed: %r", self.name, e)
        finally:
            self._snapshot_task = None

    async def _write_snapshot(self, table: ProducerStateTable) -> None:
        table.prune(self.log_start_offset)
        offset = self.interceptor.durable_index + 1
        snap = table.to_snapshot(offset)
        if snap["dropped_aborted"] and not self._warned_aborted_cap:
            self._warned_aborted_cap = True
            log.warning("partition %s: %d aborted transactions are older than the %d the producer-state snapshot "
                        "keeps: after a restart read_committed consumers would see their records (until "
                        "retention removes them)", self.name, snap["dropped_aborted"], len(snap["aborted"]))
        await self.ml.set_properties({PRODUCER_STATE_PROPERTY: json.dumps(snap, separators=(",", ":"))})
        if table.snapshot_offset is None or offset > table.snapshot_offset:
            table.snapshot_offset = offset

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
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception):
                await self._snapshot_task
        if self._producers is not None and self._producers.snapshot_offset is not None:
            with contextlib.suppress(Exception):  # replay from the last snapshot covers a failed one
                await self._write_snapshot(self._producers)
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
        self._release_waiters()
        try:
            self.ml.abandon()
        finally:
            if self._on_close is not None:
                self._on_close(self)

    async def delete(self) -> None:
        await self.close()
        await self.ml.delete()
