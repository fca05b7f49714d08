"""Log compaction of one partition log (cleanup.policy=compact), Kafka's semantics over managed ledgers.

``ManagedPartitionLog.compact()`` (kop/offset/retention.py) runs ``compact_log`` below (one pass at a time per log); the broker's
log cleaner (kop/topics/chores.py) decides when, from ``cleaning_state``. Both see the log through
``CompactableLog``, the few public things they read of it. One pass:

1. (roll_current) roll the current ledger when it has entries, so everything written so far is closed.
2. Key map: read every record of the closed ledgers AND of the current ledger's acknowledged entries;
   remember the offset of the latest record of each key (a key superseded in the current ledger may be
   removed from older ledgers). Memory: one dict entry per distinct key.
3. Rewrite the closed ledgers (Kafka's inactive segments; the current ledger is never touched and appends
   to it go on) into fresh ledgers through ManagedLedger.rewriter(): an entry whose batch keeps all its
   records is copied byte for byte; a batch that loses records is rebuilt by kop/protocol/compaction.py
   keeping its base offset and lastOffsetDelta, so the entry keeps its ``index`` and every surviving
   record its offset (offsets are never renumbered: compaction leaves gaps); a batch left empty is
   dropped with its entry. Small ledgers are merged up to the managed ledger's size limits. Records
   below the DeleteRecords log start offset and keyless records are dropped too.
4. Swap: ManagedLedger.replace_ledgers() puts the new ledgers in place of the old run with ONE
   compare-and-set of the info, together with the cleaner's properties, then deletes the old ledgers.
   A crash before the CAS leaves the old list (the new ledgers are collected as garbage at start-up), a
   crash after it the new list (the old ledgers are collected); never a mix. When retention trimmed the
   run meanwhile, the swap is refused and the new ledgers are deleted (the next pass starts over).

Tombstones: the first pass that keeps a tombstone stamps its batch with a delete horizon (now +
delete.retention.ms, KIP-534's batch attribute bit 6 with baseTimestamp = horizon); a later pass at or
after the horizon drops them. The earliest horizon still pending is kept in the property
``kop.deleteHorizon`` so that the cleaner runs a pass when it is due even without new dirty data.

Transactions (Kafka's cleaner does the same): a pass cleans only closed ledgers wholly below the last
stable offset, so records of an open transaction are never removed nor shadow anything; records of
aborted transactions (the partition's aborted-transaction index) are left out of the key map - an aborted
value never supersedes a committed one - and removed from the rewritten ledgers; control batches (markers)
are kept, so replaying the log still ends every transaction (Kafka eventually drops markers too; keeping
them costs one small entry per transaction and partition).

Offsets the log keeps answering after a pass:

* high watermark: unchanged - it comes from the interceptor's index (and the "index" property after a
  restart), never from the last entry, so even removing the log's last batch cannot move it back;
* log start offset: compaction never advances it (as in Kafka, where the cleaned segment keeps its base
  offset): the first offset before the pass is kept as the property ``kop.compactionStart`` and the log
  start is min(it, base offset of the first entry) (then max'ed with DeleteRecords' offset). A trim by
  retention or DeleteRecords removes the property (the log then starts at its first entry, as after
  deleting a Kafka segment); a crash between the trim and that removal leaves a log start below the
  first entry, which reads as a gap (the next batch) - harmless;
* a fetch of an offset inside a gap returns the next batch (the offset search finds the first entry
  whose index >= offset); a fetch in a gap at the very end returns nothing until new data arrives.

Readers racing with the swap: a position in a replaced ledger (a cursor-cache hint, a search in
progress) gives InvalidPositionError / NoSuchLedgerError, on which PartitionLog.read searches again.

Cost: two decodes of every record of the log per pass (like Kafka's cleaner, which re-copies the clean
section too); the loop is yielded to every few milliseconds and batches above 1 MiB are filtered in a
worker thread, so produce and fetch latencies stay low while a pass runs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kop.managed_ledger import InvalidPositionError, Position
from kop.offset.entry_format import encode_entry_header, parse_entry
from kop.protocol.compaction import batch_keys, filter_batch
from kop.protocol.records import CONTROL_BIT, TRANSACTIONAL_BIT
from kop.storage.api import NoSuchLedgerError

if TYPE_CHECKING:
    from kop.managed_ledger import ManagedLedger
    from kop.offset.entry_format import Buffer, EntryMeta

log = logging.getLogger(__name__)

COMPACTED_OFFSET_PROPERTY = "kop.compactedOffset"  # last index of the range the last pass cleaned
COMPACTION_START_PROPERTY = "kop.compactionStart"  # the log start offset as compaction found it
DELETE_HORIZON_PROPERTY = "kop.deleteHorizon"  # earliest pending tombstone delete horizon (ms), "" = none

DEFAULT_DELETE_RETENTION_MS = 86_400_000
_CHUNK_ENTRIES = 512
_CHUNK_BYTES = 1 << 20
_THREAD_BATCH_BYTES = 1 << 20  # batches at least this big are filtered in a worker thread
_SLICE_S = 0.002  # yield to the event loop after this much work


class CompactableLog(Protocol):
    """What compaction reads of a partition log (kop/offset/retention.py's Retention implements it)."""

    name: str
    ml: ManagedLedger

    async def probe(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """The headers (index, timestamps) of one entry."""
        ...

    async def last_index_of(self, ledger_id: int, entries: int) -> int:
        """The index (last offset) of the last entry of a ledger holding `entries` entries."""
        ...

    @property
    def delete_offset(self) -> int:
        """DeleteRecords' log start offset: records below it are dropped."""
        ...

    @property
    def retained_start(self) -> int | None:
        """The log start the pass must keep (min of the first entry's base offset and the start an
        earlier pass kept), None for an empty log."""
        ...

    async def load_transactions(self) -> None:
        """Makes last_stable_offset and is_aborted_batch exact (loads the producer state if needed)."""
        ...

    @property
    def last_stable_offset(self) -> int:
        """Records at or past it belong to transactions still open: not cleaned, not in the key map."""
        ...

    def is_aborted_batch(self, batch: Buffer, base_offset: int) -> bool:
        """A control batch or a batch of an aborted transaction."""
        ...


class _LogChanged(Exception):  # noqa: N818 - internal signal
    """A ledger of the pass disappeared (retention, DeleteRecords) while it was read."""


@dataclass(slots=True)
class CompactionResult:
    name: str
    compacted: bool  # False: nothing to compact, or the log changed under the pass (see reason)
    reason: str = ""
    ledgers_before: int = 0  # closed ledgers rewritten (replaced)
    ledgers_after: int = 0  # ledgers that replaced them
    entries_before: int = 0
    entries_after: int = 0
    records_before: int = 0  # records of the closed ledgers
    records_after: int = 0
    bytes_before: int = 0  # entry bytes of the closed ledgers
    bytes_after: int = 0
    keys: int = 0  # distinct keys in the key map (closed + current ledger)
    records_scanned: int = 0  # records read to build the key map
    tombstones_kept: int = 0
    tombstones_dropped: int = 0
    end_offset: int = -1  # last index of the cleaned range
    seconds: float = 0.0
    replaced: list[int] = field(default_factory=list)  # ids of the ledgers the pass replaced

    @property
    def ledgers_rewritten(self) -> int:
        return self.ledgers_before

    @property
    def records_per_second(self) -> float:
        """Records of the cleaned ledgers per second of the whole pass (map + rewrite + swap)."""
        return self.records_before / self.seconds if self.seconds > 0 else 0.0


@dataclass(slots=True)
class CleaningState:
    """What the cleaner decides from (Kafka's LogToClean)."""

    closed_bytes: int  # entry bytes of the closed ledgers
    dirty_bytes: int  # ... of those not cleaned yet (last index > compacted offset)
    compacted_offset: int  # -1: never compacted
    delete_horizon: int | None  # earliest pending tombstone horizon
    current_entries: int
    current_first_timestamp: int | None  # broker time of the current ledger's first entry

    @property
    def dirty_ratio(self) -> float:
        return self.dirty_bytes / self.closed_bytes if self.closed_bytes else 0.0


def _int_property(props: dict[str, str], key: str) -> int | None:
    value = props.get(key)
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def compaction_start(props: dict[str, str]) -> int | None:
    """The kop.compactionStart property (the log start offset compaction keeps), if set."""
    return _int_property(props, COMPACTION_START_PROPERTY)


async def cleaning_state(plog: CompactableLog) -> CleaningState:
    ml = plog.ml
    props = ml.properties
    compacted = _int_property(props, COMPACTED_OFFSET_PROPERTY)
    compacted = -1 if compacted is None else compacted
    current = ml.current_ledger_id
    closed = dirty = 0
    current_entries = 0
    for li in ml.ledgers():
        n = li.entries or 0
        if li.ledger_id == current:
            current_entries = n
            continue
        size = li.size or 0
        closed += size
        if n and await plog.last_index_of(li.ledger_id, n) > compacted:
            dirty += size
    first_ts = None
    if current is not None and current_entries:
        first_ts = (await plog.probe(current, 0)).broker_timestamp
    return CleaningState(closed, dirty, compacted, _int_property(props, DELETE_HORIZON_PROPERTY),
                         current_entries, first_ts)


async def _ledger_entries(ml: ManagedLedger, ledger_id: int, count: int) -> AsyncIterator[list]:
    """The entries 0..count-1 of one ledger, in chunks."""
    eid = 0
    while eid < count:
        try:
            got = await ml.read_entries(Position(ledger_id, eid), min(_CHUNK_ENTRIES, count - eid), _CHUNK_BYTES)
        except (InvalidPositionError, NoSuchLedgerError) as e:
            raise _LogChanged(str(e)) from None
        if not got or got[0].ledger_id != ledger_id:
            raise _LogChanged(f"ledger {ledger_id} changed")
        got = [e for e in got if e.ledger_id == ledger_id]
        yield got
        eid += len(got)


class _Slicer:
    """Yield to the event loop after every _SLICE_S of work."""

    __slots__ = ("_mark",)

    def __init__(self) -> None:
        self._mark = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._mark >= _SLICE_S:
            await asyncio.sleep(0)
            self._mark = time.perf_counter()


async def compact_log(plog: CompactableLog, delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS, *,
                      roll_current: bool = False, now_ms: int | None = None) -> CompactionResult:
    """One pass; the caller runs one at a time per log and drops what it cached of `result.replaced`."""
    started = time.perf_counter()
    result = await _compact(plog, max(0, delete_retention_ms), roll_current, now_ms)
    result.seconds = time.perf_counter() - started
    if result.compacted:
        log.info("compacted %s: %d -> %d records, %d -> %d bytes, %d -> %d ledgers in %.3fs",
                 plog.name, result.records_before, result.records_after, result.bytes_before,
                 result.bytes_after, result.ledgers_before, result.ledgers_after, result.seconds)
    return result


# long: the phases of one pass (key map, rewrite, swap) share the closed-ledger run, the result being
# long: filled and the rewriter to abort on any failure; apart they would pass all of it around
async def _compact(plog: CompactableLog, retention_ms: int, roll_current: bool,
                   now_ms: int | None) -> CompactionResult:
    ml = plog.ml
    name = plog.name
    if roll_current:
        await ml.rollover()
    await plog.load_transactions()
    infos = ml.ledgers()
    current = ml.current_ledger_id
    closed = [li for li in infos if li.ledger_id != current and li.entries]
    if not closed or infos[:len(closed)] != closed:
        return CompactionResult(name, False, "no closed ledger")
    # Transactions: like Kafka's cleaner, clean only below the last stable offset (an open transaction's
    # records may still be aborted), leave the ledgers from the one holding it on alone.
    stable = plog.last_stable_offset
    while closed and await plog.last_index_of(closed[-1].ledger_id, closed[-1].entries or 0) >= stable:
        closed.pop()
        current = None  # the key map must not read past the cleaned range's ledgers either
    if not closed:
        return CompactionResult(name, False, "no closed ledger below the last stable offset")
    current_entries = (infos[-1].entries or 0) if current is not None and infos[-1].ledger_id == current else 0
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    delete_offset = plog.delete_offset
    start_before = plog.retained_start
    res = CompactionResult(name, False, ledgers_before=len(closed),
                           entries_before=sum(li.entries or 0 for li in closed),
                           bytes_before=sum(li.size or 0 for li in closed))
    slicer = _Slicer()
    try:
        res.end_offset = await plog.last_index_of(closed[-1].ledger_id, closed[-1].entries or 0)
        # ---- 1. key -> offset of its latest record
        latest: dict[bytes, int] = {}
        scan = [(li.ledger_id, li.entries or 0) for li in closed]
        if current is not None and current_entries:
            scan.append((current, current_entries))
        for lid, n in scan:
            async for chunk in _ledger_entries(ml, lid, n):
                for entry in chunk:
                    data = entry.data
                    _, index, start = parse_entry(data)
                    batch = memoryview(data)[start:]
                    if len(batch) >= _THREAD_BATCH_BYTES:
                        header, spans = await asyncio.to_thread(batch_keys, batch)
                    else:
                        header, spans = batch_keys(batch)
                    if lid != current:
                        res.records_before += header.records_count
                    res.records_scanned += header.records_count
                    if header.attributes & CONTROL_BIT:
                        continue
                    base = index - header.last_offset_delta
                    if base >= stable or (header.attributes & TRANSACTIONAL_BIT
                                          and plog.is_aborted_batch(batch, base)):
                        continue  # an aborted record never shadows a committed one; open ones neither
                    for span in spans:
                        if span.key is not None:
                            latest[span.key] = base + span.offset_delta
                    await slicer.tick()
        res.keys = len(latest)

        def keep(offset: int, key: bytes) -> bool:
            return offset >= delete_offset and latest.get(key, offset) <= offset

        # ---- 2. rewrite the closed ledgers
        rewriter = ml.rewriter(timestamp=max(li.timestamp or 0 for li in closed) or None)
        horizon: int | None = None
        try:
            for li in closed:
                async for chunk in _ledger_entries(ml, li.ledger_id, li.entries or 0):
                    for entry in chunk:
                        data = entry.data
                        broker_ts, index, start = parse_entry(data)
                        batch = memoryview(data)[start:]
                        base = index - int.from_bytes(batch[23:27], "big", signed=True)
                        if (batch[22] & (TRANSACTIONAL_BIT | CONTROL_BIT)) == TRANSACTIONAL_BIT \
                                and plog.is_aborted_batch(batch, base):
                            await slicer.tick()
                            continue  # records of aborted transactions are removed (markers are kept)
                        if len(batch) >= _THREAD_BATCH_BYTES:
                            out = await asyncio.to_thread(filter_batch, batch, base, keep, now, retention_ms)
                        else:
                            out = filter_batch(batch, base, keep, now, retention_ms)
                        res.tombstones_kept += out.tombstones_kept
                        res.tombstones_dropped += out.tombstones_dropped
                        if out.horizon is not None and (horizon is None or out.horizon < horizon):
                            horizon = out.horizon
                        if out.kept:
                            res.records_after += out.kept
                            if out.batch is None:
                                await rewriter.add(data)
                            else:
                                await rewriter.add((encode_entry_header(broker_ts, index, out.kept), out.batch))
                        await slicer.tick()
            new_ledgers = await rewriter.finish()
            props = {
                COMPACTED_OFFSET_PROPERTY: str(res.end_offset),
                DELETE_HORIZON_PROPERTY: "" if horizon is None else str(horizon),
            }
            if start_before is not None:
                props[COMPACTION_START_PROPERTY] = str(start_before)
            swapped = await ml.replace_ledgers([li.ledger_id for li in closed], new_ledgers, props)
        except BaseException:
            await rewriter.abort()
            raise
        if not swapped:
            await rewriter.abort()
            res.reason = "the log changed during the pass"
            return res
    except _LogChanged as e:
        res.reason = f"the log changed during the pass: {e}"
        return res
    res.compacted = True
    res.ledgers_after = len(new_ledgers)
    res.entries_after = rewriter.entries_written
    res.bytes_after = rewriter.bytes_written
    res.replaced = [li.ledger_id for li in closed]
    return res
