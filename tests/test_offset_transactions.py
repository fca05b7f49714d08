"""Transactions in the partition log (kop/offset/transactions.py + producer_state.py), on real files:
markers take an offset, the last stable offset, the aborted index, recovery after a clean restart and
after a crash, and compaction never bringing aborted data back. The last section drives the producer
state's I/O part (ProducerStateStore) on its own, over a bare managed ledger: load, replay, snapshots."""

from __future__ import annotations

import asyncio

import pytest

from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import open_embedded_storage
from kop.offset.producer_state import AbortedTxn, SequenceError, control_type
from kop.offset.transactions import PRODUCER_STATE_PROPERTY
from kop.protocol.records import build_batch, decode_records, parse_batch_header
from tests.support.storage import settled, storage_at

NAME = "public/default/persistent/txn-partition-0"


def txn(pid: int, seq: int, values: list[bytes], epoch: int = 0, keys: list[bytes] | None = None) -> bytearray:
    keys = keys or [b"k"] * len(values)
    return bytearray(build_batch(list(zip(keys, values, strict=True)), producer_id=pid, producer_epoch=epoch,
                                 base_sequence=seq, is_transactional=True))


def plain(values: list[bytes], keys: list[bytes] | None = None) -> bytearray:
    keys = keys or [b"k"] * len(values)
    return bytearray(build_batch(list(zip(keys, values, strict=True))))


async def produce(log, b: bytearray, pid: int = -1, epoch: int = -1, seq: int = -1) -> int:
    """What the produce path does: producer-state checks, then the append."""
    table = await log.ensure_snapshot() if b[22] & 0x10 else await log.producer_state()
    h = parse_batch_header(b)
    table.check(h.producer_id, h.producer_epoch, h.base_sequence, h.records_count, h.is_transactional)
    fut = log.append_nowait(b, h.last_offset_delta, h.max_timestamp)
    table.record(h.producer_id, h.producer_epoch, h.base_sequence, h.records_count, fut, h.is_transactional)
    return await fut


async def scenario(log) -> dict[str, int]:
    """p1 commits 2 records, p2 aborts 3 around them, p3 stays open: offsets
    0-1 p1 | 2-4 p2 | 5 plain | 6 commit p1 | 7 abort p2 | 8 p3 (open)."""
    assert await produce(log, txn(1, 0, [b"c1", b"c2"])) == 0
    assert await produce(log, txn(2, 0, [b"a1", b"a2", b"a3"])) == 2
    assert await produce(log, plain([b"p"])) == 5
    assert log.last_stable_offset == 0
    assert await log.write_txn_marker(1, 0, True, 0) == 6
    assert log.last_stable_offset == 2
    assert await log.write_txn_marker(2, 0, False, 0) == 7
    assert log.last_stable_offset == 8
    assert await produce(log, txn(3, 0, [b"o1"])) == 8
    return {"hw": 9, "lso": 8}


def check_scenario(log) -> None:
    assert log.high_watermark == 9
    assert log.last_stable_offset == 8
    assert log.aborted_transactions(0, 9) == [AbortedTxn(2, 2, 7, 8)]
    assert log.aborted_transactions(8, 9) == []


async def test_markers_lso_and_aborted_index(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await scenario(log)
        check_scenario(log)
        batches = (await log.read(6, 1 << 20)).batches
        marker = batches[0].batch
        h = parse_batch_header(marker)
        assert (h.is_control, h.is_transactional, h.producer_id, h.base_sequence, h.records_count) == \
            (True, True, 1, -1, 1)
        (rec,) = decode_records(marker)
        assert rec.key == b"\x00\x00\x00\x01" and rec.value == b"\x00\x00\x00\x00\x00\x00"  # COMMIT, epoch 0
        assert control_type(batches[1].batch) == 0  # ABORT
        assert log.is_aborted_batch(batches[1].batch, 7)  # markers are never data
        two = (await log.read(2, 1 << 20)).batches[0]
        assert log.is_aborted_batch(two.batch, two.base_offset)
        one = (await log.read(0, 1 << 20)).batches[0]
        assert not log.is_aborted_batch(one.batch, one.base_offset)


async def test_marker_checks(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await produce(log, txn(1, 0, [b"x"], epoch=3))
        await log.write_txn_marker(1, 3, False, 5)
        with pytest.raises(SequenceError) as e:
            await log.write_txn_marker(1, 2, True, 5)
        assert e.value.error == "INVALID_PRODUCER_EPOCH"
        with pytest.raises(SequenceError) as e:
            await log.write_txn_marker(1, 3, True, 4)
        assert e.value.error == "TRANSACTION_COORDINATOR_FENCED"
        # a producer this partition never saw: the marker is written, it takes an offset, indexes nothing
        hw = log.high_watermark
        assert await log.write_txn_marker(77, 0, False, 0) == hw
        assert log.high_watermark == hw + 1 and log.last_stable_offset == hw + 1
        assert log.aborted_transactions(0, hw + 1) == [AbortedTxn(1, 0, 1, 2)]


async def test_clean_restart_recovers_open_transactions_and_the_aborted_index(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await scenario(log)
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert PRODUCER_STATE_PROPERTY in log.ml.properties
        await log.producer_state()
        check_scenario(log)
        # the open transaction ends after the restart; the producer's sequences were remembered
        table = await log.producer_state()
        with pytest.raises(SequenceError):
            table.check(3, 0, 5, 1, True)
        assert await log.write_txn_marker(3, 0, False, 0) == 9
        assert log.last_stable_offset == 10
        assert log.aborted_transactions(0, 10) == [AbortedTxn(2, 2, 7, 8), AbortedTxn(3, 8, 9, 10)]


async def test_crash_recovery_replays_from_the_snapshot(tmp_path):
    """No snapshot at close (a crash): the first transactional write stored one; replay rebuilds the rest."""
    st = await open_embedded_storage(tmp_path, fsync="always",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=3))
    log = await st.open_log(NAME)
    for i in range(5):  # history before any transaction: bounded tail replay is enough for it
        await produce(log, plain([b"%d" % i]))
    await scenario_shifted(log, 5)
    st.abandon()
    await st.metadata_store.close()
    async with storage_at(tmp_path) as st2:
        log = await st2.open_log(NAME)
        await log.producer_state()
        assert log.high_watermark == 14
        assert log.last_stable_offset == 13
        assert log.aborted_transactions(0, 14) == [AbortedTxn(2, 7, 12, 13)]


async def scenario_shifted(log, base: int) -> None:
    assert await produce(log, txn(1, 0, [b"c1", b"c2"])) == base
    assert await produce(log, txn(2, 0, [b"a1", b"a2", b"a3"])) == base + 2
    assert await produce(log, plain([b"p"])) == base + 5
    await log.write_txn_marker(1, 0, True, 0)
    await log.write_txn_marker(2, 0, False, 0)
    await produce(log, txn(3, 0, [b"o1"]))


async def test_periodic_snapshots_bound_the_replay(tmp_path, monkeypatch):
    from kop.offset import transactions

    monkeypatch.setattr(transactions, "SNAPSHOT_EVERY_OFFSETS", 4)
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await scenario(log)
        for i in range(6):
            await produce(log, plain([b"%d" % i]))
        await asyncio.sleep(0.05)
        await settled(log)
        import json
        snap = json.loads(log.ml.properties[PRODUCER_STATE_PROPERTY])
        assert snap["offset"] > 9
        assert snap["ongoing"] == [[3, 8]]
        assert snap["aborted"] == [[2, 2, 7, 8]]


async def test_a_concurrent_load_and_appends_miss_nothing(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await scenario(log)
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        loads = [asyncio.ensure_future(log.producer_state()) for _ in range(3)]
        writes = [asyncio.ensure_future(produce(log, plain([b"x"]))) for _ in range(3)]
        tables = await asyncio.gather(*loads)
        await asyncio.gather(*writes)
        assert tables[0] is tables[1] is tables[2]
        assert log.last_stable_offset == 8


async def test_compaction_drops_aborted_records_and_keeps_markers(tmp_path):
    """An aborted value of a key must neither survive nor shadow the committed one; markers stay."""
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        log = await st.open_log(NAME)
        await produce(log, plain([b"committed"], keys=[b"K"]))                  # 0
        await produce(log, txn(2, 0, [b"aborted"], keys=[b"K"]))               # 1
        await log.write_txn_marker(2, 0, False, 0)                             # 2
        await produce(log, txn(1, 0, [b"open"], keys=[b"J"]))                  # 3
        await produce(log, plain([b"j-plain"], keys=[b"J"]))                   # 4 (after the open one)
        await produce(log, plain([b"x"], keys=[b"Z"]))                         # 5
        await produce(log, plain([b"y"], keys=[b"Y"]))                         # 6
        res = await log.compact(roll_current=True)
        assert res.compacted
        batches = (await log.read(0, 1 << 20)).batches
        seen = {}
        for b in batches:
            h = parse_batch_header(b.batch)
            if h.is_control:
                seen[b.base_offset] = "marker"
                continue
            for r in decode_records(b.batch):
                seen[b.base_offset + r.offset_delta] = r.value
        assert seen[0] == b"committed"  # not shadowed by the aborted value
        assert 1 not in seen  # the aborted record is gone
        assert seen[2] == "marker"
        assert seen[3] == b"open"  # at/after the LSO: untouched
        assert seen[4] == b"j-plain"
        assert log.last_stable_offset == 3
        await log.write_txn_marker(1, 0, True, 0)
        res = await log.compact(roll_current=True)
        seen = {}
        for b in (await log.read(0, 1 << 20)).batches:
            if not parse_batch_header(b.batch).is_control:
                for r in decode_records(b.batch):
                    seen[b.base_offset + r.offset_delta] = r.value
        assert seen == {0: b"committed", 4: b"j-plain", 5: b"x", 6: b"y"}


async def test_damaged_entries_do_not_stop_the_rebuild(tmp_path, caplog):
    """A damaged entry (checksum) in the replayed range: the state is rebuilt from the intact entries and
    the partition stays writable (its reads of the damaged range answer KAFKA_STORAGE_ERROR elsewhere)."""
    from kop.storage.local.ledgers import check_ledger_file

    st = await open_embedded_storage(tmp_path, fsync="always",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=3))
    log = await st.open_log(NAME)
    await scenario(log)  # 0-1 p1 | 2-4 p2 | 5 plain | 6 commit | 7 abort | 8 p3 open: entries 0..5
    damaged_ledger = log.ml.ledger_counts()[0][0]  # entries: p1, p2, plain (offset 5)
    st.abandon()
    await st.metadata_store.close()
    path = tmp_path / "ledgers" / f"{damaged_ledger}.log"
    chk = check_ledger_file(str(path))
    stop = chk.starts[3] if chk.entries > 3 else chk.end
    with open(path, "r+b") as f:  # inside the plain batch's records
        f.seek(stop - 3)
        b = f.read(1)
        f.seek(stop - 3)
        f.write(bytes([b[0] ^ 0x40]))
    async with storage_at(tmp_path) as st2:
        log = await st2.open_log(NAME)
        table = await log.producer_state()
        assert log.last_stable_offset == 8 and table.ongoing == {3: 8}
        assert log.aborted_transactions(0, 9) == [AbortedTxn(2, 2, 7, 8)]
        assert await log.write_txn_marker(3, 0, True, 0) == 9
    assert "producer state rebuilt without damaged entries 2..2" in caplog.text


async def test_append_of_a_transactional_batch_tracks_its_transaction(tmp_path, monkeypatch):
    """append() (the group coordinator's TxnOffsetCommit path) loads and snapshots the producer state before
    a transactional batch: its transaction is known even past the bounded tail a snapshot-less load reads."""
    from kop.offset import transactions

    monkeypatch.setattr(transactions, "PRODUCER_STATE_TAIL_ENTRIES", 2)
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await log.append(plain([b"a"]), 0, 0)
        assert await log.append(txn(7, 0, [b"t"]), 0, 0) == 1
        assert PRODUCER_STATE_PROPERTY in log.ml.properties
        for i in range(5):
            await log.append(plain([b"%d" % i]), 0, 0)
        assert log.last_stable_offset == 1
        st.abandon()
        await st.metadata_store.close()
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await log.load_transactions()
        assert log.last_stable_offset == 1  # found through the snapshot + replay, not the 2-entry tail


# ---- ProducerStateStore on its own ---------------------------------------------------------------------------


async def bare_store(st):
    """A ProducerStateStore over a bare managed ledger, wired as ManagedPartitionLog wires it."""
    from kop.offset.bounds import LogBounds
    from kop.offset.offset_index import OffsetIndex
    from kop.offset.transactions import ProducerStateStore
    from tests.support.storage import open_bare

    ml, icpt = await open_bare(st, NAME)
    bounds = LogBounds(icpt)
    index = OffsetIndex(NAME, ml, bounds)
    store = ProducerStateStore(NAME, ml, bounds, index, icpt)

    def on_durable(position, context):
        if store.table is not None:
            store.on_durable(context[1])
        index.note_durable(position, context)

    icpt.on_durable = on_durable
    await index.refresh_bounds()
    return ml, store


def idempotent(pid: int, seq: int, n: int) -> bytearray:
    return bytearray(build_batch([(b"k", b"v")] * n, producer_id=pid, producer_epoch=0, base_sequence=seq))


async def add(ml, b: bytearray) -> int:
    """Append like the produce path would after its checks; the batch's base offset."""
    h = parse_batch_header(b)
    await ml.add_entry(b, h.last_offset_delta + 1)
    await settled(ml)
    return ml.interceptor.durable_index - h.last_offset_delta


async def test_without_a_snapshot_the_load_replays_the_tail_for_idempotence(tmp_path, monkeypatch):
    from kop.offset import transactions

    monkeypatch.setattr(transactions, "PRODUCER_STATE_TAIL_ENTRIES", 2)
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        for seq in (0, 2, 4):
            await add(ml, idempotent(5, seq, 2))
        table, again = await asyncio.gather(store.load(), store.load())  # concurrent loads share one
        assert table is again is store.table
        assert [(b.first_seq, b.base_offset) for b in table.producers[5].batches] == [(2, 2), (4, 4)]
        assert store.interceptor.on_txn_issue == table.on_issue  # told of transactional adds from now on
        assert PRODUCER_STATE_PROPERTY not in ml.properties


async def test_readers_load_only_a_partition_that_ever_saw_a_transaction(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        await add(ml, idempotent(5, 0, 1))
        await store.load_transactions()
        assert store.table is None and store.last_stable_offset == 1
        assert store.aborted_transactions(0, 1) == []
        await ml.set_properties({PRODUCER_STATE_PROPERTY: '{"v":1,"offset":0,"producers":[],"ongoing":[],'
                                                       '"aborted":[],"dropped_aborted":0}'})
        await store.load_transactions()
        assert store.table is not None


async def test_a_snapshot_then_the_entries_after_it_rebuild_the_state(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        await add(ml, plain([b"p"]))
        table = await store.ensure_snapshot()  # before the first transactional write
        assert table.snapshot_offset == 1 and PRODUCER_STATE_PROPERTY in ml.properties
        assert await add(ml, txn(7, 0, [b"t1", b"t2"])) == 1
        assert store.last_stable_offset == 1  # the open transaction holds read_committed back
        marker = await store.marker_batch(7, 0, False, 0)
        assert parse_batch_header(marker).is_control
        assert await add(ml, marker) == 3
        assert store.last_stable_offset == 4 and store.aborted_transactions(0, 4) == [AbortedTxn(7, 1, 3, 4)]
        two = (await ml.read_entries(ml.position_of(1), 1))[0]
    async with storage_at(tmp_path) as st:  # a restart: snapshot at 1, then entries 1..3 replayed
        ml, store = await bare_store(st)
        await store.load_transactions()
        assert store.table is not None and store.table.snapshot_offset == 1
        assert store.aborted_transactions(0, 4) == [AbortedTxn(7, 1, 3, 4)]
        from kop.offset.entry_format import parse_entry

        batch = memoryview(two.data)[parse_entry(two.data)[2]:]
        assert store.is_aborted_batch(batch, 1)  # data of the aborted transaction
        assert not store.is_aborted_batch(plain([b"p"]), 0)
        assert store.is_aborted_batch(marker, 3)  # markers are never data


async def test_a_marker_from_an_older_coordinator_is_refused(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        await store.ensure_snapshot()
        await add(ml, txn(7, 0, [b"t"]))
        await add(ml, await store.marker_batch(7, 0, True, 3))
        await add(ml, txn(7, 1, [b"t"]))
        with pytest.raises(SequenceError):
            await store.marker_batch(7, 0, True, 2)


async def test_snapshots_follow_the_durable_end_and_close_writes_a_last_one(tmp_path, monkeypatch):
    from kop.offset import transactions

    monkeypatch.setattr(transactions, "SNAPSHOT_EVERY_OFFSETS", 4)
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        table = await store.ensure_snapshot()
        assert table.snapshot_offset == 0
        for _ in range(5):
            await add(ml, plain([b"p"]))
        # The snapshot is taken by a background task whose metadata write may
        # wait on a thread; a loaded machine needs more than a few loop turns.
        deadline = asyncio.get_running_loop().time() + 30
        while table.snapshot_offset < 4 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        assert table.snapshot_offset >= 4  # taken in the background
        await add(ml, plain([b"p"]))
        await store.close()
        assert table.snapshot_offset == 6 and store.closed


async def test_close_writes_no_snapshot_for_a_partition_that_never_had_one(tmp_path):
    async with storage_at(tmp_path) as st:
        ml, store = await bare_store(st)
        await add(ml, idempotent(5, 0, 1))
        await store.load()
        await store.close()
        assert PRODUCER_STATE_PROPERTY not in ml.properties


async def test_the_first_loader_cancelled_does_not_cancel_the_others(tmp_path, monkeypatch):
    """Two requests wait for the partition's producer state; the first, which loads it, is cancelled (its client's
    connection closed). The other still gets the table: before, the load's future took the first one's
    CancelledError, which ended the other's request as cancelled too - another client's Kafka connection aborted, a
    Pulsar connection's command loop ended with the connection left open."""
    async with storage_at(tmp_path) as st:
        _, store = await bare_store(st)
        gate = asyncio.Event()
        real = store._load

        async def held():  # noqa: ANN202 - the store's own
            await gate.wait()
            return await real()

        monkeypatch.setattr(store, "_load", held)
        first = asyncio.ensure_future(store.load())
        await asyncio.sleep(0)
        other = asyncio.ensure_future(store.load())
        await asyncio.sleep(0)
        first.cancel()
        await asyncio.sleep(0)
        gate.set()
        table = await asyncio.wait_for(other, 10)
        assert table is store.table is not None
