"""Retention and compaction of one partition log: what removes data, and what the log start becomes.

* DeleteRecords (``delete_records``): the new log start offset is stored as the managed-ledger property
  ``kop.logStartOffset`` (so reads below it fail after a restart too), then whole ledgers that fall entirely
  below it are released;
* retention (``apply_retention``): whole closed ledgers by age and total size (ManagedLedger.trim_by_retention),
  never the current ledger nor the one holding `keep_offset` or a later one (what a Pulsar subscription has
  not acknowledged);
* compaction (``compact``, kop/offset/compaction.py): one pass at a time per log; ``cleaning_state`` is what
  the broker's cleaner decides from;
* afterwards: a trim removes ``kop.compactionStart`` (the log then starts at its first entry, as after
  deleting a Kafka segment); a compaction makes the offset index forget the replaced ledgers; both re-learn
  the log's start (OffsetIndex.refresh_bounds).

The part is also the CompactableLog that compact_log reads (name, ml, probe, last_index_of, delete_offset,
retained_start and the transaction answers), delegating to the offset index and the producer state: a
pass sees exactly those, and this part's tests build one over a bare managed ledger.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from kop.aio import run_to_end
from kop.offset.api import OffsetOutOfRange
from kop.offset.bounds import LogBounds
from kop.offset.compaction import (
    COMPACTION_START_PROPERTY,
    DEFAULT_DELETE_RETENTION_MS,
    CleaningState,
    CompactionResult,
    cleaning_state,
    compact_log,
)
from kop.offset.entry_format import Buffer, EntryMeta

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedger
    from kop.offset.offset_index import OffsetIndex
    from kop.offset.transactions import ProducerStateStore

LOG_START_PROPERTY = "kop.logStartOffset"


class Retention:
    """DeleteRecords, retention and compaction of one partition log (see the module docstring)."""

    def __init__(self, name: str, ml: ManagedLedger, bounds: LogBounds, index: OffsetIndex,
                 txn: ProducerStateStore) -> None:
        self.name = name
        self.ml = ml
        self.bounds = bounds
        self.index = index
        self.txn = txn
        self._compaction_lock = asyncio.Lock()

    def load_delete_offset(self) -> None:
        """Take the DeleteRecords offset kept in the managed ledger's properties (at open)."""
        with contextlib.suppress(KeyError, ValueError):
            self.bounds.delete_offset = int(self.ml.properties[LOG_START_PROPERTY])

    # ------------------------------------------------------------------------------------ deletion

    async def delete_records(self, before_offset: int) -> int:
        """PartitionLog.delete_records: advance the log start offset and release the ledgers below it. Runs
        to its end when the DeleteRecords awaiting it is cancelled (its connection closed; kop.aio.run_to_end):
        stopped once the new start is stored, the log would still serve the records before it until a
        reopen."""
        return await run_to_end(self._delete_records(before_offset))

    async def _delete_records(self, before_offset: int) -> int:
        bounds = self.bounds
        if before_offset > bounds.high_watermark or before_offset < 0:
            raise OffsetOutOfRange(f"{self.name}: cannot delete before {before_offset}, "
                                   f"high watermark is {bounds.high_watermark}")
        if before_offset <= bounds.log_start_offset:
            return bounds.log_start_offset
        await self.ml.set_properties({LOG_START_PROPERTY: str(before_offset)})
        bounds.delete_offset = before_offset
        releasable: list[int] = []
        current = self.ml.current_ledger_id
        for lid, n in self.ml.ledger_counts():
            if lid == current:
                break
            if n and await self.index.last_index_of(lid, n) >= before_offset:
                break
            releasable.append(lid)
        if releasable:
            # by id: a compaction may have replaced these ledgers while we looked at them
            if await self.ml.trim_ledgers(len(releasable), ids=releasable):
                await self.after_trim()
            await self.index.refresh_bounds()
        return bounds.log_start_offset

    async def apply_retention(self, retention_ms: int, retention_bytes: int, keep_offset: int | None = None) -> int:
        """PartitionLog.apply_retention: whole closed ledgers by age and size; returns how many went."""
        keep_ledger = None
        if keep_offset is not None and keep_offset < self.bounds.high_watermark:
            try:
                keep_ledger = (await self.index.find_position(max(keep_offset, self.bounds.log_start_offset))).ledger_id
            except OffsetOutOfRange:
                keep_ledger = None
        deleted = await self.ml.trim_by_retention(retention_ms, retention_bytes, keep_ledger)
        if deleted:
            await self.after_trim()
            await self.index.refresh_bounds()
        return deleted

    async def after_trim(self) -> None:
        """Whole ledgers left the front: the log start compaction kept (if any) no longer holds, nor do the
        index's cached headers of those ledgers."""
        self.index.forget_trimmed()
        if COMPACTION_START_PROPERTY in self.ml.properties:
            await self.ml.set_properties({}, remove=[COMPACTION_START_PROPERTY])

    # ------------------------------------------------------------------------------------ compaction

    async def compact(self, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS, *, roll_current: bool = False,
                      now_ms: int | None = None) -> CompactionResult:
        """Kafka log compaction of the closed ledgers (kop/offset/compaction.py): keep the latest record
        of each key, tombstones until delete.retention.ms after the pass that first kept them; offsets
        never change. roll_current: first roll the current ledger so that everything written is cleaned."""
        async with self._compaction_lock:
            result = await compact_log(self, delete_retention_ms, roll_current=roll_current, now_ms=now_ms)
            if result.compacted:
                await self.after_compaction(result.replaced)
            return result

    async def cleaning_state(self) -> CleaningState:
        """Dirty/clean bytes and pending tombstone horizon, for the broker's cleaner."""
        return await cleaning_state(self)

    async def after_compaction(self, replaced: list[int]) -> None:
        self.index.forget_ledgers(set(replaced))
        await self.index.refresh_bounds()

    # ------------------------------------------------------------------------------------ CompactableLog

    async def probe(self, ledger_id: int, entry_id: int) -> EntryMeta:
        return await self.index.probe(ledger_id, entry_id)

    async def last_index_of(self, ledger_id: int, entries: int) -> int:
        return await self.index.last_index_of(ledger_id, entries)

    @property
    def delete_offset(self) -> int:
        return self.bounds.delete_offset

    @property
    def retained_start(self) -> int | None:
        return self.bounds.retained_start

    async def load_transactions(self) -> None:
        await self.txn.load_transactions()

    @property
    def last_stable_offset(self) -> int:
        return self.txn.last_stable_offset

    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        return self.txn.is_aborted_batch(batch, base_offset)
