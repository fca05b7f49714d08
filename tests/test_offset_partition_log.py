"""Kafka offsets over managed ledgers (kop/offset): the PartitionLog contract of kop/offset/api.py.

Every test uses real files and real Kafka v2 record batches (kop.protocol.records.build_batch). The
model the log is checked against: offsets are continuous from 0, each batch covers
[base, base + last_offset_delta], and nothing unacknowledged is ever visible.
"""

from __future__ import annotations

import asyncio
import bisect
import time

import pytest

from kop.managed_ledger import ManagedLedgerConfig, ManagedLedgerError
from kop.offset import OffsetOutOfRange, Position, open_embedded_storage
from kop.offset.entry_format import encode_entry_header, parse_entry, parse_entry_full
from kop.offset.interceptor import INDEX_PROPERTY
from kop.offset.retention import LOG_START_PROPERTY
from kop.protocol.records import NewRecord, build_batch
from tests.support.storage import run, settled, storage_at

NAME = "public/default/persistent/topic-partition-0"


def batch(n: int, ts: int = 1_000, step: int = 1, compression: int = 0, log_append: bool = False,
          value: bytes = b"v") -> bytes:
    """A valid v2 batch of n records with timestamps ts, ts+step, ..."""
    records = [NewRecord(b"k%d" % i, value + b"%d" % i, (), ts + i * step) for i in range(n)]
    return build_batch(records, compression=compression, timestamp_type=1 if log_append else 0)


async def append(log, b: bytes) -> int:
    lod = int.from_bytes(b[23:27], "big")
    return await log.append(b, lod, int.from_bytes(b[35:43], "big"))


async def fill(log, sizes, ts0=1_000) -> list[tuple[int, int, bytes]]:
    """Append batches of the given record counts; [(base, last, bytes)]."""
    out = []
    ts = ts0
    for n in sizes:
        b = batch(n, ts)
        base = await append(log, b)
        out.append((base, base + n - 1, b))
        ts += n
    return out


SIZES = [3, 1, 5, 2, 4, 1, 1, 6, 3, 2, 5, 1, 4, 2, 3, 1, 2, 7, 1, 3, 2]  # 58 records


# ---- append ----------------------------------------------------------------------------------------------


async def test_offsets_are_continuous_and_index_is_the_last_offset(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert (log.log_start_offset, log.high_watermark) == (0, 0)
        written = await fill(log, SIZES)
        expected_base = 0
        for base, last, _ in written:
            assert base == expected_base
            expected_base = last + 1
        assert log.high_watermark == sum(SIZES) and log.log_start_offset == 0


async def test_stored_entry_is_broker_entry_metadata_then_kafka_format_then_the_batch(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await fill(log, [2])
        b = batch(3, 5_000)
        before = int(time.time() * 1000)
        await append(log, b)
        entry = bytes(await log.ml.read_entry(log.ml.last_confirmed_position))
        assert entry[:2] == b"\x0e\x02"
        parsed = parse_entry_full(entry)
        assert parsed.index == 4  # offsets 2, 3, 4: the index is the last one
        assert parsed.broker_timestamp >= before and parsed.metadata.publish_time == parsed.broker_timestamp
        assert parsed.metadata.properties == {"entry.format": "kafka"}
        assert parsed.metadata.num_messages_in_batch == 3
        assert parsed.metadata.producer_name == "" and parsed.metadata.sequence_id == 0
        # the batch is stored as produced but for its base offset, the log's (outside the CRC: issue 27)
        assert bytes(parsed.batch) == (2).to_bytes(8, "big") + b[8:]


def test_entry_header_bytes():
    header = encode_entry_header(1_700_000_000_000, 41, 3)
    bem = b"\x08" + bytes([0x80, 0xD0, 0x95, 0xFF, 0xBC, 0x31]) + b"\x10\x29"
    md = (b"\x0a\x00\x10\x00\x18" + bytes([0x80, 0xD0, 0x95, 0xFF, 0xBC, 0x31])
          + b"\x22\x15\x0a\x0centry.format\x12\x05kafka" + b"\x58\x03")
    assert header == b"\x0e\x02" + len(bem).to_bytes(4, "big") + bem + len(md).to_bytes(4, "big") + md
    assert parse_entry(header + b"BATCH") == (1_700_000_000_000, 41, len(header))
    # also without broker entry metadata, and with a Pulsar 0x0e01 checksum before the metadata
    assert parse_entry(len(md).to_bytes(4, "big") + md + b"B") == (-1, -1, 4 + len(md))
    crc = b"\x0e\x01\x00\x00\x00\x00"
    no_bem = crc + len(md).to_bytes(4, "big") + md
    assert parse_entry(no_bem)[2] == len(no_bem)


async def test_high_watermark_counts_only_durable_entries(tmp_path):
    """kop#1512: the latest offset must not include appends that are not acknowledged yet."""
    async with storage_at(tmp_path, fsync="always") as st:
        log = await st.open_log(NAME)
        await fill(log, [2])
        pending = asyncio.ensure_future(append(log, batch(3)))
        await asyncio.sleep(0)  # issued to the ledger, fsync not done
        assert log.interceptor.index == 4  # assigned...
        assert log.high_watermark == 2  # ...but not visible
        with pytest.raises(OffsetOutOfRange):
            await log.read(3, 1 << 20)
        assert await pending == 2
        assert log.high_watermark == 5


async def test_a_failed_append_leaves_no_gap(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await fill(log, [2, 3])
        doomed = [asyncio.ensure_future(append(log, batch(4))) for _ in range(3)]
        await asyncio.sleep(0)
        # another owner's recovery fences the ledger under us
        await st.ledger_store.open_ledger(log.ml.current_ledger_id, recover=True)
        results = await asyncio.gather(*doomed, return_exceptions=True)
        assert all(isinstance(r, ManagedLedgerError) for r in results)
        assert log.high_watermark == 5 and log.interceptor.index == 4
        assert await append(log, batch(2)) == 5  # continues at 5 in a new ledger
        assert [(b.base_offset, b.last_offset) for b in (await log.read(0, 1 << 20)).batches] == [
            (0, 1), (2, 4), (5, 6)]


# ---- offset -> entry -------------------------------------------------------------------------------------


async def test_read_at_every_offset_returns_the_containing_batch_across_ledgers(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=4) as st:
        log = await st.open_log(NAME)
        written = await fill(log, SIZES)
        assert len(log.ml.ledger_counts()) >= 5
        bases = [w[0] for w in written]
        for offset in range(log.high_watermark):
            i = bisect.bisect_right(bases, offset) - 1
            result = await log.read(offset, 1 << 20)
            first = result.batches[0]
            assert (first.base_offset, first.last_offset) == written[i][:2]
            assert bytes(first.batch[8:]) == written[i][2][8:]  # the first 8: the stored base offset
            assert [b.base_offset for b in result.batches] == bases[i:]
            assert result.next_offset == log.high_watermark
            # one batch per read
            one = await log.read(offset, 1)
            assert len(one.batches) == 1 and one.next_offset == written[i][1] + 1
            if i + 1 < len(written):
                assert one.next_position == result.batches[1].position


async def test_search_cost_is_logarithmic_and_cached(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=64) as st:
        log = await st.open_log(NAME)
        await fill(log, [2] * 1000)  # 1000 entries in 16 ledgers
        await log.ml.close()  # reopen: nothing learned yet
    async with storage_at(tmp_path, max_entries_per_ledger=64) as st:
        log = await st.open_log(NAME)
        reads = 0
        original = log.ml.read_entry_prefix

        async def counting(position, n):
            nonlocal reads
            reads += 1
            return await original(position, n)

        log.ml.read_entry_prefix = counting
        await log.find_position(1234)
        assert reads <= 4 + 6 + 1  # log2(16) ledgers, log2(64) entries
        reads = 0
        assert await log.find_position(1234) == await log.find_position(1235)
        assert reads == 0  # all from the probe cache


async def test_read_limits(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        written = await fill(log, [3, 3, 3, 3])
        size = len(written[0][2])
        assert len((await log.read(0, size * 2)).batches) == 2
        assert len((await log.read(0, size * 2 - 1)).batches) == 1
        assert len((await log.read(0, 10)).batches) == 1  # min_one: the first batch even if larger
        r = await log.read(0, 10, min_one=False)
        assert r.batches == [] and r.next_offset == 0
        r = await log.read(log.high_watermark, 1 << 20)
        assert r.batches == [] and r.next_offset == log.high_watermark


async def test_offset_out_of_range_on_both_sides(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        log = await st.open_log(NAME)
        await fill(log, [2, 2, 2, 2, 2])
        with pytest.raises(OffsetOutOfRange):
            await log.read(11, 100)
        with pytest.raises(OffsetOutOfRange):
            await log.read(-1, 100)
        assert await log.delete_records(5) == 5
        with pytest.raises(OffsetOutOfRange):
            await log.read(4, 100)
        first = (await log.read(5, 100)).batches[0]
        assert (first.base_offset, first.last_offset) == (4, 5)  # the containing batch
        await log.read(10, 100)


async def test_cursor_hint_skips_the_search_and_a_stale_hint_is_ignored(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
        log = await st.open_log(NAME)
        await fill(log, SIZES)
        offset, hint, seen = 0, None, []
        while offset < log.high_watermark:
            r = await log.read(offset, 1, hint=hint)
            seen.append(r.batches[0].base_offset)
            offset, hint = r.next_offset, r.next_position
        assert len(seen) == len(SIZES)
        r = await log.read(0, 1, hint=Position(hint.ledger_id, 0))  # wrong entry for offset 0
        assert r.batches[0].base_offset == 0
        r = await log.read(0, 1, hint=Position(999_999, 5))  # no such ledger
        assert r.batches[0].base_offset == 0
        # the hint returned at the end of the log is where the next batch will be
        end = await log.read(log.high_watermark, 100, hint=hint)
        base = await append(log, batch(2))
        r = await log.read(base, 1 << 20, hint=end.next_position)
        assert r.batches[0].base_offset == base


# ---- recovery --------------------------------------------------------------------------------------------


async def test_index_continues_across_rollovers_and_restarts(tmp_path):
    expected = 0
    for round_ in range(4):
        async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
            log = await st.open_log(NAME)
            assert log.high_watermark == expected
            for n in [2, 1, 3, 1][: round_ + 1]:
                assert await append(log, batch(n)) == expected
                expected += n
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        offsets = [(b.base_offset, b.last_offset) for b in (await log.read(0, 1 << 30)).batches]
        assert offsets[0][0] == 0 and offsets[-1][1] == expected - 1
        assert all(a[1] + 1 == b[0] for a, b in zip(offsets, offsets[1:], strict=False))


async def test_index_survives_an_empty_last_ledger_via_the_property(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        log = await st.open_log(NAME)
        await fill(log, [3, 4])  # fills the ledger: a new, empty one becomes current
        await settled(log)
        assert log.ml.ledger_counts()[-1][1] == 0
        assert log.ml.properties[INDEX_PROPERTY] == "6"
        st.abandon()  # crash: the empty current ledger stays in the info
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert log.high_watermark == 7
        assert await append(log, batch(1)) == 7


async def test_a_crash_keeps_every_acknowledged_batch(tmp_path):
    st = await open_embedded_storage(tmp_path, fsync="always",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=5))
    log = await st.open_log(NAME)
    written = await fill(log, SIZES[:12])
    acked = written[-1][1] + 1
    in_flight = [asyncio.ensure_future(append(log, batch(2))) for _ in range(4)]
    await asyncio.sleep(0)
    st.abandon()
    await st.metadata_store.close()
    for f in in_flight:
        f.cancel()
    async with storage_at(tmp_path) as st2:
        log = await st2.open_log(NAME)
        assert log.high_watermark >= acked
        batches = (await log.read(0, 1 << 30)).batches
        assert [(b.base_offset, b.last_offset) for b in batches[:12]] == [w[:2] for w in written]
        assert all(bytes(b.batch[8:]) == w[2][8:] for b, w in zip(batches, written, strict=False))
        hwm = log.high_watermark
        assert await append(log, batch(1)) == hwm  # no gap after the recovered tail


# ---- time -> offset, max timestamp -----------------------------------------------------------------------


async def test_offset_for_timestamp_finds_the_first_record_at_or_after_it(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=4) as st:
        log = await st.open_log(NAME)
        records = []  # (offset, timestamp)
        ts = 10_000
        for i, n in enumerate(SIZES):
            b = batch(n, ts, step=3, compression=[0, 1, 3, 4, 2][i % 5])
            base = await append(log, b)
            records += [(base + k, ts + 3 * k) for k in range(n)]
            ts += 3 * n + 5
        for target in range(9_990, ts + 5):
            expected = next(((o, t) for o, t in records if t >= target), None)
            assert await log.offset_for_timestamp(target) == expected, target


def test_offset_for_timestamp_with_timestamps_going_backwards(tmp_path):
    """Producers set timestamps, so they may go backwards along the log. Kafka's rule still holds: the
    answer is the smallest offset whose record timestamp is >= the target, even when a later batch has
    smaller timestamps than an earlier one, and across ledgers and restarts."""
    import random

    rng = random.Random(7)

    async def main():
        records = []  # (offset, timestamp)
        async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
            log = await st.open_log(NAME)
            for n in SIZES:
                ts = rng.randint(1_000, 2_000)
                await append(log, batch(n, ts, step=rng.choice([-7, 0, 1, 13])))
            # the timestamps actually stored (decode them from the batches the log returns)
            from kop.protocol.records import decode_records_absolute

            res = await log.read(0, 1 << 30)
            records = [(r.offset, r.timestamp) for fb in res.batches
                       for r in decode_records_absolute(bytes(fb.base_offset.to_bytes(8, "big")) + bytes(fb.batch[8:]))]
            assert [o for o, _ in records] == list(range(sum(SIZES)))
            assert any(t2 < t1 for (_, t1), (_, t2) in zip(records, records[1:], strict=False))  # really out of order
            for target in range(900, 2_200, 3):
                expected = next(((o, t) for o, t in records if t >= target), None)
                assert await log.offset_for_timestamp(target) == expected, target
        async with storage_at(tmp_path, max_entries_per_ledger=3) as st:  # summaries rebuilt after restart
            log = await st.open_log(NAME)
            for target in range(900, 2_200, 7):
                expected = next(((o, t) for o, t in records if t >= target), None)
                assert await log.offset_for_timestamp(target) == expected, target

    run(main())


async def test_log_append_time_batches_use_the_broker_timestamp(tmp_path):
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        await fill(log, [2], ts0=1)  # CreateTime in 1970
        before = int(time.time() * 1000)
        base = await append(log, batch(3, ts=5, log_append=True))
        offset, ts = await log.offset_for_timestamp(before)
        assert offset == base and before <= ts <= int(time.time() * 1000)
        assert await log.max_timestamp() == (base, ts)


async def test_max_timestamp_is_the_first_record_with_the_largest_timestamp(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
        log = await st.open_log(NAME)
        assert await log.max_timestamp() is None
        await fill(log, [2, 3], ts0=100)
        peak = batch(4, ts=900, step=0)  # four records at 900
        base = await append(log, peak)
        await append(log, batch(2, ts=900, step=0))  # 900 again, later: not the first
        await fill(log, [3, 3, 1], ts0=500)
        assert await log.max_timestamp() == (base, 900)
    async with storage_at(tmp_path) as st:  # recomputed from the stored ledgers after a restart
        log = await st.open_log(NAME)
        assert await log.max_timestamp() == (base, 900)
        assert await log.delete_records(base + 2) == base + 2  # inside the peak batch
        assert await log.max_timestamp() == (base + 2, 900)
        await log.delete_records(base + 4)
        assert await log.max_timestamp() == (base + 4, 900)  # the next batch's first record
        await log.delete_records(base + 5)
        assert await log.max_timestamp() == (base + 5, 900)


# ---- log start: DeleteRecords and retention ---------------------------------------------------------------


async def test_delete_records_moves_the_log_start_and_releases_whole_ledgers(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        log = await st.open_log(NAME)
        written = await fill(log, [3] * 10)  # ledgers of 6 offsets each
        await settled(log)
        ledgers_before = len(log.ml.ledger_counts())
        assert await log.delete_records(13) == 13
        assert log.log_start_offset == 13
        assert len(log.ml.ledger_counts()) == ledgers_before - 2  # [0..5] and [6..11] released
        assert log.ml.properties[LOG_START_PROPERTY] == "13"
        assert await log.delete_records(7) == 13  # never backwards
        with pytest.raises(OffsetOutOfRange):
            await log.delete_records(31)
        assert await log.delete_records(30) == 30  # everything: log start = high watermark
        assert (await log.read(30, 100)).batches == []
        assert written
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert log.log_start_offset == 30 and log.high_watermark == 30


async def test_retention_deletes_closed_ledgers_and_advances_the_log_start(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=2) as st:
        log = await st.open_log(NAME)
        written = await fill(log, [2] * 7)  # 3 closed ledgers of 4 offsets + 1 entry in the current
        per_ledger = log.ml.ledgers()[0].size
        assert await log.apply_retention(-1, -1) == 0
        assert await log.apply_retention(-1, per_ledger * 2) == 1  # keeps >= 2 ledgers' worth
        assert log.log_start_offset == 4
        with pytest.raises(OffsetOutOfRange):
            await log.read(3, 100)
        await asyncio.sleep(0.01)
        assert await log.apply_retention(1, -1) == 2  # expired; never the current ledger
        assert log.log_start_offset == 12 and log.size_bytes == log.ml.total_size
        assert (await log.read(12, 100)).batches[0].base_offset == 12
        assert written[-1][0] == 12


async def test_retention_of_everything_leaves_an_empty_log_at_the_high_watermark(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=1) as st:
        log = await st.open_log(NAME)
        await fill(log, [2, 2])
        await asyncio.sleep(0.01)
        assert await log.apply_retention(0, -1) == 2
        assert (log.log_start_offset, log.high_watermark) == (4, 4)
        assert await log.offset_for_timestamp(0) is None and await log.max_timestamp() is None
    async with storage_at(tmp_path) as st:
        log = await st.open_log(NAME)
        assert (log.log_start_offset, log.high_watermark) == (4, 4)
        assert await append(log, batch(1)) == 4


# ---- the rest of the contract ------------------------------------------------------------------------------


async def test_tail_batches(tmp_path):
    async with storage_at(tmp_path, max_entries_per_ledger=3) as st:
        log = await st.open_log(NAME)
        assert await log.tail_batches(5) == []
        written = await fill(log, SIZES[:8])
        tail = await log.tail_batches(5)
        assert [(b.base_offset, b.last_offset) for b in tail] == [w[:2] for w in written[-5:]]
        assert len(await log.tail_batches(100)) == 8


async def test_wait_for_append_completes_on_the_next_durable_append(tmp_path):
    async with storage_at(tmp_path, fsync="always") as st:
        log = await st.open_log(NAME)
        waiter = log.wait_for_append()
        await asyncio.sleep(0.01)
        assert not waiter.done()
        task = asyncio.ensure_future(append(log, batch(1)))
        await asyncio.wait_for(waiter, 5)
        assert log.high_watermark == 1  # woken only once the entry is readable
        await task
        closing = log.wait_for_append()
        await log.close()
        assert closing.done()


async def test_append_waiters_that_stop_waiting_are_not_kept(tmp_path):
    """A long poll on an idle partition registers a waiter each time: cancelled ones unregister, and a
    future shared by many partitions (one Fetch) is removed by its owner, so nothing piles up."""
    async with storage_at(tmp_path, fsync="always") as st:
        log = await st.open_log(NAME)
        for _ in range(100):
            log.wait_for_append().cancel()
        await asyncio.sleep(0)  # the done callbacks run
        assert log.append_waiters == 0
        shared = asyncio.get_running_loop().create_future()
        log.add_append_waiter(shared)
        log.add_append_waiter(shared)
        assert log.append_waiters == 1
        log.discard_append_waiter(shared)
        assert log.append_waiters == 0
        log.add_append_waiter(shared)
        await append(log, batch(1))
        assert shared.done() and log.append_waiters == 0
        await log.close()
        late = asyncio.get_running_loop().create_future()
        log.add_append_waiter(late)  # a closed log completes it at once
        assert late.done()


_PRODUCER = r"""
import asyncio, sys
from kop.managed_ledger import ManagedLedgerConfig
from kop.offset import open_embedded_storage
from kop.protocol.records import NewRecord, build_batch

async def main():
    st = await open_embedded_storage(sys.argv[1], fsync="always",
                                     managed_ledger_config=ManagedLedgerConfig(max_entries_per_ledger=50))
    log = await st.open_log(sys.argv[2])
    batches = [build_batch([NewRecord(None, b"%d" % n, (), 1000)] * n) for n in (1, 2, 3)]

    async def producer(p):
        i = 0
        while True:
            n = (i + p) % 3 + 1
            base = await log.append(batches[n - 1], n - 1, 1000)
            print(base, base + n - 1, flush=True)
            i += 1

    await asyncio.gather(*(producer(p) for p in range(8)))

asyncio.run(main())
"""


def test_sigkill_of_a_producing_broker_loses_no_acknowledged_offset(tmp_path):
    """End to end crash: 8 concurrent producers, fsync=always, rollovers every 50 entries; the process is
    killed with SIGKILL. After recovery every acknowledged offset range is readable, offsets are
    continuous, and the next append continues right after the recovered end."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", _PRODUCER, str(tmp_path), NAME], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None
    acked: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    while len(acked) < 600 and time.monotonic() < deadline:
        acked.append(tuple(map(int, proc.stdout.readline().split())))
    proc.kill()
    acked += [tuple(map(int, line.split())) for line in proc.stdout.read().splitlines() if line.strip()]
    proc.stdout.close()
    proc.wait()
    assert len(acked) >= 600, len(acked)

    async def check():
        async with storage_at(tmp_path) as st:
            log = await st.open_log(NAME)
            stored = [(b.base_offset, b.last_offset) for b in (await log.read(0, 1 << 30)).batches]
            assert stored[0][0] == 0 and stored[-1][1] == log.high_watermark - 1
            assert all(a[1] + 1 == b[0] for a, b in zip(stored, stored[1:], strict=False))
            assert set(acked) <= set(stored)
            assert len(log.ml.ledger_counts()) > 5
            assert await append(log, batch(2)) == log.high_watermark - 2

    run(check())
