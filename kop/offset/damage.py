"""Damaged storage as a partition log meets it: which offsets a damaged run of entries held, reported once.

The ledger store (kop/storage/local/ledgers.py) raises LedgerDamagedError for a checksum mismatch or a
truncated sealed ledger, naming the run of entries (ledger, first..last entry, bytes). Above it:

* searches step over a damaged run: ``index_after_damage`` takes the run's last offset as the next intact
  entry's base offset - 1 (the durable end when nothing intact follows), so the offsets it held still lead
  to it - and to the error - rather than past it;
* a read that starts at a damaged entry raises the error (Fetch answers KAFKA_STORAGE_ERROR for that range
  only; the batches before it are served); ``DamageLog.report`` says so once per damaged range, with the
  ledger, entries, bytes and Kafka offsets, and keeps it in ``damaged_ranges`` (admin internal stats);
* any other StorageError of a read is counted and logged once per distinct error (``read_failed``).

A part of its own so that the rules above are tested with a stub ledger and a stub index (tests make
damaged ledgers only with real files); the offset index calls ``index_after_damage`` from its probes, and
ManagedPartitionLog.read calls the DamageLog.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from kop.managed_ledger import InvalidPositionError, Position
from kop.offset.api import DamageReport, OffsetOutOfRange
from kop.offset.bounds import LogBounds
from kop.offset.entry_format import EntryMeta
from kop.storage.api import LedgerDamagedError, StorageError

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

DAMAGE_WALK = 10_000  # damaged runs stepped over when looking for the next intact entry


async def index_after_damage(ml: ManagedLedger, e: LedgerDamagedError,
                             read_meta: Callable[[int, int], Awaitable[EntryMeta]], durable_index: int) -> int:
    """The last offset a damaged run of entries held: the next intact entry's base offset - 1
    (`durable_index` when none follows). Offsets have no gaps (but compaction's, which only makes this
    estimate larger: still within the damaged run's reach)."""
    pos = Position(e.ledger_id, e.last_entry)
    for _ in range(DAMAGE_WALK):
        try:
            if ml.ordinal_of(pos) + 1 >= ml.number_of_entries:
                break
            pos = ml.next_position(pos)
            return (await read_meta(pos.ledger_id, pos.entry_id)).base_offset - 1
        except LedgerDamagedError as more:
            pos = Position(more.ledger_id, max(more.last_entry, pos.entry_id))
        except InvalidPositionError:
            break
    return durable_index


class EntryIndex(Protocol):
    """What reporting damage reads of the offset index (kop/offset/offset_index.py)."""

    async def read_meta(self, ledger_id: int, entry_id: int) -> EntryMeta: ...

    async def probe(self, ledger_id: int, entry_id: int) -> EntryMeta: ...

    async def last_index_of(self, ledger_id: int, entries: int) -> int: ...


class DamageLog:
    """The damage one partition log's reads met (admin stats and the kop_storage_damaged_reads metric)."""

    def __init__(self, name: str, ml: ManagedLedger, index: EntryIndex, bounds: LogBounds) -> None:
        self.name = name
        self.ml = ml
        self.index = index
        self.bounds = bounds
        self.ranges: dict[tuple[int, int], DamageReport] = {}  # (ledger, first entry) -> report
        self.reads = 0  # reads answered with LedgerDamagedError or a StorageError (KAFKA_STORAGE_ERROR)
        self._read_errors: set[str] = set()

    async def report(self, e: LedgerDamagedError) -> None:
        """Say once per damaged range what a read met, with the Kafka offsets it costs."""
        self.reads += 1
        key = (e.ledger_id, e.first_entry)
        if key in self.ranges:
            return
        first = self.bounds.log_start_offset
        with contextlib.suppress(LedgerDamagedError, InvalidPositionError, OffsetOutOfRange):
            if e.first_entry > 0:
                first = (await self.index.probe(e.ledger_id, e.first_entry - 1)).index + 1
            else:
                previous = None
                for lid, n in self.ml.ledger_counts():
                    if lid == e.ledger_id:
                        break
                    if n:
                        previous = (lid, n)
                if previous is not None:
                    first = await self.index.last_index_of(*previous) + 1
        last = await index_after_damage(self.ml, e, self.index.read_meta, self.bounds.durable.durable_index)
        self.ranges[key] = DamageReport(ledgerId=e.ledger_id, firstEntry=e.first_entry, lastEntry=e.last_entry,
                                        byteStart=e.byte_start, byteEnd=e.byte_end, reason=e.reason,
                                        firstOffset=first, lastOffset=last)
        log.error("partition %s: damaged storage: ledger %d entries %d..%d (bytes %d..%d, %s) hold offsets "
                  "%d..%d, which answer KAFKA_STORAGE_ERROR; the offsets before and after them are served",
                  self.name, e.ledger_id, e.first_entry, e.last_entry, e.byte_start, e.byte_end, e.reason,
                  first, last)

    def read_failed(self, offset: int, e: StorageError) -> None:
        """An I/O error reading `offset` (Fetch answers KAFKA_STORAGE_ERROR): counted, logged once per error."""
        self.reads += 1
        if str(e) not in self._read_errors:
            self._read_errors.add(str(e))
            log.error("partition %s: reading offset %d failed: %r", self.name, offset, e)
