"""Retention and compaction of one partition (kop/offset/retention.py), over a bare managed ledger.

What removes data - DeleteRecords, retention by age and size, compaction - and what the log start becomes
after each: DeleteRecords raises it and keeps it across restarts; a trim releases whole ledgers and forgets
the start an earlier compaction kept; a compaction keeps the log start where it was and makes the offset
index forget the ledgers it replaced. (The PartitionLog-level behaviour is in test_offset_partition_log.py
and test_offset_compaction.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from kop.managed_ledger import ManagedLedger, Position
from kop.offset.api import OffsetOutOfRange
from kop.offset.bounds import LogBounds
from kop.offset.compaction import COMPACTION_START_PROPERTY
from kop.offset.offset_index import OffsetIndex
from kop.offset.retention import LOG_START_PROPERTY, Retention
from kop.offset.transactions import ProducerStateStore
from kop.protocol.records import build_batch
from tests.support.storage import open_bare, settled, storage_at

NAME = "public/default/persistent/retention-partition-0"


async def parts(st) -> tuple[ManagedLedger, Retention]:
    """A Retention over a bare managed ledger, wired as ManagedPartitionLog wires it."""
    ml, icpt = await open_bare(st, NAME)
    bounds = LogBounds(icpt)
    index = OffsetIndex(NAME, ml, bounds)
    icpt.on_durable = lambda p, c: index.note_durable(p, c)
    retention = Retention(NAME, ml, bounds, index, ProducerStateStore(NAME, ml, bounds, index, icpt))
    retention.load_delete_offset()
    await index.refresh_bounds()
    return ml, retention


async def add(ml: ManagedLedger, records: list[tuple[bytes, bytes | None]]) -> Position:
    b = build_batch([(k, v) for k, v in records])
    position = await ml.add_entry(b, len(records))
    await settled(ml)
    return position


async def fill(ml: ManagedLedger, entries: int, per_entry: int = 2) -> None:
    for i in range(entries):
        await add(ml, [(b"k%d" % (i * per_entry + j), b"v") for j in range(per_entry)])


# ---- DeleteRecords -----------------------------------------------------------------------------------------


async def test_delete_records_raises_the_log_start_and_releases_only_whole_ledgers_below_it(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 7)  # ledgers [0..3] [4..7] [8..11] and the current [12..13]
        assert await retention.delete_records(9) == 9
        assert [lid for lid, _ in ml.ledger_counts()][0] == 2  # [8..11] holds offset 9: kept
        assert retention.bounds.log_start_offset == 9 and retention.delete_offset == 9
        assert ml.properties[LOG_START_PROPERTY] == "9"
        assert await retention.delete_records(3) == 9  # never backwards, nothing written
        with pytest.raises(OffsetOutOfRange):
            await retention.delete_records(15)
        with pytest.raises(OffsetOutOfRange):
            await retention.delete_records(-1)
        assert await retention.delete_records(14) == 14  # everything: the current ledger stays
        assert ml.ledger_counts()[-1][0] == ml.current_ledger_id


async def test_the_delete_records_offset_is_read_back_at_open(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 3)
        await retention.delete_records(3)
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        _, retention = await parts(st)
        assert retention.delete_offset == 3 and retention.bounds.log_start_offset == 3



async def test_a_delete_records_cancelled_once_its_start_is_being_stored_still_applies_it(tmp_path, monkeypatch):
    """A DeleteRecords whose connection closes is cancelled. Cancelled while its new log start is being stored
    (the write sent, its answer pending), it still applies it once stored: else the property says 9 while the
    log goes on serving offsets from 0 until it is reopened."""
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 7)
        gate, entered = asyncio.Event(), asyncio.Event()
        real = ml.set_properties

        async def held(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the ledger's own signature
            sent = asyncio.ensure_future(real(*args, **kwargs))  # stored now, answered when the gate opens
            entered.set()
            await gate.wait()
            return await asyncio.shield(sent)

        monkeypatch.setattr(ml, "set_properties", held)
        task = asyncio.ensure_future(retention.delete_records(9))
        await entered.wait()
        task.cancel()
        await asyncio.sleep(0)
        gate.set()
        for _ in range(200):
            if retention.bounds.log_start_offset == 9:
                break
            await asyncio.sleep(0.01)
        assert ml.properties[LOG_START_PROPERTY] == "9"
        assert retention.delete_offset == 9 and retention.bounds.log_start_offset == 9

# ---- retention -------------------------------------------------------------------------------------------


async def test_retention_by_size_spares_the_ledger_a_reader_still_needs(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 7)  # 3 closed ledgers of 4 offsets, then the current one
        assert await retention.apply_retention(-1, 0, keep_offset=5) == 1  # [0..3] only: 5 is in [4..7]
        assert retention.bounds.log_start_offset == 4
        assert await retention.apply_retention(-1, 0) == 2  # all closed ledgers
        assert retention.bounds.log_start_offset == 12 and retention.bounds.first_offset == 12


async def test_a_trimmed_entry_is_no_entry_any_more_even_when_its_headers_were_cached(tmp_path):
    """A reader that looked at an entry before retention took its ledger must not get its old offsets back
    (a Pulsar cursor's mark-delete position in a trimmed ledger maps to the log start)."""
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 5)  # [0..3] [4..7] and the current [8..9]
        first = ml.first_position()
        assert first is not None
        assert await retention.index.offset_after(first) == 2  # cached now
        assert await retention.apply_retention(-1, 0) == 2
        assert retention.bounds.log_start_offset == 8
        assert await retention.index.offset_after(first) == 8
        assert await retention.index.offset_of(first) == 8


async def test_retention_by_age_never_takes_the_current_ledger(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 3)
        await asyncio.sleep(0.01)
        assert await retention.apply_retention(1, -1) == 1
        assert [n for _, n in ml.ledger_counts()] == [1]


async def test_a_trim_forgets_the_start_a_compaction_kept(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await fill(ml, 5)
        await ml.set_properties({COMPACTION_START_PROPERTY: "0"})
        await retention.index.refresh_bounds()
        assert retention.bounds.start_floor == 0
        assert await retention.apply_retention(-1, 0) == 2
        assert COMPACTION_START_PROPERTY not in ml.properties
        assert retention.bounds.start_floor is None and retention.bounds.log_start_offset == 8


# ---- compaction ------------------------------------------------------------------------------------------


async def test_compaction_keeps_the_log_start_and_the_index_forgets_the_replaced_ledgers(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        ml, retention = await parts(st)
        await add(ml, [(b"a", b"1"), (b"b", b"1")])  # 0, 1
        await add(ml, [(b"a", b"2")])  # 2
        await add(ml, [(b"b", b"2"), (b"c", b"1")])  # 3, 4
        await add(ml, [(b"a", b"3")])  # 5
        before = [lid for lid, _ in ml.ledger_counts()]
        state = await retention.cleaning_state()
        assert state.compacted_offset == -1 and state.dirty_bytes > 0
        result = await retention.compact(roll_current=True)
        assert result.compacted and set(result.replaced) <= set(before)
        assert retention.bounds.first_offset == 3  # offsets 0..2 were superseded
        assert retention.bounds.log_start_offset == 0  # but the log still starts where it did
        assert retention.retained_start == 0
        assert await retention.index.find_position(1) == await retention.index.find_position(3)
        assert (await retention.probe(*await retention.index.find_position(5))).index == 5
        assert (await retention.cleaning_state()).compacted_offset == 5


async def test_a_pass_reads_the_log_through_the_retention_part(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, retention = await parts(st)
        await fill(ml, 3)
        bounds = retention.bounds
        bounds.delete_offset = 2
        assert (retention.delete_offset, retention.retained_start) == (2, 0)
        assert await retention.last_index_of(ml.current_ledger_id, 3) == 5
        await retention.load_transactions()  # no transaction ever: nothing to load
        assert retention.txn.table is None and retention.last_stable_offset == 6
        assert not retention.is_aborted_batch(build_batch([(b"k", b"v")]), 0)
