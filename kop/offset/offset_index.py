"""The offset index of one partition: offset -> position, position -> offsets, time -> offset.

Nothing is stored beside the entries: every entry's broker entry metadata carries ``index`` (offset of its
last record), so the index is a search over the entries themselves, kept cheap by caches:

* entry headers come from short prefix reads (``probe``), cached in an LRU of PROBE_CACHE entries, so
  repeated searches cost a few dict lookups;
* the last index of each ledger is cached (known for every ledger written by this process through
  ``note_durable``, learned with one read otherwise; the current ledger's only from appends);
* offset -> entry (``find_position``): bisect the ledgers on their last index, then the entries of the
  found ledger (interpolation first, bisection when a guess does not halve the range);
* time -> offset (``offset_for_timestamp``): the first batch whose max timestamp (the broker timestamp for
  LogAppendTime batches) reaches the target, found ledger by ledger through cached per-ledger maxima, then
  entry by entry, then record by record inside it; ``max_timestamp`` from the same per-ledger
  (max, first entry with it) summaries, kept up to date on appends;
* compaction (kop/offset/compaction.py) leaves gaps: an offset may fall between two entries (the search
  gives the next entry) or after the last one (the position the next entry will take). Multi-step
  searches re-run when the ledger list changed under them (``stable``, ManagedLedger.layout_version).
* a damaged entry (kop/offset/damage.py) is probed as index = next intact entry's base offset - 1, so its
  offsets still lead to it; timestamp searches step over it.

A collaborator object rather than methods of ManagedPartitionLog: it needs only the managed ledger and
the LogBounds (kop/offset/bounds.py), so its tests append entries to a bare managed ledger and check each
search without a partition log, and ManagedPartitionLog forwards its PartitionLog methods here.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container
from typing import TypeVar

from kop.managed_ledger import InvalidPositionError, ManagedLedger, Position
from kop.offset.api import EntryOffsets, NoSuchEntry, OffsetOutOfRange
from kop.offset.bounds import LogBounds
from kop.offset.compaction import compaction_start
from kop.offset.damage import index_after_damage
from kop.offset.entry_format import EntryFormatError, EntryMeta, entry_meta, parse_entry
from kop.offset.interceptor import AddContext
from kop.protocol.records import TIMESTAMP_TYPE_BIT, decode_records, parse_batch_header
from kop.storage.api import LedgerDamagedError, NoSuchLedgerError, StorageError

PREFIX_BYTES = 256  # broker entry metadata + kafka-format headers + the 61-byte batch header, with room
PROBE_CACHE = 4096
INT64_MAX = (1 << 63) - 1  # Pulsar's MessageId.latest: (Long.MAX_VALUE, Long.MAX_VALUE)
_T = TypeVar("_T")


class Trimmed(Exception):  # noqa: N818 - internal signal
    """The entry found for an offset starts after it: the data was trimmed meanwhile."""


class OffsetIndex:
    """Offset and time searches over one managed ledger's entries (see the module docstring)."""

    def __init__(self, name: str, ml: ManagedLedger, bounds: LogBounds) -> None:
        self.name = name
        self.ml = ml
        self.bounds = bounds
        self._ledger_last_index: dict[int, int] = {}
        self._ledger_max: dict[int, tuple[int, int, int]] = {}  # ledger -> (max ts, entry, entries covered)
        self._probes: OrderedDict[tuple[int, int], EntryMeta] = OrderedDict()

    # ------------------------------------------------------------------------------------ upkeep

    def note_durable(self, position: Position, context: AddContext) -> None:
        """An append became durable at `position`; `context` (the interceptor's): (index before it, its
        index, its timestamp for the time index). Keeps the per-ledger caches exact without reads (the
        produce hot path: called once per append)."""
        prev, index, ts = context
        lid, eid = position
        self._ledger_last_index[lid] = index
        bounds = self.bounds
        if bounds.first_offset is None:
            bounds.first_offset = prev + 1
        if eid == 0:
            self._ledger_max[lid] = (ts, 0, 1)
        else:
            summary = self._ledger_max.get(lid)
            if summary is not None and summary[2] == eid:
                self._ledger_max[lid] = (ts, eid, eid + 1) if ts > summary[0] else (summary[0], summary[1], eid + 1)

    def forget_ledgers(self, ledger_ids: Container[int]) -> None:
        """Ledgers were replaced (compaction): their cached headers and summaries no longer hold."""
        for lid in [k for k in self._ledger_last_index if k in ledger_ids]:
            del self._ledger_last_index[lid]
        for lid in [k for k in self._ledger_max if k in ledger_ids]:
            del self._ledger_max[lid]
        for key in [k for k in self._probes if k[0] in ledger_ids]:
            del self._probes[key]

    def forget_trimmed(self) -> None:
        """Whole ledgers left the front (retention, DeleteRecords): forget what was cached of them, so that a
        position in one of them is no entry any more (offset_of/offset_after answer the log start) instead of
        the offsets it had before the trim."""
        live = {lid for lid, _ in self.ml.ledger_counts()}
        cached = set(self._ledger_last_index) | set(self._ledger_max) | {k[0] for k in self._probes}
        gone = cached - live
        if gone:
            self.forget_ledgers(gone)

    async def refresh_bounds(self) -> None:
        """Re-learn where the log starts from the managed ledger: its first entry's base offset and the
        start a compaction kept (property kop.compactionStart)."""
        bounds = self.bounds
        bounds.start_floor = compaction_start(self.ml.properties)
        first = self.ml.first_position()
        if first is None:
            bounds.first_offset = None
        else:
            bounds.first_offset = (await self.probe(first.ledger_id, first.entry_id)).base_offset

    async def stable(self, search: Callable[[], Awaitable[_T]]) -> _T:
        """Run a multi-step search again when the ledger list changed under it (trim, compaction):
        ordinals and positions it computed may then name other entries."""
        for _ in range(4):
            version = self.ml.layout_version
            try:
                found = await search()
            except (InvalidPositionError, NoSuchLedgerError, Trimmed):
                await self.refresh_bounds()
                continue
            if version == self.ml.layout_version:
                return found
            await self.refresh_bounds()
        return await search()

    # ------------------------------------------------------------------------------------ entry headers

    async def read_meta(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """The headers of one entry, read (a prefix of it; the whole entry when the prefix falls short)."""
        position = Position(ledger_id, entry_id)
        data = await self.ml.read_entry_prefix(position, PREFIX_BYTES)
        try:
            return entry_meta(data)
        except EntryFormatError:
            if len(data) < PREFIX_BYTES:
                raise  # that was the whole entry
        return entry_meta(await self.ml.read_entry(position))

    async def probe(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """The headers of one entry (cached: searches probe the same entries again and again). A damaged
        entry probes as (index after the damage, 0, -1, -1)."""
        key = (ledger_id, entry_id)
        probes = self._probes
        meta = probes.get(key)
        if meta is not None:
            probes.move_to_end(key)
            return meta
        try:
            meta = await self.read_meta(ledger_id, entry_id)
        except LedgerDamagedError as e:
            meta = EntryMeta(await index_after_damage(self.ml, e, self.read_meta, self.bounds.durable.durable_index),
                             0, -1, -1)
        probes[key] = meta
        if len(probes) > PROBE_CACHE:
            probes.popitem(last=False)
        return meta

    async def last_index_of(self, ledger_id: int, entries: int) -> int:
        """The index of the last entry of a ledger of `entries` entries (cached for closed ledgers)."""
        index = self._ledger_last_index.get(ledger_id)
        if index is None:
            index = (await self.probe(ledger_id, entries - 1)).index
            if ledger_id != self.ml.current_ledger_id:
                self._ledger_last_index[ledger_id] = index
        return index

    # ------------------------------------------------------------------------------------ offset -> position

    async def find_position(self, offset: int) -> Position:
        """Position of the first entry whose index >= offset (the entry containing `offset`, or after a
        compaction the first entry past the gap holding it; the position the next entry will take when
        `offset` lies in a gap at the end). Raises OffsetOutOfRange for an offset not durable yet.

        Ledger first: bisect on each ledger's last index (known for every ledger written by this
        process, learned with one read otherwise). Then inside the ledger: interpolation on the indexes
        of the range ends (batches of similar record counts make the first guess exact or nearly so),
        falling back to bisection whenever a guess does not at least halve the range, so the worst case
        stays O(log n) reads."""
        ledgers = [(lid, n) for lid, n in self.ml.ledger_counts() if n]
        if offset > self.bounds.durable.durable_index:
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
        elif self.bounds.first_offset is not None:
            lo_index = self.bounds.first_offset - 1
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

    async def gap_before(self, ledger_id: int, entry_id: int, offset: int) -> bool:
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
            return offset >= self.bounds.log_start_offset
        return await self.last_index_of(*previous) < offset

    # ------------------------------------------------------------------------------------ position -> offsets

    async def entry_offsets(self, position: Position) -> EntryOffsets:
        """PartitionLog.entry_offsets: the offsets of the entry at `position` (NoSuchEntry when gone)."""
        try:
            meta = await self.probe(position.ledger_id, position.entry_id)
        except (InvalidPositionError, NoSuchLedgerError, StorageError, EntryFormatError, IndexError, KeyError) as e:
            raise NoSuchEntry(f"{self.name}: no entry at {position}: {e}") from None
        return EntryOffsets(meta.base_offset, meta.index, meta.broker_timestamp)

    async def offset_of(self, position: Position) -> int:
        """PartitionLog.offset_of: first offset of the entry at `position`, clamped to the log."""
        bounds = self.bounds
        if position.ledger_id < 0:
            return bounds.log_start_offset
        if position.ledger_id >= INT64_MAX or position.entry_id >= INT64_MAX:
            return bounds.high_watermark
        try:
            got = await self.entry_offsets(Position(position.ledger_id, max(position.entry_id, 0)))
        except NoSuchEntry:  # before the first retained entry, or after the last
            last = self.ml.last_confirmed_position
            if last is None or position > last:
                return bounds.high_watermark
            return bounds.log_start_offset
        return max(got.base_offset, bounds.log_start_offset)

    async def offset_after(self, position: Position) -> int:
        """PartitionLog.offset_after: the entry's last offset + 1; the log start when the entry is gone."""
        try:
            return (await self.entry_offsets(position)).last_offset + 1
        except NoSuchEntry:
            return self.bounds.log_start_offset

    async def offset_appended_since(self, timestamp_ms: int) -> int:
        """PartitionLog.offset_appended_since: bisection on the entries' broker append times."""
        ml = self.ml
        lo, hi = 0, ml.number_of_entries
        while lo < hi:
            mid = (lo + hi) // 2
            if (await self.entry_offsets(ml.position_of(mid))).append_time >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        if lo >= ml.number_of_entries:
            return self.bounds.high_watermark
        return max((await self.entry_offsets(ml.position_of(lo))).base_offset, self.bounds.log_start_offset)

    async def entries_from(self, offset: int) -> int:
        """PartitionLog.entries_from: entries from the one holding `offset` to the end."""
        if offset >= self.bounds.high_watermark:
            return 0
        ml = self.ml
        start = await self.find_position(max(offset, self.bounds.log_start_offset))
        return max(0, ml.number_of_entries - ml.ordinal_of(start))

    async def nth_position_from(self, offset: int, n: int, skip: Container[Position]) -> Position | None:
        """PartitionLog.nth_position_from: the n-th entry from the one holding `offset`, not in `skip`."""
        if offset >= self.bounds.high_watermark or n < 1:
            return None
        ml = self.ml
        ordinal = ml.ordinal_of(await self.find_position(max(offset, self.bounds.log_start_offset)))
        while ordinal < ml.number_of_entries:
            pos = ml.position_of(ordinal)
            if pos not in skip:
                n -= 1
                if n == 0:
                    return pos
            ordinal += 1
        return None

    def end_position(self) -> Position | None:
        """The position the next entry will take (None when the ledger cannot say)."""
        with contextlib.suppress(InvalidPositionError):
            return self.ml.position_of(self.ml.number_of_entries)
        return None

    # ------------------------------------------------------------------------------------ timestamps

    async def first_record_from(self, position: Position, timestamp: int | None, min_offset: int,
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
        """PartitionLog.offset_for_timestamp (re-run when the ledger list changes under it)."""
        return await self.stable(lambda: self._offset_for_timestamp(timestamp))

    async def _offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's rule: the smallest offset whose record timestamp is >= `timestamp`, whatever the order of
        timestamps along the log. The answer lies in the first batch whose max timestamp reaches the target
        (every earlier record is below it), so: skip whole ledgers whose max timestamp (cached summaries,
        kept up to date on appends) is below the target, then walk the first ledger that reaches it entry by
        entry (header reads only), and pick the record inside that batch. A bisection on each entry's own
        max timestamp would be wrong as soon as timestamps go backwards (producers set them)."""
        log_start = self.bounds.log_start_offset
        if log_start >= self.bounds.high_watermark or not self.ml.number_of_entries:
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
            if first == 0 and (await self.ledger_summary(lid, n))[0] < timestamp:
                continue
            for eid in range(first, n):
                if (await self.ts_meta(lid, eid)).timestamp >= timestamp:
                    try:
                        found = await self.first_record_from(Position(lid, eid), timestamp, log_start)
                    except LedgerDamagedError:
                        continue  # a damaged batch holds no record a consumer could be sent to
                    if found is not None:
                        return found
        return None

    async def ts_meta(self, ledger_id: int, entry_id: int) -> EntryMeta:
        """Entry headers for timestamp searches, which step over damaged entries (timestamp -1 matches no
        target): ListOffsets then names the first intact batch, and Fetch reports any damage it meets."""
        try:
            return await self.read_meta(ledger_id, entry_id)
        except LedgerDamagedError:
            return EntryMeta(-1, 0, -1, -1)

    async def scan_max(self, ledger_id: int, first: int, stop: int,
                       best: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """(max timestamp, first entry with it) over entries first..stop-1 of a ledger."""
        for eid in range(first, stop):
            ts = (await self.ts_meta(ledger_id, eid)).timestamp
            if best is None or ts > best[0]:
                best = (ts, eid)
        return best

    async def ledger_summary(self, ledger_id: int, entries: int) -> tuple[int, int]:
        """(max timestamp, first entry with it) of a ledger's first `entries` entries, cached and extended."""
        known = self._ledger_max.get(ledger_id)
        best = None if known is None else (known[0], known[1])
        covered = 0 if known is None else known[2]
        if covered < entries:
            best = await self.scan_max(ledger_id, covered, entries, best)
            assert best is not None
            self._ledger_max[ledger_id] = (best[0], best[1], entries)
        assert best is not None
        return best

    async def max_timestamp(self) -> tuple[int, int] | None:
        """PartitionLog.max_timestamp (KIP-734), re-run when the ledger list changes under it."""
        return await self.stable(self._max_timestamp)

    async def _max_timestamp(self) -> tuple[int, int] | None:
        log_start = self.bounds.log_start_offset
        if log_start >= self.bounds.high_watermark or not self.ml.number_of_entries:
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
                    rec = await self.first_record_from(start, None, log_start)
                    if rec is not None:
                        best = (rec[1], lid, start.entry_id)
                    summary = await self.scan_max(lid, start.entry_id + 1, n)
                elif start.entry_id == 0:
                    summary = await self.ledger_summary(lid, n)
                else:
                    summary = await self.scan_max(lid, start.entry_id, n)
            elif started and n:
                summary = await self.ledger_summary(lid, n)
            else:
                continue
            if summary is not None and (best is None or summary[0] > best[0]):
                best = (summary[0], lid, summary[1])
        if best is None:
            return None
        ts, lid, eid = best
        found = await self.first_record_from(Position(lid, eid), ts, log_start, exact=True)
        if found is None:  # header max timestamp disagrees with the records: take the records' max
            found = await self.first_record_from(Position(lid, eid), None, log_start)
        return found
