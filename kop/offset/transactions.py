"""The I/O side of a partition's producer state: load, replay, snapshots, transaction markers.

kop/offset/producer_state.py holds the state (idempotence, open transactions, the aborted-transaction
index) and knows no storage. This module keeps it in step with one managed ledger:

* load (first use, ``load``): the snapshot in the managed ledger's property ``kop.producerState`` plus a
  replay of the entries after it; without a snapshot (no transaction ever touched the partition) the last
  PRODUCER_STATE_TAIL_ENTRIES entries, for idempotence. Concurrent loads share one. Once loaded, the
  interceptor tells the table of every transactional and control batch as its add is issued (and undoes it
  when the add fails), so the table never misses nor double-counts an entry.
* ``load_transactions``: what readers call - loads only when the partition ever saw a transaction (a
  snapshot exists); otherwise the LSO is the high watermark and nothing is aborted.
* snapshots: stored before the partition's first transactional write (``ensure_snapshot``: from then on a
  restart replays from a snapshot, not a bounded tail), again every SNAPSHOT_EVERY_OFFSETS durable offsets
  (a background task), and at close.
* readers' answers: ``last_stable_offset``, ``aborted_transactions``, ``is_aborted_batch``.
* ``marker_batch``: the COMMIT/ABORT control batch WriteTxnMarkers appends (after the table accepted it).

A collaborator of ManagedPartitionLog (which appends and forwards the PartitionLog methods) rather than
part of it: it needs the managed ledger, the LogBounds and the offset index's search, so its tests drive it
over a bare managed ledger with the interceptor alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from typing import TYPE_CHECKING

from kop.aio import SingleFlight
from kop.managed_ledger import Position
from kop.offset.api import FetchedBatch
from kop.offset.bounds import LogBounds
from kop.offset.entry_format import BATCH_TAIL, LAST_OFFSET_DELTA, Buffer, parse_entry
from kop.offset.interceptor import TXN_BITS, IndexInterceptor
from kop.offset.producer_state import ABORT, COMMIT, AbortedTxn, ProducerStateTable
from kop.protocol.records import CONTROL_BIT, build_batch
from kop.storage.api import LedgerDamagedError

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedger
    from kop.offset.offset_index import OffsetIndex

log = logging.getLogger(__name__)

# Producer-state snapshot (JSON): idempotence, open transactions and the aborted-transaction index as of an
# offset; rebuilt at open by replaying the entries from that offset on.
PRODUCER_STATE_PROPERTY = "kop.producerState"
SNAPSHOT_EVERY_OFFSETS = 10_000  # a new snapshot once the durable end moved this far past the last one
PRODUCER_STATE_TAIL_ENTRIES = 1000  # entries replayed for idempotence when no snapshot was ever taken
REPLAY_CHUNK = 256
_PID = struct.Struct(">q")  # producerId at byte 43 of a batch


async def read_tail(ml: ManagedLedger, max_entries: int) -> list[FetchedBatch]:
    """Up to the last `max_entries` batches of the ledger, oldest first (not re-run on a layout change:
    callers wrap it in OffsetIndex.stable)."""
    total = ml.number_of_entries
    if total == 0 or max_entries <= 0:
        return []
    start = ml.position_of(max(0, total - max_entries))
    out = []
    for lid, eid, data in await ml.read_entries(start, max_entries):
        _, index, start_at = parse_entry(data)
        view = memoryview(data)[start_at:]
        out.append(FetchedBatch(index - LAST_OFFSET_DELTA.unpack_from(view, 23)[0], index, view, Position(lid, eid)))
    return out


class ProducerStateStore:
    """One partition's ProducerStateTable, loaded, replayed and snapshotted over its managed ledger."""

    def __init__(self, name: str, ml: ManagedLedger, bounds: LogBounds, index: OffsetIndex,
                 interceptor: IndexInterceptor) -> None:
        self.name = name
        self.ml = ml
        self.bounds = bounds
        self.index = index
        self.interceptor = interceptor
        self.table: ProducerStateTable | None = None  # None until loaded
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._loading: SingleFlight[str, ProducerStateTable] = SingleFlight()
        self._snapshot_task: asyncio.Task[None] | None = None
        self._warned_aborted_cap = False

    # ------------------------------------------------------------------------------------ load

    async def load(self) -> ProducerStateTable:
        """PartitionLog.producer_state: the table, loaded on first use (see the module docstring)."""
        if self.table is not None:
            return self.table
        # shared by concurrent callers (kop.aio.SingleFlight): the first one cancelled with its connection no
        # longer ends the others' waits with a CancelledError of their own
        return await self._loading.run("", self._load_table)

    async def _load_table(self) -> ProducerStateTable:
        if self.table is None:
            table = await self.index.stable(self._load)
            self.table = table
            self.interceptor.on_txn_issue = table.on_issue
            self.interceptor.on_txn_unissue = table.unissue
        return self.table

    async def load_transactions(self) -> None:
        """What readers call before last_stable_offset / aborted_transactions / is_aborted_batch: loads the
        producer state only when the partition ever saw a transaction (a snapshot exists). Without one the
        LSO is the high watermark and nothing is aborted, so readers skip the tail replay idempotence needs;
        the first transactional write loads the state (and the hooks) before it is issued."""
        if self.table is None and PRODUCER_STATE_PROPERTY in self.ml.properties:
            await self.load()

    async def _load(self) -> ProducerStateTable:
        raw = self.ml.properties.get(PRODUCER_STATE_PROPERTY)
        durable = self.bounds.durable
        if not raw:
            table = ProducerStateTable()
            for fb in await read_tail(self.ml, PRODUCER_STATE_TAIL_ENTRIES):
                table.replay(fb.base_offset, fb.batch)
        else:
            table = ProducerStateTable.from_snapshot(json.loads(raw))
            assert table.snapshot_offset is not None
            offset = max(table.snapshot_offset, self.bounds.log_start_offset)
            while offset <= durable.durable_index:
                # Catch up to the durable end, again if appends landed meanwhile: the hooks are installed
                # right after this returns, in the same step, so no entry is missed or seen twice.
                offset = await self.replay_from(table, offset)
        table.durable(durable.durable_index)
        table.prune(self.bounds.log_start_offset)
        return table

    async def replay_from(self, table: ProducerStateTable, offset: int) -> int:
        """Feed the batches from `offset` to the durable end into `table`; returns the offset after them."""
        position = await self.index.find_position(offset)
        ml = self.ml
        end = offset
        while ml.ordinal_of(position) < ml.number_of_entries:
            try:
                entries = await ml.read_entries(position, REPLAY_CHUNK)
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
                base = index - LAST_OFFSET_DELTA.unpack_from(view, 23)[0]
                if index >= offset:
                    table.replay(base, view)
                end = index + 1
                position = Position(lid, eid)
            position = ml.next_position(position)
        return max(end, self.bounds.durable.durable_index + 1)

    # ------------------------------------------------------------------------------------ readers

    @property
    def last_stable_offset(self) -> int:
        """min(first offset of an open transaction, high watermark); the high watermark until the
        table is loaded (callers that need it load it first)."""
        table = self.table
        hwm = self.bounds.durable.durable_index + 1
        if table is None or (not table.ongoing and not table.completing):
            return hwm
        return table.last_stable_offset(hwm, self.bounds.log_start_offset)

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[AbortedTxn]:
        table = self.table
        if table is None or not table.aborted:
            return []
        return table.aborted_between(fetch_offset, upper)

    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        """Whether a stored batch is a control batch or data of an aborted transaction (what a Pulsar
        consumer must never get, and the cleaner drops)."""
        attributes = BATCH_TAIL.unpack_from(batch, 21)[0]
        if not attributes & TXN_BITS:
            return False
        if attributes & CONTROL_BIT:
            return True
        table = self.table
        pid = _PID.unpack_from(batch, 43)[0]
        return table is not None and table.is_aborted(pid, base_offset)

    # ------------------------------------------------------------------------------------ writers

    async def ensure_snapshot(self) -> ProducerStateTable:
        """The table, with a snapshot stored before the partition's first transactional write (from then
        on a restart replays from a snapshot, not a bounded tail, so no transaction is missed)."""
        table = await self.load()
        if table.snapshot_offset is None:
            await self.write_snapshot(table)
        return table

    async def marker_batch(self, producer_id: int, producer_epoch: int, commit: bool,
                           coordinator_epoch: int) -> bytearray:
        """The COMMIT/ABORT control batch ending `producer_id`'s transaction, once the table accepted it.
        Raises producer_state.SequenceError (TRANSACTION_COORDINATOR_FENCED, INVALID_PRODUCER_EPOCH)."""
        table = await self.ensure_snapshot()
        table.begin_marker(producer_id, producer_epoch, coordinator_epoch)
        key = struct.pack(">hh", 0, COMMIT if commit else ABORT)
        value = struct.pack(">hi", 0, coordinator_epoch)
        return bytearray(build_batch([(key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                                     base_sequence=-1, is_transactional=True, is_control=True))

    def on_durable(self, index: int) -> None:
        """An append up to `index` is durable (called only once the table is loaded): markers complete,
        and a snapshot is started when the last one is SNAPSHOT_EVERY_OFFSETS behind."""
        table = self.table
        assert table is not None
        if table.completing:
            table.durable(index)
        snap = table.snapshot_offset
        if snap is not None and index - snap >= SNAPSHOT_EVERY_OFFSETS and self._snapshot_task is None:
            self._snapshot_task = self._loop.create_task(self._snapshot())

    async def _snapshot(self) -> None:
        """Snapshots until one is recent enough (appends that were durable while one was written had
        no task to start)."""
        try:
            table = self.table
            while table is not None and not self.closed:
                await self.write_snapshot(table)
                snap = table.snapshot_offset
                if snap is None or self.bounds.durable.durable_index - snap < SNAPSHOT_EVERY_OFFSETS:
                    break
        except Exception as e:  # noqa: BLE001 - tried again later; replay covers the gap meanwhile
            log.warning("partition %s: producer-state snapshot failed: %r", self.name, e)
        finally:
            self._snapshot_task = None

    async def write_snapshot(self, table: ProducerStateTable) -> None:
        table.prune(self.bounds.log_start_offset)
        offset = self.bounds.durable.durable_index + 1
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

    async def close(self) -> None:
        """Finish a running snapshot, then store a last one if the partition ever had one (replay from
        the last snapshot covers a failed one)."""
        self.closed = True
        if self._snapshot_task is not None:
            with contextlib.suppress(Exception):
                await self._snapshot_task
        if self.table is not None and self.table.snapshot_offset is not None:
            with contextlib.suppress(Exception):
                await self.write_snapshot(self.table)
