"""The offset index (kop/offset/offset_index.py) over a bare managed ledger, no partition log.

Each entry's broker entry metadata says the offset of its last record; the index is a search over the
entries, made cheap by an LRU of entry headers and per-ledger caches (last index, max timestamp) that
appends keep exact. These tests append real Kafka batches through the index interceptor and check every
search against the model: batch i holds offsets [base_i, last_i], in log order.
"""

from __future__ import annotations

import asyncio

import pytest

from kop.managed_ledger import InvalidPositionError, ManagedLedger, Position
from kop.offset import offset_index
from kop.offset.api import EntryOffsets, NoSuchEntry, OffsetOutOfRange
from kop.offset.bounds import LogBounds
from kop.offset.compaction import COMPACTION_START_PROPERTY
from kop.offset.offset_index import INT64_MAX, OffsetIndex
from kop.protocol.records import NewRecord, build_batch
from tests.support.storage import open_bare, settled, storage_at

NAME = "public/default/persistent/index-partition-0"
SIZES = [3, 1, 5, 2, 4, 1, 1, 6, 3, 2, 5, 1, 4]  # 38 records, 13 entries


def batch(n: int, ts: int = 1_000, step: int = 1, log_append: bool = False) -> bytes:
    records = [NewRecord(b"k%d" % i, b"v%d" % i, (), ts + i * step) for i in range(n)]
    return build_batch(records, timestamp_type=1 if log_append else 0)


async def add(ml: ManagedLedger, b: bytes) -> Position:
    position = await ml.add_entry(b, int.from_bytes(b[23:27], "big") + 1)
    await settled(ml)
    return position


async def indexed(st, wired: bool = True) -> tuple[ManagedLedger, OffsetIndex, LogBounds]:
    """A bare managed ledger and its offset index; `wired`: appends update the index's caches (as in
    ManagedPartitionLog), else the index learns everything by reading (a log written by another process)."""
    ml, icpt = await open_bare(st, NAME)
    bounds = LogBounds(icpt)
    index = OffsetIndex(NAME, ml, bounds)
    if wired:
        icpt.on_durable = lambda p, c: index.note_durable(p, c)
    await index.refresh_bounds()
    return ml, index, bounds


async def fill(ml: ManagedLedger, sizes: list[int], ts0: int = 1_000) -> list[tuple[int, int, Position]]:
    """[(base, last, position)] of the appended batches."""
    out = []
    ts = ts0
    offset = ml.interceptor.durable_index + 1 if ml.interceptor is not None else 0
    for n in sizes:
        out.append((offset, offset + n - 1, await add(ml, batch(n, ts))))
        offset += n
        ts += n
    return out


def counting_reads(ml: ManagedLedger) -> list[Position]:
    """Record every header read the index makes."""
    seen: list[Position] = []
    original = ml.read_entry_prefix

    async def read_entry_prefix(position: Position, n: int) -> bytes | memoryview:
        seen.append(position)
        return await original(position, n)

    setattr(ml, "read_entry_prefix", read_entry_prefix)  # noqa: B010 - an instance attribute over the method
    return seen


# ---- offset -> position ------------------------------------------------------------------------------------


@pytest.mark.parametrize("wired", [True, False], ids=["appended-here", "learned-by-reading"])
async def test_every_offset_leads_to_the_entry_holding_it_across_ledgers(tmp_path, wired):
    async with storage_at(tmp_path, max_entries_per_ledger=4) as st:
        ml, index, bounds = await indexed(st, wired)
        written = await fill(ml, SIZES)
        if not wired:
            await index.refresh_bounds()  # what opening a log does
        assert len(ml.ledgers()) == 4 and bounds.first_offset == 0
        for base, last, position in written:
            for offset in range(base, last + 1):
                assert await index.find_position(offset) == position, offset


async def test_an_offset_not_durable_yet_is_out_of_range(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        await fill(ml, [2, 3])
        with pytest.raises(OffsetOutOfRange):
            await index.find_position(5)
        assert await index.find_position(4) == Position(ml.current_ledger_id, 1)


async def test_headers_are_read_once_then_served_from_a_bounded_lru(tmp_path, monkeypatch):
    monkeypatch.setattr(offset_index, "PROBE_CACHE", 3)
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        written = await fill(ml, [1] * 6)
        reads = counting_reads(ml)
        lid = written[0][2].ledger_id
        for eid in (0, 1, 2, 0, 1, 2):
            assert (await index.probe(lid, eid)).index == eid
        assert reads == [Position(lid, 0), Position(lid, 1), Position(lid, 2)]
        await index.probe(lid, 3)  # evicts the least recently used: entry 0
        reads.clear()
        await index.probe(lid, 2)
        await index.probe(lid, 0)
        assert reads == [Position(lid, 0)]


async def test_a_closed_ledgers_last_index_is_learned_once_the_current_ones_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(offset_index, "PROBE_CACHE", 0)  # no header cache: count what the per-ledger one saves
    async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
        ml, index, _ = await indexed(st, wired=False)
        await fill(ml, [2, 2, 2, 2])  # ledger 1: offsets 0..5, current: 6..7
        closed, current = ml.ledger_counts()
        reads = counting_reads(ml)
        for _ in range(2):
            assert await index.last_index_of(*closed) == 5
            assert await index.last_index_of(*current) == 7
        assert reads.count(Position(closed[0], 2)) == 1  # cached after the first time
        assert reads.count(Position(current[0], 0)) == 2  # the current ledger still grows


async def test_the_search_costs_a_few_reads_and_repeats_cost_none(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=64) as st:
        ml, index, _ = await indexed(st, wired=False)
        await fill(ml, [2] * 1000)  # 16 ledgers
        reads = counting_reads(ml)
        await index.find_position(1234)
        assert len(reads) <= 4 + 6 + 1  # log2(16) ledgers, log2(64) entries
        reads.clear()
        assert await index.find_position(1234) == await index.find_position(1235)
        assert reads == []


# ---- bounds ------------------------------------------------------------------------------------------------


async def test_refresh_learns_the_first_batch_and_the_start_compaction_kept(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, bounds = await indexed(st)
        assert bounds.first_offset is None and bounds.log_start_offset == 0
        await fill(ml, [3, 2, 4, 1])  # ledgers: [0..2, 3..4], [5..8, 9]
        await ml.trim_ledgers(1)
        await index.refresh_bounds()
        assert bounds.first_offset == 5 and bounds.log_start_offset == 5
        await ml.set_properties({COMPACTION_START_PROPERTY: "2"})
        await index.refresh_bounds()
        assert bounds.start_floor == 2 and bounds.log_start_offset == 2


async def test_the_first_durable_append_sets_the_first_offset(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, _, bounds = await indexed(st)
        assert bounds.first_offset is None
        await fill(ml, [3])
        assert bounds.first_offset == 0


async def test_stable_runs_a_search_again_when_the_ledger_list_changed_under_it(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        await fill(ml, [1])
        calls = 0

        async def search() -> int:
            nonlocal calls
            calls += 1
            if calls == 1:
                ml.layout_version += 1  # a trim or a compaction swap happened meanwhile
            elif calls == 2:
                raise InvalidPositionError("the ledger it was reading is gone")
            return calls

        assert await index.stable(search) == 3


# ---- position -> offsets -----------------------------------------------------------------------------------


async def test_an_entry_names_its_offsets_and_its_append_time(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        written = await fill(ml, [3, 2])
        first = await index.entry_offsets(written[0][2])
        second = await index.entry_offsets(written[1][2])
        assert (first.base_offset, first.last_offset) == (0, 2)
        assert (second.base_offset, second.last_offset) == (3, 4)
        assert 0 < first.append_time <= second.append_time
        assert isinstance(first, EntryOffsets)
        with pytest.raises(NoSuchEntry):
            await index.entry_offsets(Position(written[1][2].ledger_id, 7))
        with pytest.raises(NoSuchEntry):
            await index.entry_offsets(Position(12345, 0))


async def test_offset_of_a_position_is_clamped_to_the_log(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, bounds = await indexed(st)
        written = await fill(ml, [3, 2, 4, 1])
        await ml.trim_ledgers(1)
        await index.refresh_bounds()
        assert bounds.log_start_offset == 5
        lid = written[2][2].ledger_id
        assert await index.offset_of(Position(lid, 1)) == 9
        assert await index.offset_of(Position(-1, -1)) == 5  # Pulsar's earliest
        assert await index.offset_of(Position(INT64_MAX, INT64_MAX)) == 10  # Pulsar's latest
        assert await index.offset_of(written[0][2]) == 5  # trimmed: before the first retained entry
        assert await index.offset_of(Position(lid + 100, 0)) == 10  # after the last entry
        assert await index.offset_of(Position(lid, -1)) == 5  # entry -1 of a ledger: its first entry
        bounds.delete_offset = 7  # DeleteRecords inside the first retained batch
        assert await index.offset_of(Position(lid, 0)) == 7


async def test_offset_after_an_entry_is_its_last_offset_plus_one_or_the_log_start(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, _ = await indexed(st)
        written = await fill(ml, [3, 2, 4])
        assert [await index.offset_after(p) for _, _, p in written] == [3, 5, 9]
        await ml.trim_ledgers(1)
        cold = OffsetIndex(NAME, ml, index.bounds)  # (a header still cached would answer from the cache)
        await cold.refresh_bounds()
        assert await cold.offset_after(written[0][2]) == 5


async def test_offset_appended_since_bisects_on_the_broker_time(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        await fill(ml, [2, 2])
        await asyncio.sleep(0.01)
        later = await fill(ml, [3, 1])
        cut = (await index.entry_offsets(later[0][2])).append_time
        assert await index.offset_appended_since(cut) == 4
        assert await index.offset_appended_since(0) == 0
        assert await index.offset_appended_since(cut + 60_000) == 8  # none yet: the high watermark


async def test_entries_from_and_the_nth_position_skip_what_is_asked(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, _ = await indexed(st)
        written = await fill(ml, [3, 2, 4, 1, 2])
        positions = [p for _, _, p in written]
        assert await index.entries_from(0) == 5
        assert await index.entries_from(4) == 4  # inside the second batch
        assert await index.entries_from(12) == 0  # the high watermark
        assert await index.nth_position_from(4, 1, ()) == positions[1]
        assert await index.nth_position_from(4, 2, {positions[2]}) == positions[3]
        assert await index.nth_position_from(4, 4, ()) == positions[4]
        assert await index.nth_position_from(4, 5, ()) is None
        assert await index.nth_position_from(4, 0, ()) is None


# ---- time -> offset ----------------------------------------------------------------------------------------


async def test_the_first_record_at_or_after_a_time_even_when_times_go_backwards(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, _ = await indexed(st)
        for n, ts, step in [(3, 100, 10), (2, 50, 1), (3, 300, -100), (1, 90, 0)]:
            await add(ml, batch(n, ts, step))
        # offsets/timestamps: 0:100 1:110 2:120 | 3:50 4:51 | 5:300 6:200 7:100 | 8:90
        assert await index.offset_for_timestamp(0) == (0, 100)
        assert await index.offset_for_timestamp(111) == (2, 120)
        assert await index.offset_for_timestamp(121) == (5, 300)
        assert await index.offset_for_timestamp(301) is None
        assert await index.max_timestamp() == (5, 300)


async def test_log_append_time_batches_are_found_by_the_broker_time(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, index, _ = await indexed(st)
        await add(ml, batch(2, ts=1))
        position = await add(ml, batch(3, ts=5, log_append=True))
        appended = (await index.entry_offsets(position)).append_time
        assert await index.offset_for_timestamp(appended) == (2, appended)
        assert await index.max_timestamp() == (2, appended)


async def test_ledger_time_summaries_are_kept_by_appends_and_computed_once_otherwise(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=4) as st:
        ml, index, _ = await indexed(st)
        await fill(ml, [1, 2, 1, 3, 1, 1])
        closed = ml.ledger_counts()[0]
        reads = counting_reads(ml)
        assert await index.ledger_summary(*closed) == (1_006, 3)  # ts0 1000 + 3 records before, + 3 - 1
        assert reads == []  # kept by the appends themselves
        index.forget_ledgers({closed[0]})
        assert await index.ledger_summary(*closed) == (1_006, 3)
        assert len(reads) == 4  # one header per entry
        reads.clear()
        assert await index.ledger_summary(*closed) == (1_006, 3)
        assert reads == []


async def test_forgotten_ledgers_are_read_again(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, index, _ = await indexed(st)
        written = await fill(ml, [1, 1, 1])
        lid = written[0][2].ledger_id
        await index.probe(lid, 0)
        reads = counting_reads(ml)
        index.forget_ledgers({lid})  # compaction replaced the ledger
        await index.probe(lid, 0)
        assert reads == [Position(lid, 0)]
